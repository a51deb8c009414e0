package kin_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func TestEventJSONIsFlatAndRoundTrips(t *testing.T) {
	e, err := kin.NewEvent("agent.child.cancel", 5, 2, map[string]any{"parent": 2, "child": 5, "reason": "parent_dead"})
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.Time = 9, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":9,"leaf_index":8,"time":"2026-01-02T03:04:05Z","type":"agent.child.cancel","child":5,"parent":2,"reason":"parent_dead"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back kin.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seq != 9 || back.Type != e.Type || !back.Time.Equal(e.Time) || back.Agent != 5 || back.Parent != 2 {
		t.Fatalf("round trip = %+v", back)
	}
	var reason string
	if err := back.Field("reason", &reason); err != nil || reason != "parent_dead" {
		t.Fatalf("Field(reason) = %q, %v", reason, err)
	}
	if _, err := kin.NewEvent("x", 0, 0, []int{1}); err == nil {
		t.Fatal("NewEvent accepted data that is not an object")
	}
}

func TestDurationJSON(t *testing.T) {
	var d kin.Duration
	if err := json.Unmarshal([]byte(`"90s"`), &d); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("got %v, %v", d, err)
	}
	for _, bad := range []string{`90`, `"soon"`, `"-1s"`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Duration accepted %s", bad)
		}
	}
}
