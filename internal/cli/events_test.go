package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// jsonLines decodes JSON lines into events.
func jsonLines(t *testing.T, s string) []kin.Event {
	t.Helper()
	var out []kin.Event
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var e kin.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func eventSeqs(evs []kin.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestEvents(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d) // 7 registrations and 6 spawns: events 1..13
	if _, err := d.Client.SetStatus(context.Background(), kin.StatusRequest{ID: 3, Action: kin.ActionSuspend, Reason: "audit 42"}); err != nil {
		t.Fatal(err)
	}

	r := kinAt(t, d, "events")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 14 {
		t.Fatalf("%d lines, want 14:\n%s", len(lines), r.stdout)
	}
	f := strings.Fields(lines[2])
	if len(f) < 3 || f[0] != "3" || f[2] != kin.EventChildSpawned {
		t.Errorf("line 3 = %q", lines[2])
	}
	if _, err := time.Parse(timeFormat, f[1]); err != nil {
		t.Errorf("line 3's time: %v", err)
	}
	if !strings.HasSuffix(lines[2], " child=2 generation=1 parent=1") {
		t.Errorf("line 3 = %q", lines[2])
	}
	if !strings.Contains(lines[0], ` responsible="Dr. Schmidt" `) || !strings.Contains(lines[0], " name=Research-Coordinator ") {
		t.Errorf("line 1 = %q", lines[0])
	}
	if !strings.Contains(lines[13], "agent.status") || !strings.Contains(lines[13], ` reason="audit 42"`) || !strings.Contains(lines[13], " to=suspended") {
		t.Errorf("line 14 = %q", lines[13])
	}

	r = kinAt(t, d, "events", "--json")
	wantOK(t, r)
	evs := jsonLines(t, r.stdout)
	if len(evs) != 14 || evs[0].Seq != 1 || evs[0].Type != kin.EventAgentRegistered || evs[13].Agent != 3 {
		t.Errorf("events --json: %v", evs)
	}

	for _, c := range []struct {
		args []string
		want []int64
	}{
		{[]string{"--since", "11"}, []int64{12, 13, 14}},
		{[]string{"--limit", "2"}, []int64{1, 2}},
		{[]string{"--type", kin.EventAgentStatus}, []int64{14}},
		{[]string{"--type", kin.EventAgentStatus, "--type", kin.EventChildSpawned, "--since", "10"}, []int64{11, 13, 14}},
		{[]string{"--agent", "7"}, []int64{12, 13}},
	} {
		r := kinAt(t, d, append([]string{"events", "--json"}, c.args...)...)
		wantOK(t, r)
		if got := eventSeqs(jsonLines(t, r.stdout)); !equalSeqs(got, c.want) {
			t.Errorf("events %v = %v, want %v", c.args, got, c.want)
		}
	}

	r = kinAt(t, d, "events", "--since", "100")
	wantOK(t, r)
	if r.stdout != "" {
		t.Errorf("no events: %q", r.stdout)
	}
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEventsFollow(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantOK(t, kinAt(t, d, "register", "--name", "first", "--responsible", "ops", "--json"))

	for _, jsonOut := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		args := []string{"--home", d.Home, "events", "--follow", "--type", kin.EventAgentRegistered}
		if jsonOut {
			args = append(args, "--json")
		}
		done := make(chan int, 1)
		go func() { done <- Run(ctx, args, nil, &out, &errb) }()

		// The stored event comes first, then the live ones.
		kintest.WaitFor(t, 10*time.Second, "the stored event", func() bool { return strings.Contains(out.String(), "first") })
		name := "live-text"
		if jsonOut {
			name = "live-json"
		}
		if _, err := d.Client.Register(context.Background(), kin.RegisterRequest{Name: name, Responsible: "ops"}); err != nil {
			t.Fatal(err)
		}
		kintest.WaitFor(t, 10*time.Second, "the live event", func() bool { return strings.Contains(out.String(), name) })
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("events --follow exited %d after cancel: %s", code, errb.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("events --follow did not return after cancel")
		}
		if errb.String() != "" {
			t.Errorf("stderr: %s", errb.String())
		}
		if jsonOut {
			evs := jsonLines(t, out.String())
			if len(evs) < 2 || evs[len(evs)-1].Type != kin.EventAgentRegistered {
				t.Errorf("json lines: %v", evs)
			}
		}
	}
}

func TestEventsFollowLimit(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "events", "--follow", "--limit", "3", "--json")
	wantOK(t, r)
	if got := eventSeqs(jsonLines(t, r.stdout)); !equalSeqs(got, []int64{1, 2, 3}) {
		t.Errorf("seqs = %v", got)
	}
}

func TestEventsErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantUsage(t, kinAt(t, d, "events", "--limit", "-1"), "--limit")
	wantUsage(t, kinAt(t, d, "events", "--limit", "many"), "--limit")
	wantUsage(t, kinAt(t, d, "events", "--since", "-5"), "--since")
	wantUsage(t, kinAt(t, d, "events", "--agent", "abc"), "--agent")
	wantUsage(t, kinAt(t, d, "events", "--agent", "0"), "--agent")
	wantUsage(t, kinAt(t, d, "events", "--bogus"), "--bogus")
	wantUsage(t, kinAt(t, d, "events", "extra"), "extra")
	wantError(t, kinAt(t, d, "events", "--limit", "100000", "--json"), kin.ECodeInvalid)
}

func TestFormatEvent(t *testing.T) {
	e := kin.Event{
		Seq: 9, Time: time.Date(2026, 3, 30, 12, 0, 0, 5e6, time.UTC), Type: kin.EventSpawnRejected,
		Data: json.RawMessage(`{"parent":1,"name":"x","message":"max depth = 3","empty":"","nested":{"a": [1, 2]},"ok":true}`),
	}
	want := `9 2026-03-30T12:00:00.005Z spawn.rejected        parent=1 name=x message="max depth = 3" empty="" nested={"a":[1,2]} ok=true`
	if got := formatEvent(e); got != want {
		t.Errorf("formatEvent:\n got %s\nwant %s", got, want)
	}
	e.Data = nil
	if got := formatEvent(e); got != "9 2026-03-30T12:00:00.005Z spawn.rejected" {
		t.Errorf("no data: %q", got)
	}
}

func TestEventsUnknownType(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantUsage(t, kinAt(t, d, "events", "--type", "nosuch.type"), `--type "nosuch.type"`, "agent.registered", "aauth.keys.rotated")
	wantOK(t, kinAt(t, d, "events", "--type", "spawn.rejected"))
}
