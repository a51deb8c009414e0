package daemon_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
