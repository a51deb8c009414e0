package auditlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

const goldenLeaf = `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`

func goldenEvent() kin.Event {
	return kin.Event{
		Seq:    7,
		Time:   time.Date(2026, 11, 21, 15, 2, 39, 123456789, time.UTC),
		Type:   kin.EventChildSpawned,
		Agent:  2,
		Parent: 1,
		Data:   json.RawMessage(`{"parent":1,"child":2,"generation":1}`),
	}
}

func TestAppendLeafGolden(t *testing.T) {
	if got := string(Leaf(goldenEvent())); got != goldenLeaf {
		t.Fatalf("Leaf:\n got %s\nwant %s", got, goldenLeaf)
	}
	// AppendLeaf appends to what dst holds.
	if got := string(AppendLeaf([]byte("prefix"), goldenEvent())); got != "prefix"+goldenLeaf {
		t.Fatalf("AppendLeaf with a prefix: %s", got)
	}
	if got, want := LeafHash(goldenEvent()), tlog.RecordHash([]byte(goldenLeaf)); got != want {
		t.Fatalf("LeafHash = %v, want RecordHash of the leaf %v", got, want)
	}
}

func TestAppendLeafTimeAndEmptyData(t *testing.T) {
	// A whole second in another zone is written in UTC without a fraction;
	// empty data is written as {}.
	berlin := time.FixedZone("CET", 3600)
	e := kin.Event{Seq: 1, Time: time.Date(2026, 1, 2, 4, 5, 6, 0, berlin), Type: "x", Agent: 0, Parent: 0}
	want := `{"seq":1,"time":"2026-01-02T03:05:06Z","type":"x","agent":0,"parent":0,"data":{}}`
	if got := string(Leaf(e)); got != want {
		t.Fatalf("Leaf:\n got %s\nwant %s", got, want)
	}
	// Trailing zero fraction digits are dropped.
	e.Time = time.Date(2026, 1, 2, 3, 5, 6, 100_000_000, time.UTC)
	if got := string(Leaf(e)); !strings.Contains(got, `"time":"2026-01-02T03:05:06.1Z"`) {
		t.Fatalf("Leaf with 100ms: %s", got)
	}
	// The parsed event of an empty-data leaf has data {}.
	p, err := ParseLeaf(Leaf(e))
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Data) != "{}" {
		t.Fatalf("data = %s, want {}", p.Data)
	}
}

func TestParseLeafRoundTrip(t *testing.T) {
	events := []kin.Event{goldenEvent()}
	l := newTestLog(t, 1)
	for range 200 {
		events = append(events, l.add(t, l.randomEvent()))
	}
	events = append(events, kin.Event{Seq: 1<<63 - 1, Time: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), Type: "", Agent: -5, Parent: 1<<63 - 1, Data: json.RawMessage(`{"nested":{"a":[1,2,{"b":null}]},"s":"\u2028"}`)})
	for _, e := range events {
		leaf := Leaf(e)
		got, err := ParseLeaf(leaf)
		if err != nil {
			t.Fatalf("ParseLeaf(%s): %v", leaf, err)
		}
		if got.Seq != e.Seq || !got.Time.Equal(e.Time) || got.Time.Location() != time.UTC || got.Type != e.Type ||
			got.Agent != e.Agent || got.Parent != e.Parent || !bytes.Equal(got.Data, e.Data) {
			t.Fatalf("ParseLeaf(%s) = %+v, want %+v", leaf, got, e)
		}
		if again := Leaf(got); !bytes.Equal(again, leaf) {
			t.Fatalf("Leaf(ParseLeaf(l)) = %s, want %s", again, leaf)
		}
	}
}

func TestParseLeafRefusesNonCanonical(t *testing.T) {
	tests := []struct{ name, leaf string }{
		{"reordered members", `{"time":"2026-11-21T15:02:39.123456789Z","seq":7,"type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`},
		{"reordered agent and parent", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","parent":1,"agent":2,"data":{"parent":1,"child":2,"generation":1}}`},
		{"space after colon", `{"seq": 7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`},
		{"space after comma", `{"seq":7, "time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`},
		{"space before data", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data": {"parent":1,"child":2,"generation":1}}`},
		{"leading space", ` ` + goldenLeaf},
		{"trailing newline", goldenLeaf + "\n"},
		{"duplicate member", `{"seq":7,"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`},
		{"duplicate last member", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1},"data":{}}`},
		{"unknown member", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1},"extra":1}`},
		{"member in other case", `{"Seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}`},
		{"missing member", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"data":{"parent":1,"child":2,"generation":1}}`},
		{"seq 0", `{"seq":0,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"seq negative", `{"seq":-3,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"seq as float", `{"seq":7.0,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"seq as string", `{"seq":"7","time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"data an array", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":[1,2]}`},
		{"data a string", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":"x"}`},
		{"data a number", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":1}`},
		{"data null", `{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":null}`},
		{"trailing object", goldenLeaf + `{}`},
		{"trailing brace", goldenLeaf + `}`},
		{"trailing garbage", goldenLeaf + `x`},
		{"time not UTC", `{"seq":7,"time":"2026-11-21T16:02:39.123456789+01:00","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"time with trailing zeros", `{"seq":7,"time":"2026-11-21T15:02:39.100Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"time with zero fraction", `{"seq":7,"time":"2026-11-21T15:02:39.0Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"time lower-case z", `{"seq":7,"time":"2026-11-21T15:02:39z","type":"agent.child.spawned","agent":2,"parent":1,"data":{}}`},
		{"type with needless escape", `{"seq":7,"time":"2026-11-21T15:02:39Z","type":"agent\u002echild","agent":2,"parent":1,"data":{}}`},
		{"type with escaped slash", `{"seq":7,"time":"2026-11-21T15:02:39Z","type":"a\/b","agent":2,"parent":1,"data":{}}`},
		{"type with lone surrogate escape", `{"seq":7,"time":"2026-11-21T15:02:39Z","type":"\ud800","agent":2,"parent":1,"data":{}}`},
		{"type with raw invalid UTF-8", "{\"seq\":7,\"time\":\"2026-11-21T15:02:39Z\",\"type\":\"a\xffb\",\"agent\":2,\"parent\":1,\"data\":{}}"},
		{"agent with plus", `{"seq":7,"time":"2026-11-21T15:02:39Z","type":"t","agent":+2,"parent":1,"data":{}}`},
		{"agent with leading zero", `{"seq":7,"time":"2026-11-21T15:02:39Z","type":"t","agent":02,"parent":1,"data":{}}`},
		{"not an object", `[1]`},
		{"empty", ``},
	}
	// The golden leaf itself parses, so every refusal is the change's.
	if _, err := ParseLeaf([]byte(goldenLeaf)); err != nil {
		t.Fatalf("golden leaf: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseLeaf([]byte(tt.leaf))
			if err == nil {
				t.Fatalf("ParseLeaf(%s) = %+v, want an error", tt.leaf, e)
			}
			if !strings.Contains(err.Error(), "not a kin event leaf") {
				t.Fatalf("error %q does not say it is not a leaf", err)
			}
		})
	}
}

var trickyStrings = []string{
	"",
	"plain",
	`"quoted"`,
	`back\slash`,
	`\"`,
	"new\nline\r\ttab",
	"\x00\x01\x07\x08\x0b\x0c\x1b\x1f\x7f",
	"line\u2028sep\u2029para",
	"<script>&amp;</script>",
	"héllo wörld ✓ 日本語 🦊",
	"\U0010FFFF\uFFFD\uFEFF",
	"/slash/",
}

func TestAppendStringIsJSON(t *testing.T) {
	for _, s := range trickyStrings {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendString(%q) = %s: not JSON: %v", s, b, err)
		}
		if got != s {
			t.Fatalf("appendString(%q) = %s decodes to %q", s, b, got)
		}
		// Escapes only what JSON requires: no \u escape for printable
		// or non-ASCII characters.
		for _, r := range s {
			if r >= 0x20 && r != '"' && r != '\\' && r != utf8.RuneError && !strings.ContainsRune(string(b), r) {
				t.Fatalf("appendString(%q) = %s escapes %q", s, b, r)
			}
		}
		// A leaf with s as its type round-trips.
		e := goldenEvent()
		e.Type = s
		p, err := ParseLeaf(Leaf(e))
		if err != nil {
			t.Fatalf("ParseLeaf of a leaf with type %q: %v", s, err)
		}
		if p.Type != s {
			t.Fatalf("type %q reads back as %q", s, p.Type)
		}
	}
}

func TestAppendStringInvalidUTF8(t *testing.T) {
	for _, s := range []string{"\xff", "a\xffb", "\xc3", "\xc3(", "\xed\xa0\x80", "ok\xe2\x82", "\xf4\x90\x80\x80", "\x80\x80\x80"} {
		b := appendString(nil, s)
		if !utf8.Valid(b) {
			t.Fatalf("appendString(%q) = %q is not valid UTF-8", s, b)
		}
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendString(%q) = %q: not JSON: %v", s, b, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); strings.ReplaceAll(got, "\uFFFD", "") != strings.ReplaceAll(want, "\uFFFD", "") || !strings.Contains(got, "\uFFFD") {
			t.Fatalf("appendString(%q) decodes to %q, want the valid parts and U+FFFD", s, got)
		}
		e := goldenEvent()
		e.Type = s
		leaf := Leaf(e)
		p, err := ParseLeaf(leaf)
		if err != nil {
			t.Fatalf("ParseLeaf of a leaf with type %q: %v", s, err)
		}
		if p.Type != got {
			t.Fatalf("type %q reads back as %q, want %q", s, p.Type, got)
		}
		if again := Leaf(p); !bytes.Equal(again, leaf) {
			t.Fatalf("leaf with invalid UTF-8 type does not round-trip:\n%q\n%q", leaf, again)
		}
	}
}

func FuzzParseLeaf(f *testing.F) {
	f.Add([]byte(goldenLeaf))
	f.Add([]byte(`{"seq":1,"time":"2026-01-02T03:05:06Z","type":"x","agent":0,"parent":0,"data":{}}`))
	f.Add([]byte(`{"seq":1,"time":"2026-01-02T03:05:06.1Z","type":"a\"b\\c\n\u0001","agent":-1,"parent":9,"data":{"a":[1,"\u2028"]}}`))
	f.Add([]byte("{\"seq\":1,\"time\":\"2026-01-02T03:05:06Z\",\"type\":\"\uFFFD\",\"agent\":0,\"parent\":0,\"data\":{\"x\":\"\xff\"}}"))
	f.Add([]byte(`{"seq":0}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseLeaf(b)
		if err != nil {
			return
		}
		if again := AppendLeaf(nil, e); !bytes.Equal(again, b) {
			t.Fatalf("ParseLeaf(%q) succeeded but AppendLeaf gives %q", b, again)
		}
		if e.Seq < 1 || len(e.Data) == 0 || e.Data[0] != '{' {
			t.Fatalf("ParseLeaf(%q) accepted seq %d data %q", b, e.Seq, e.Data)
		}
	})
}
