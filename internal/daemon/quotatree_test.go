package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestQuotaDescendantsShareOneBucket: an agent's descendants share one
// quota below it, apart from its own. Two children each sending what their
// own bucket allows are refused together after one burst, naming the
// parent; the parent, whose own bucket they never touch, still messages
// them, heartbeats and stops the one flooding; another root is not charged.
func TestQuotaDescendantsShareOneBucket(t *testing.T) {
	const burst = 4
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, fmt.Sprintf(
		`{"messages": {"per_second": 0.01, "burst": %d}, "reports": {"per_second": 0.01, "burst": %d}}`, burst, burst))))
	parent := spawnAgent(t, d.Client, "parent", 0, "sleep")
	a := spawnAgent(t, d.Client, "child-a", parent.ID, "sleep")
	b := spawnAgent(t, d.Client, "child-b", parent.ID, "sleep")
	other := spawnAgent(t, d.Client, "other", 0, "sleep")
	sent := 0
	var err error
	for i := range 2 * burst {
		from := []*kin.Agent{a, b}[i%2]
		if _, err = d.Client.ActingAs(from.ID.String()).Send(ctx, kin.SendRequest{To: "parent", Text: "hi"}); err != nil {
			break
		}
		sent++
	}
	var ke *kin.Error
	if sent != burst || !errors.As(err, &ke) || ke.Code != kin.ECodeRateLimited || !strings.Contains(ke.Message, fmt.Sprintf("ancestor agent %d", parent.ID)) {
		t.Fatalf("two children sent %d messages (their parent's descendants share a burst of %d), then: %v", sent, burst, err)
	}
	as := d.Client.ActingAs(parent.ID.String())
	for i := range burst {
		if _, err := as.Send(ctx, kin.SendRequest{To: "child-a", Text: "stop that"}); err != nil {
			t.Fatalf("the parent's own message %d, its children's bucket empty: %v", i, err)
		}
	}
	if _, err := as.Send(ctx, kin.SendRequest{To: "child-a", Text: "one more"}); kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("the parent past its own burst: %v", err)
	}
	// Reports: a child's usage flood empties the bucket below the parent,
	// never the parent's own; heartbeats are charged to their own bucket.
	for range 2 * burst {
		if _, err = d.Client.ActingAs(a.ID.String()).Usage(ctx, kin.UsageRequest{Tokens: 1}); err != nil {
			break
		}
	}
	if kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("a child's usage flood: %v", err)
	}
	if _, err := d.Client.ActingAs(b.ID.String()).Heartbeat(ctx, kin.HeartbeatRequest{}); err != nil {
		t.Fatalf("a heartbeat of the flooding child's sibling: %v", err)
	}
	if _, err := as.Heartbeat(ctx, kin.HeartbeatRequest{}); err != nil {
		t.Fatalf("the parent's heartbeat: %v", err)
	}
	if _, err := as.SetStatus(ctx, kin.StatusRequest{ID: a.ID, Action: kin.ActionTerminate, Reason: "flooding"}); err != nil {
		t.Fatalf("the parent stopping its flooding child: %v", err)
	}
	if _, err := d.Client.ActingAs(other.ID.String()).Usage(ctx, kin.UsageRequest{Tokens: 1}); err != nil {
		t.Fatalf("another root was charged for parent's tree: %v", err)
	}
}

// TestMessageStoredOnceAsCounted: quotas.message_bytes counts a text as
// stored, and every copy kin writes (the event in kin.db, the recipient's
// messages.jsonl and its events.jsonl) stores '<' and '&' as one byte each:
// a text of them costs each file about its counted size. A text of control
// characters counts 6 bytes for each, so 200 of them pass a 1,200-byte
// quota and 201 do not.
func TestMessageStoredOnceAsCounted(t *testing.T) {
	const size, n = 1200, 5
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, fmt.Sprintf(`{"message_bytes": %d}`, size))))
	parent := spawnAgent(t, d.Client, "parent", 0, "sleep")
	child := spawnAgent(t, d.Client, "child", parent.ID, "sleep")
	as := d.Client.ActingAs(child.ID.String())
	for range n {
		if _, err := as.Send(ctx, kin.SendRequest{To: "parent", Text: strings.Repeat("<&", size/2)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := as.Send(ctx, kin.SendRequest{To: "parent", Text: strings.Repeat("\x01", size/6)}); err != nil {
		t.Fatalf("%d control characters, %d bytes as stored: %v", size/6, size, err)
	}
	_, err := as.Send(ctx, kin.SendRequest{To: "parent", Text: strings.Repeat("\x01", size/6+1)})
	if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "quotas.message_bytes") || !strings.Contains(err.Error(), "as stored") {
		t.Fatalf("%d control characters (%d bytes as stored): %v", size/6+1, 6*(size/6+1), err)
	}
	session := func(file string) string {
		files, _ := filepath.Glob(filepath.Join(d.Home, "ctx", "*", "*", "agent", "parent", "session", "default", file))
		if len(files) == 0 {
			files, _ = filepath.Glob(filepath.Join(d.Home, "ctx", "agent", "parent", "session", "default", file))
		}
		if len(files) == 0 {
			return ""
		}
		b, _ := os.ReadFile(files[0])
		return string(b)
	}
	kintest.WaitFor(t, 20*time.Second, "the messages in the parent's messages.jsonl and events.jsonl", func() bool {
		return strings.Count(session("messages.jsonl"), "\n") >= n+1 && strings.Count(session("events.jsonl"), kin.EventAgentMessage) >= n+1
	})
	for _, file := range []string{"messages.jsonl", "events.jsonl"} {
		var msgs int
		for _, line := range strings.Split(session(file), "\n") {
			if strings.Contains(line, strings.Repeat("<&", 10)) {
				msgs++
				if len(line) > size+400 {
					t.Errorf("a message of %d counted bytes is a line of %d in %s: %.200s", size, len(line), file, line)
				}
			}
		}
		if msgs != n {
			t.Errorf("%s holds %d of the %d messages of '<&' unescaped", file, msgs, n)
		}
	}
}
