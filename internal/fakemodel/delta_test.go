package fakemodel

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzTextDelta: the delta event's data made by hand is, byte for byte,
// what encoding/json makes of the map it stands for (HTML escapes, invalid
// UTF-8 and all), so a stream reads as it did when each was encoded.
func FuzzTextDelta(f *testing.F) {
	for _, s := range []string{"", "x", "héllo", "<a href=\"&\">", "\u2028\u2029", "\xff\xfe", "line\nbreak\t\"q\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, c string) {
		want, err := json.Marshal(map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": c}, "type": "content_block_delta"})
		if err != nil {
			t.Fatal(err)
		}
		if got := textDelta(c); !bytes.Equal(got, want) {
			t.Fatalf("textDelta(%q) = %s, want %s", c, got, want)
		}
	})
}
