package quota_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/kin"
)

// clock is a settable time (quota is below kintest, which starts daemons).
type clock struct{ t time.Time }

func newClock() *clock                   { return &clock{t: time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)} }
func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func newLimiter(q *kin.Quotas, clock *clock) *quota.Limiter {
	return quota.New(quota.Config{Quotas: func() kin.Quotas { return *q }, Clock: clock.Now})
}

func asAgent(id kin.AgentID) context.Context {
	return caller.With(context.Background(), caller.Caller{Agent: id})
}

// TestBucket: a burst at once, then the rate; a refusal says when to retry
// and spends nothing; each agent and kind has its own bucket.
func TestBucket(t *testing.T) {
	clock := newClock()
	q := kin.Quotas{Messages: kin.Rate{PerSecond: 10, Burst: 5}, Reports: kin.Rate{PerSecond: 1, Burst: 2}}
	l := newLimiter(&q, clock)
	ctx := asAgent(7)
	for i := range 5 {
		if err := l.Allow(ctx, quota.Messages); err != nil {
			t.Fatalf("message %d of the burst: %v", i, err)
		}
	}
	err := l.Allow(ctx, quota.Messages)
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeRateLimited || ke.RetryAfter < 0.099 || ke.RetryAfter > 0.101 {
		t.Fatalf("past the burst: %#v", err)
	}
	if !strings.Contains(ke.Message, "quotas.messages") || !strings.Contains(ke.Message, "agent 7") {
		t.Fatalf("the refusal must name the agent and the profile key: %s", ke.Message)
	}
	// Refusals spend nothing: after the retry-after, exactly one more.
	for range 3 {
		l.Allow(ctx, quota.Messages)
	}
	clock.Advance(100 * time.Millisecond)
	if err := l.Allow(ctx, quota.Messages); err != nil {
		t.Fatalf("after retry_after: %v", err)
	}
	if err := l.Allow(ctx, quota.Messages); kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("one token a tenth of a second: %v", err)
	}
	// Another agent, another kind: buckets of their own.
	if err := l.Allow(asAgent(8), quota.Messages); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := l.Allow(ctx, quota.Reports); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	if err := l.Allow(ctx, quota.Reports); err == nil || !strings.Contains(err.Error(), "quotas.reports") {
		t.Fatalf("third report: %v", err)
	}
	// Over a long run the rate holds: 10 s at 10/s is 100 more.
	clock.Advance(time.Minute) // refill the burst
	n := 0
	for range 1000 {
		for l.Allow(ctx, quota.Messages) == nil {
			n++
		}
		clock.Advance(10 * time.Millisecond)
	}
	if want := 5 + 100; n < want-1 || n > want+1 {
		t.Fatalf("allowed %d in 10 s, want burst+rate×10 s = %d", n, want)
	}
}

// TestOperatorIsNotLimited: the operator (no agent in the context) and a
// nil limiter allow everything.
func TestOperatorIsNotLimited(t *testing.T) {
	clock := newClock()
	q := kin.Quotas{Messages: kin.Rate{PerSecond: 1, Burst: 1}, MessageBytes: 10}
	l := newLimiter(&q, clock)
	for range 100 {
		if err := l.Allow(context.Background(), quota.Messages); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.CheckMessage(context.Background(), strings.Repeat("\x01", 1000)); err != nil {
		t.Fatal(err)
	}
	var none *quota.Limiter
	if err := none.Allow(asAgent(1), quota.Reports); err != nil {
		t.Fatal(err)
	}
}

// TestProfileChangeApplies: the rates are read at each call.
func TestProfileChangeApplies(t *testing.T) {
	clock := newClock()
	q := kin.Quotas{Reports: kin.Rate{PerSecond: 1, Burst: 1}}
	l := newLimiter(&q, clock)
	ctx := asAgent(3)
	l.Allow(ctx, quota.Reports)
	if err := l.Allow(ctx, quota.Reports); err == nil {
		t.Fatal("burst 1 allowed two")
	}
	// The new rate applies from the first call that reads it.
	q.Reports = kin.Rate{PerSecond: 1000, Burst: 1000}
	l.Allow(ctx, quota.Reports)
	clock.Advance(10 * time.Millisecond)
	for i := range 5 {
		if err := l.Allow(ctx, quota.Reports); err != nil {
			t.Fatalf("after raising the rate, report %d: %v", i, err)
		}
	}
}

// TestMessageSize: a text over quotas.message_bytes as stored (JSON-encoded)
// is invalid, naming it; '<', '>' and '&' cost one byte, control
// characters six, quotes and backslashes two.
func TestMessageSize(t *testing.T) {
	q := kin.Quotas{MessageBytes: 100}
	l := newLimiter(&q, newClock())
	for _, ok := range []string{strings.Repeat("a", 100), strings.Repeat("<", 100), strings.Repeat("&>", 50), strings.Repeat("é", 50), strings.Repeat("\x01", 16) + "aaaa", strings.Repeat(`"`, 50)} {
		if err := l.CheckMessage(asAgent(1), ok); err != nil {
			t.Fatalf("%q (%d bytes as stored): %v", ok, quota.StoredLen(ok), err)
		}
	}
	for _, c := range []struct {
		text   string
		stored int
	}{
		{strings.Repeat("a", 101), 101},
		{strings.Repeat("\x01", 17), 102},
		{strings.Repeat("\\", 51), 102},
		{strings.Repeat("\n", 51), 102},
		{strings.Repeat("\u2028", 17), 102},
	} {
		if n := quota.StoredLen(c.text); n != c.stored {
			t.Errorf("StoredLen(%q) = %d, want %d", c.text, n, c.stored)
		}
		err := l.CheckMessage(asAgent(1), c.text)
		if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "quotas.message_bytes") || !strings.Contains(err.Error(), fmt.Sprint(c.stored)) {
			t.Errorf("%q: %v", c.text, err)
		}
	}
}

// TestSubtreeSharesQuota: a message of an agent is charged to its own
// bucket and to each ancestor's bucket for its descendants, so children
// spawned one after the other (each with a fresh bucket of its own) share
// one quota below their parent, while the parent's own bucket stays its
// own; a refusal spends no token anywhere and waits for the emptiest
// bucket; AllowOwn charges the agent's bucket only; other roots do not
// share.
func TestSubtreeSharesQuota(t *testing.T) {
	clock := newClock()
	q := kin.Quotas{Messages: kin.Rate{PerSecond: 1, Burst: 4}}
	parents := map[kin.AgentID]kin.AgentID{2: 1, 3: 2, 4: 2, 5: 1}
	chain := func(id kin.AgentID) []kin.AgentID {
		var out []kin.AgentID
		for ; id != 0; id = parents[id] {
			out = append(out, id)
		}
		return out
	}
	l := quota.New(quota.Config{Quotas: func() kin.Quotas { return q }, Clock: clock.Now, Chain: chain})
	// Grandchildren 3 (twice) and 4 (once): 2's and 1's buckets for their
	// descendants hold one more.
	for _, id := range []kin.AgentID{3, 3, 4} {
		if err := l.AllowAgent(id, quota.Messages); err != nil {
			t.Fatalf("agent %d: %v", id, err)
		}
	}
	// A fresh child (5, its own bucket full) still shares what is below
	// root 1: one left.
	if err := l.AllowAgent(5, quota.Messages); err != nil {
		t.Fatal(err)
	}
	var ke *kin.Error
	err := l.AllowAgent(5, quota.Messages)
	if !errors.As(err, &ke) || ke.Code != kin.ECodeRateLimited || !strings.Contains(ke.Message, "ancestor agent 1") || ke.RetryAfter < 0.999 || ke.RetryAfter > 1.001 {
		t.Fatalf("past the burst below the root: %#v", err)
	}
	if err := l.AllowAgent(2, quota.Messages); kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("agent 2 is below root 1 too: %v", err)
	}
	// The root's own bucket is untouched by its descendants' flood.
	for i := range 4 {
		if err := l.AllowAgent(1, quota.Messages); err != nil {
			t.Fatalf("the root's own message %d: %v", i, err)
		}
	}
	// The refusals spent nothing: once a token is back below the root
	// (1 s), exactly one message goes.
	clock.Advance(time.Second)
	if err := l.AllowAgent(5, quota.Messages); err != nil {
		t.Fatalf("after a second: %v", err)
	}
	if err := l.AllowAgent(3, quota.Messages); kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("empty again below the root: %v", err)
	}
	// AllowOwn empties agent 3's own bucket and no other: 3 is refused,
	// naming itself; its sibling 4 is not.
	clock.Advance(time.Minute)
	for i := range 4 {
		if err := l.AllowOwn(asAgent(3), quota.Messages); err != nil {
			t.Fatalf("own %d: %v", i, err)
		}
	}
	if err := l.AllowOwn(asAgent(3), quota.Messages); kin.ErrorCodeOf(err) != kin.ECodeRateLimited {
		t.Fatalf("own bucket past its burst: %v", err)
	}
	if err := l.AllowAgent(3, quota.Messages); err == nil || !strings.Contains(err.Error(), "agent 3 sent messages faster than its quota") {
		t.Fatalf("own bucket: %v", err)
	}
	if err := l.AllowAgent(4, quota.Messages); err != nil {
		t.Fatalf("a sibling: %v", err)
	}
	// Another root is not charged for root 1's tree.
	if err := l.AllowAgent(9, quota.Messages); err != nil {
		t.Fatal(err)
	}
}

// TestStreams: an agent holds at most MaxStreams open; a released one
// makes room, twice released counts once; the operator is never limited.
func TestStreams(t *testing.T) {
	var s quota.Streams
	agent := caller.With(context.Background(), caller.Caller{Agent: 7})
	var rel []func()
	for range quota.MaxStreams {
		r, err := s.Open(agent)
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	_, err := s.Open(agent)
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeRateLimited || ke.RetryAfter <= 0 {
		t.Fatalf("stream %d: %v, want rate_limited with retry_after", quota.MaxStreams+1, err)
	}
	if _, err := s.Open(caller.With(context.Background(), caller.Caller{Agent: 8})); err != nil {
		t.Fatalf("another agent: %v", err)
	}
	for range quota.MaxStreams + 1 {
		if _, err := s.Open(context.Background()); err != nil {
			t.Fatalf("the operator: %v", err)
		}
	}
	rel[0]()
	rel[0]()
	if n := s.Held(7); n != quota.MaxStreams-1 {
		t.Fatalf("after one release (twice): %d held", n)
	}
	if _, err := s.Open(agent); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	for _, r := range rel[1:] {
		r()
	}
	if n := s.Held(7); n != 1 {
		t.Fatalf("after releasing all but one: %d held", n)
	}
}
