package modelsdktest_test

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/modelsdktest"
)

func TestParse(t *testing.T) {
	r, err := modelsdktest.Parse([]byte("a warning\n{\"ok\":false,\"status\":429,\"error\":{\"type\":\"x\"},\"message\":\"m\"}\n"), 3)
	if err != nil || r.OK || r.HTTPStatus() != 429 || r.Exit != 3 || r.Message != "m" || string(r.Error) != `{"type":"x"}` {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := modelsdktest.Parse([]byte("node: not found\n"), 127); err == nil || !strings.Contains(err.Error(), "exit 127") {
		t.Fatalf("no result: %v", err)
	}
	if _, err := modelsdktest.Parse([]byte("{not json\n"), 0); err == nil {
		t.Fatal("a broken line parsed")
	}
}

// FuzzParse: whatever a script prints, Parse answers without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"ok":true,"text":"ok","usage":{"prompt_tokens":1},"events":3}`), 0)
	f.Add([]byte("x\n{\"status\":\"429\"}\n"), 3)
	f.Fuzz(func(t *testing.T, out []byte, exit int) {
		r, err := modelsdktest.Parse(out, exit)
		if err == nil && r.Exit != exit {
			t.Fatalf("exit %d, want %d", r.Exit, exit)
		}
		_ = r.HTTPStatus()
		_ = r.UsageMap()
	})
}
