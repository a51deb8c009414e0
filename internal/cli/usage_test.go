package cli

import (
	"reflect"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func TestUsage(t *testing.T) {
	svc := &fakeService{spend: &kin.Spend{Tokens: 1200, Cost: 0.004, SubtreeTokens: 3400, SubtreeCost: 1.1, SubtreeSpawns: 3,
		MaxTokens: ptr(int64(5000)), MaxCost: ptr(2.0), MaxDescendants: ptr(int64(10))}}
	r := runFake(t, svc, "", "usage", "--tokens", "1200", "--cost", "0.004")
	wantOK(t, r)
	if want := "own      tokens 1200 cost 0.004\nsubtree  tokens 3400/5000 cost 1.10/2.00 spawns 3/10\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	r = runFake(t, svc, "", "usage", "--cost", "0.5", "--agent", "7", "--json")
	wantOK(t, r)
	var s kin.Spend
	decodeOne(t, r.stdout, &s)
	if !reflect.DeepEqual(&s, svc.spend) {
		t.Errorf("--json: %+v", s)
	}
	if want := []kin.UsageRequest{{Tokens: 1200, Cost: 0.004}, {Agent: 7, Cost: 0.5}}; !reflect.DeepEqual(svc.usages, want) {
		t.Errorf("requests %+v, want %+v", svc.usages, want)
	}

	// No budget, nothing spent in the subtree yet; an exhausted one.
	svc.spend = &kin.Spend{}
	r = runFake(t, svc, "", "usage", "--tokens", "0")
	if want := "own      tokens 0 cost 0.00\nsubtree  nothing spent, no budget\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	svc.spend = &kin.Spend{Tokens: 10, SubtreeTokens: 5100, MaxTokens: ptr(int64(5000)),
		DeadlineAt: time.Date(2026, 3, 30, 14, 0, 0, 0, time.UTC), Exhausted: "max_tokens"}
	r = runFake(t, svc, "", "usage", "--tokens", "10")
	if want := "own      tokens 10 cost 0.00\nsubtree  tokens 5100/5000 deadline 2026-03-30T14:00:00.000Z exhausted: max_tokens\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
}

func TestUsageErrors(t *testing.T) {
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "usage"), "--tokens N, --cost X or both")
	wantUsage(t, runFake(t, svc, "", "usage", "--tokens", "-5"), "--tokens")
	wantUsage(t, runFake(t, svc, "", "usage", "--tokens", "lots"), "--tokens")
	wantUsage(t, runFake(t, svc, "", "usage", "--cost", "-1"), "--cost", "non-negative")
	wantUsage(t, runFake(t, svc, "", "usage", "--cost", "NaN"), "--cost")
	wantUsage(t, runFake(t, svc, "", "usage", "--cost", "Inf"), "--cost")
	wantUsage(t, runFake(t, svc, "", "usage", "--tokens", "1", "--agent", "x"), "--agent")
	if len(svc.usages) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.usages)
	}
	svc.err = kin.Errorf(kin.ECodeBudget, "agent 7's subtree has spent its budget (max_tokens 5000)")
	if msg := wantError(t, runFake(t, svc, "", "usage", "--tokens", "1", "--json"), kin.ECodeBudget); msg != "agent 7's subtree has spent its budget (max_tokens 5000)" {
		t.Errorf("message %q", msg)
	}
}

// TestRateLimitedSaysWhenToRetry: a rate_limited refusal prints its
// retry_after, and --json carries it.
func TestRateLimitedSaysWhenToRetry(t *testing.T) {
	refusal := kin.Errorf(kin.ECodeRateLimited, "agent 4 sent reports faster than its quota allows")
	refusal.RetryAfter = 0.25
	svc := &fakeService{err: refusal}
	r := runFake(t, svc, "", "usage", "--tokens", "5")
	if r.code != ExitError || r.stderr != "kin: agent 4 sent reports faster than its quota allows (rate_limited; retry after 0.25s)\n" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	r = runFake(t, svc, "", "usage", "--json", "--tokens", "5")
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if e.Code != kin.ECodeRateLimited || e.RetryAfter != 0.25 {
		t.Fatalf("--json: %+v", e)
	}
}
