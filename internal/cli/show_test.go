package cli

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestShow(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "show", "7")
	wantOK(t, r)
	for _, want := range []string{"LaTeX-Formatter", "formatter", "Parent          3", "Generation      2", "Responsible     Dr. Schmidt", "Status          active", "by operator"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = kinAt(t, d, "show", "#7", "--json")
	wantOK(t, r)
	var a shownAgent
	decodeOne(t, r.stdout, &a)
	if a.ID != 7 || a.Name != "LaTeX-Formatter" || a.Parent != 3 || a.Generation != 2 {
		t.Errorf("agent = %+v", a.Agent)
	}
	if (a.Policy == nil) == (a.PolicyError == nil) {
		t.Errorf("kin show --json has policy %+v and policy_error %+v: want one of them", a.Policy, a.PolicyError)
	}
}

// TestShowRuntime: a spawned agent's process while it runs, and how it ended.
func TestShowRuntime(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--name", "worker", "--responsible", "ops", "--grace", "1s", "--restart", "on-failure", "sleep", "600")
	r := kinAt(t, d, "show", a.ID.String())
	wantOK(t, r)
	sleep := mustLookPath(t, "sleep")
	for _, want := range []string{
		"Command         " + sleep + " 600\n",
		"PID             " + strconv.Itoa(a.PID) + "\n",
		"Started         " + formatTime(a.StartedAt) + "\n",
		"Restart         on-failure\n",
		"Grace           1s\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "Exit") || strings.Contains(r.stdout, "Ended") {
		t.Errorf("a running agent shows an end:\n%s", r.stdout)
	}
	wantOK(t, kinAt(t, d, "stop", a.ID.String(), "--grace", "0s"))
	ended := waitEnded(t, d, a.ID)
	r = kinAt(t, d, "show", a.ID.String())
	wantOK(t, r)
	for _, want := range []string{
		"Ended           " + formatTime(ended.EndedAt) + "\n",
		"Exit            signal killed\n",
		"End reason      stopped\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "PID") {
		t.Errorf("an ended agent shows a pid:\n%s", r.stdout)
	}
	r = kinAt(t, d, "show", a.ID.String(), "--json")
	wantOK(t, r)
	var shown shownAgent
	decodeOne(t, r.stdout, &shown)
	if got := shown.Agent; got.PID != a.PID || got.Exit == nil || got.Exit.Signal != "killed" || got.EndReason != "stopped" {
		t.Errorf("agent = %+v", got)
	}
}

func TestShowErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	for _, bad := range []string{"abc", "0", "-1", "1.5", "#"} {
		args := []string{"show", bad, "--json"}
		if strings.HasPrefix(bad, "-") {
			args = []string{"show", "--json", "--", bad}
		}
		msg := wantError(t, kinAt(t, d, args...), kin.ECodeInvalid)
		if !strings.Contains(msg, "argument ID") || !strings.Contains(msg, `"`+bad+`"`) {
			t.Errorf("show %s: message %q does not name the argument", bad, msg)
		}
	}
	// "-1" without "--" looks like a flag to the parser; it is still a bad id.
	msg := wantError(t, kinAt(t, d, "show", "-1", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, `"-1"`) {
		t.Errorf("message %q", msg)
	}
	r := kinAt(t, d, "show", "abc")
	if r.code != ExitError || !strings.HasPrefix(r.stderr, "kin: argument ID \"abc\"") || !strings.HasSuffix(r.stderr, "(invalid)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}

	msg = wantError(t, kinAt(t, d, "show", "99", "--json"), kin.ECodeNotFound)
	if !strings.Contains(msg, "99") {
		t.Errorf("message %q", msg)
	}
	r = kinAt(t, d, "show", "99")
	if r.code != ExitError || r.stderr != "kin: agent 99 not found (not_found)\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	wantUsage(t, kinAt(t, d, "show"), "one agent ID")
	wantUsage(t, kinAt(t, d, "show", "1", "2"), "one agent ID")
	wantUsage(t, kinAt(t, d, "show", "1", "--bogus"), "--bogus")
}

// shownAgent is kin show --json: the agent with its policy, or why not.
type shownAgent struct {
	kin.Agent
	Policy      *kin.AgentPolicy    `json:"policy"`
	PolicyError *kin.Error          `json:"policy_error"`
	Resources   *kin.AgentResources `json:"resources"`
}

func ptr[T any](v T) *T { return &v }

// samplePolicy is agent 7's policy under agent 3's: a stage inherited, its
// own tool and mount rules, a budget partly spent.
func samplePolicy() *kin.AgentPolicy {
	own := kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "web_*"}},
		Mounts: map[string]kin.Mode{"/work": kin.ModeRW, "/usr": kin.ModeRO},
		Spawn:  &kin.SpawnRules{Allow: ptr(false)},
		Budget: &kin.Budget{MaxTokens: ptr(int64(5000)), MaxCost: ptr(1.0), MemoryBytes: ptr(int64(1 << 30))},
	}
	return &kin.AgentPolicy{
		Agent: 7, Stage: "dev", Requested: &own,
		Effective: kin.EffectivePolicy{
			Layers: []kin.PolicyLayer{
				{Source: kin.SourceGlobal, Policy: kin.Policy{Tools: &kin.ToolRules{Deny: []string{"sudo"}}}},
				{Source: kin.SourcePreset, Agent: 3, Name: "dev", Policy: kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}},
				{Source: kin.SourcePolicy, Agent: 3, Policy: kin.Policy{}},
				{Source: kin.SourcePolicy, Agent: 7, Policy: own},
			},
			DeadlineAt: time.Date(2026, 3, 30, 14, 0, 0, 0, time.UTC),
			Flat: kin.Policy{Mounts: own.Mounts, Spawn: own.Spawn,
				Budget: &kin.Budget{MaxTokens: ptr(int64(5000)), MaxCost: ptr(1.0), MemoryBytes: ptr(int64(1 << 30))}},
			Limits: []kin.ResourceLimit{
				{Name: "pids", Value: 50, Scope: kin.LimitAgent, By: "RLIMIT_NPROC", Note: "counted on its own uid"},
				{Name: "memory", Value: 256 << 20, Scope: kin.LimitSubtree, By: "memory.max"},
				{Name: "cpu", Value: 0.5, Scope: kin.LimitNone, Note: "no cpu controller"},
				{Name: "memory_bytes", Value: 1 << 30, Scope: kin.LimitProcess, By: "RLIMIT_AS"},
			},
		},
		Spend: kin.Spend{Tokens: 1000, Cost: 0.3, SubtreeTokens: 1200, SubtreeCost: 0.4, SubtreeSpawns: 3,
			MaxTokens: ptr(int64(5000)), MaxCost: ptr(1.0), MaxDescendants: ptr(int64(10))},
	}
}

// TestShowPolicy: the stage, a paragraph on the effective policy and the
// spend against the budget; with --json, the agent with "policy".
func TestShowPolicy(t *testing.T) {
	svc := &fakeService{
		agents:   map[kin.AgentID]*kin.Agent{7: {ID: 7, Name: "scout", Parent: 3, Generation: 1, Responsible: "ops", Status: kin.StatusActive, State: kin.StateRegistered, Life: kin.LifeOwned, CreatedBy: "agent:3"}},
		policies: map[kin.AgentID]*kin.AgentPolicy{7: samplePolicy()},
	}
	r := runFake(t, svc, "", "show", "7")
	wantOK(t, r)
	for _, want := range []string{
		"Name            scout\n",
		"Stage           dev (its parent's)\n",
		"Policy          Tools: not sudo (global); not exec (preset dev of agent 3); only read web_* (its own policy). " +
			"Paths: /usr ro, /work rw, every other path hidden. Spawning: not allowed. " +
			"Deadline: 2026-03-30T14:00:00.000Z.\n",
		"Limits          pids 50 tasks, for its own processes (RLIMIT_NPROC): counted on its own uid\n",
		"                memory 256 MiB, for its whole subtree (memory.max)\n",
		"                cpu 0.5 cores, not enforced: no cpu controller\n",
		"                memory_bytes 1 GiB, for each process (RLIMIT_AS)\n",
		"Spend           tokens 1200/5000 cost 0.40/1.00 spawns 3/10\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runFake(t, svc, "", "show", "7", "--json")
	wantOK(t, r)
	var got shownAgent
	decodeOne(t, r.stdout, &got)
	if got.ID != 7 || got.Name != "scout" || got.PolicyError != nil || !reflect.DeepEqual(got.Policy, samplePolicy()) {
		t.Errorf("kin show --json = %+v, policy %+v", got.Agent, got.Policy)
	}

	// An escalated agent (seed 002 §4.1): who asked for it, and whose
	// permissions it keeps.
	svc.agents[9] = &kin.Agent{ID: 9, Name: "W-1", Parent: 3, RequestedBy: 5, Status: kin.StatusActive}
	svc.policies[9] = &kin.AgentPolicy{Agent: 9}
	r = runFake(t, svc, "", "show", "9")
	wantOK(t, r)
	for _, want := range []string{"Requested by    agent 5 (its spawn was escalated to its parent; it has no more than agent 5)\n",
		"It has no policy of its own: it keeps what both its parent and agent 5 (which asked for it) have.\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}

	// An agent with a stage of its own and no policy: it keeps its parent's.
	svc.agents[8] = &kin.Agent{ID: 8, Name: "plain", Parent: 3, Stage: "prod", Status: kin.StatusActive}
	svc.policies[8] = &kin.AgentPolicy{Agent: 8, Stage: "prod"}
	r = runFake(t, svc, "", "show", "8")
	wantOK(t, r)
	for _, want := range []string{"Stage           prod\n", "Policy          Tools: any. Paths: not limited. It has no policy of its own: it keeps its parent's.\n", "Spend           nothing spent, no budget\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "(its parent's)") {
		t.Errorf("an agent's own stage shows as its parent's:\n%s", r.stdout)
	}
}

// TestShowPolicyUnavailable: the agent is shown all the same, and the
// reason the policy could not be read is given.
func TestShowPolicyUnavailable(t *testing.T) {
	svc := &fakeService{
		agents:    map[kin.AgentID]*kin.Agent{7: {ID: 7, Name: "scout", Status: kin.StatusActive}},
		policyErr: kin.Errorf(kin.ECodeForbidden, "agent 7 is not one of yours"),
	}
	r := runFake(t, svc, "", "show", "7")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "Policy          unavailable: agent 7 is not one of yours (forbidden)\n") {
		t.Errorf("output:\n%s", r.stdout)
	}
	r = runFake(t, svc, "", "show", "7", "--json")
	wantOK(t, r)
	var got shownAgent
	decodeOne(t, r.stdout, &got)
	if got.Policy != nil || got.PolicyError == nil || *got.PolicyError != (kin.Error{Code: kin.ECodeForbidden, Message: "agent 7 is not one of yours"}) {
		t.Errorf("kin show --json: policy %+v, policy_error %+v", got.Policy, got.PolicyError)
	}
	wantError(t, runFake(t, svc, "", "show", "99", "--json"), kin.ECodeNotFound)
}
