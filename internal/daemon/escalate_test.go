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

// Seed 002 §4.1 under the hierarchy profile: "PO ──→ Worker (directly, or
// via Specialist escalation); Specialist ──→ (nothing — escalates to PO
// for Worker spawning)".

// hierarchyPO registers GO and spawns a PO under it (a real process, so
// that its owned subtree dies with it).
func hierarchyPO(t *testing.T, d *kintest.Daemon) (goA, po *kin.Agent) {
	t.Helper()
	goA = register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
	po = spawnAgent(t, d.Client, "PO-MVP1", goA.ID, "sleep")
	if po.Role != "PO" {
		t.Fatalf("PO's role = %q", po.Role)
	}
	return goA, po
}

func withRole(role string) spawnOpt { return func(r *kin.SpawnRequest) { r.Role = role } }

// TestSpecialistEscalatesWorkerToItsPO: a Specialist asks, through its own
// agent socket, for a Worker; the Worker becomes its PO's child, recorded
// as requested by the Specialist (its row, a spawn.escalated event in the
// same commit), and counts against the PO's max_children. The Specialist
// gains no power over the PO or the Worker. The Worker is the PO's: it
// outlives the Specialist and dies with the PO.
func TestSpecialistEscalatesWorkerToItsPO(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	_, po := hierarchyPO(t, d)
	out := outPath(t)
	spec := spawnAgent(t, d.Client, "S-backend", po.ID, "escalate Worker", withRole("Specialist"), withEnv("KINTEST_OUT="+out))
	got := waitOut(t, out, "read parent:")
	var wid, parent, by kin.AgentID
	if _, err := fmt.Sscanf(got, "escalated id=%d parent=%d requested_by=%d", &wid, &parent, &by); err != nil {
		t.Fatalf("the Specialist's spawn: %q (%v)", got, err)
	}
	if parent != po.ID || by != spec.ID {
		t.Fatalf("escalated Worker: parent %d requested_by %d; want the PO %d, asked by the Specialist %d", parent, by, po.ID, spec.ID)
	}
	// Its own spawn, not a grip on the PO's family: the Worker is not its
	// child, and the PO is not its to read.
	if !strings.Contains(got, "stop child: forbidden\n") || !strings.Contains(got, "read parent: forbidden\n") {
		t.Errorf("the Specialist acting on the Worker and the PO: %q, want both forbidden", got)
	}
	w, err := d.Client.Agent(ctx, wid)
	if err != nil {
		t.Fatal(err)
	}
	if w.Parent != po.ID || w.RequestedBy != spec.ID || w.Role != "Worker" || w.Generation != po.Generation+1 ||
		w.CreatedBy != kin.AgentCreatedBy(spec.ID) || !w.Running() {
		t.Fatalf("the Worker: %+v", w)
	}
	evs, err := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventSpawnEscalated}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("spawn.escalated events: %v, %v", evs, err)
	}
	var data kin.SpawnEscalatedData
	for k, v := range map[string]any{"requested_by": &data.RequestedBy, "parent": &data.Parent, "child": &data.Child, "role": &data.Role} {
		if err := evs[0].Field(k, v); err != nil {
			t.Fatalf("spawn.escalated %s: %v", k, err)
		}
	}
	if data != (kin.SpawnEscalatedData{RequestedBy: spec.ID, Parent: po.ID, Child: wid, Role: "Worker"}) || evs[0].Agent != wid || evs[0].Parent != po.ID {
		t.Errorf("spawn.escalated = %+v (agent %d parent %d)", data, evs[0].Agent, evs[0].Parent)
	}
	kids, _ := d.Client.Children(ctx, po.ID)
	if len(kids) != 2 {
		t.Fatalf("the PO's children: %d, want the Specialist and the Worker", len(kids))
	}

	// The PO's max_children (3) counts escalated Workers: the operator
	// acting for the Specialist gets one more, then max_children_exceeded.
	asSpec := d.Client.ActingAs(spec.ID.String())
	w2 := spawnAgent(t, asSpec, "W-2", 0, "sleep", withRole("Worker"))
	if w2.Parent != po.ID || w2.RequestedBy != spec.ID {
		t.Fatalf("second Worker: parent %d requested_by %d", w2.Parent, w2.RequestedBy)
	}
	req := kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "W-3", Role: "Worker"}, Command: []string{kintest.AgentBinary(t)}, Env: []string{"KINTEST_MODE=sleep"}}
	_, err = asSpec.Spawn(ctx, req)
	wantCode(t, err, kin.ECodeMaxChildren)
	if !strings.Contains(err.Error(), fmt.Sprintf("agent %d already has 3 live children", po.ID)) {
		t.Errorf("the refusal names %v; want the PO's children", err)
	}
	// The refusal is recorded as the Specialist's (its circuit breaker, not
	// its PO's, counts it).
	rej, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventSpawnRejected}})
	if len(rej) != 1 || rej[0].Parent != spec.ID {
		t.Errorf("spawn.rejected: %+v, want one, the Specialist's", rej)
	}

	// The Specialist ends: the Worker is not its child and lives on.
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: spec.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "the Specialist to end", func() bool {
		a, _ := d.Client.Agent(ctx, spec.ID)
		return a != nil && a.State.Terminal()
	})
	if w, _ := d.Client.Agent(ctx, wid); w == nil || !w.Running() || !alive(w.PID) {
		t.Fatalf("the Worker after its Specialist ended: %+v, want it running", w)
	}
	// The PO ends: its owned Workers die with it, the escalated one too.
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: po.ID}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []kin.AgentID{wid, w2.ID} {
		kintest.WaitFor(t, 20*time.Second, "the Worker to end with its PO", func() bool {
			a, _ := d.Client.Agent(ctx, id)
			return a != nil && a.State.Terminal() && !alive(a.PID)
		})
	}
}

// TestEscalatedWorkerGetsNoMoreThanItsSpecialist: the Worker's parent is
// the PO, who may do anything, but the Specialist chose what it runs: a
// Worker that asks for nothing gets no more than the Specialist has
// (tools, paths through Landlock, passed-down environment), one that asks
// for more is refused, and its spawn counts against the Specialist's
// max_descendants. A Worker that simply inherited its PO's policy would
// read the hidden folder and be allowed exec.
func TestEscalatedWorkerGetsNoMoreThanItsSpecialist(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
	po := register(t, d.Client, kin.RegisterRequest{Name: "PO-MVP1", Parent: goA.ID})
	visible, hidden := folder(t), folder(t)
	one := int64(1)
	spec := register(t, d.Client, kin.RegisterRequest{Name: "S-backend", Role: "Specialist", Parent: po.ID, Policy: &kin.Policy{
		Tools:  &kin.ToolRules{Deny: []string{"exec"}},
		Mounts: map[string]kin.Mode{visible: kin.ModeRW},
		Env:    []string{"TASK_*"},
		Budget: &kin.Budget{MaxDescendants: &one},
	}})
	asSpec := d.Client.ActingAs(spec.ID.String())
	worker := func(name string, pol *kin.Policy, env []string, script string) (*kin.Agent, error) {
		g := kin.Duration(0)
		return asSpec.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Role: "Worker", Policy: pol},
			Command: []string{"/bin/sh", "-c", script}, Env: env, Grace: &g})
	}

	// Asking for more than the Specialist has is refused, nothing
	// registered: a path it cannot see, a tool it is denied, a variable
	// its policy does not pass down.
	var esc *kin.EscalationError
	_, err := worker("W-mount", &kin.Policy{Mounts: map[string]kin.Mode{hidden: kin.ModeRO}}, nil, "true")
	if !errors.As(err, &esc) || esc.Excess[0].Field != "mounts" || !strings.Contains(esc.Excess[0].Asked, hidden) {
		t.Fatalf("a Worker asking for the hidden folder: %v", err)
	}
	_, err = worker("W-tool", &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"exec"}}}, nil, "true")
	if kin.ErrorCodeOf(err) != kin.ECodeEscalation {
		t.Fatalf("a Worker asking for exec: %v, want permission_escalation", err)
	}
	_, err = worker("W-env", nil, []string{"AWS_SECRET_ACCESS_KEY=x"}, "true")
	if !errors.As(err, &esc) || esc.Excess[0].Field != "env" {
		t.Fatalf("a Worker passed a variable the Specialist's policy keeps back: %v", err)
	}
	if kids, _ := d.Client.Children(ctx, po.ID); len(kids) != 1 {
		t.Fatalf("refused escalations registered agents: the PO has %d children", len(kids))
	}

	// A Worker that asks for nothing gets the Specialist's limits, kernel
	// enforced.
	w, err := worker("W-1", nil, []string{"TASK_ID=7"}, probe(hidden)+"; "+probe(visible)+`; echo "task=$TASK_ID"`)
	if err != nil {
		t.Fatal(err)
	}
	if w.Parent != po.ID || w.RequestedBy != spec.ID {
		t.Fatalf("the Worker: parent %d requested_by %d", w.Parent, w.RequestedBy)
	}
	if dec := authorize(t, d, w.ID, "exec"); dec.Allowed || dec.Agent != spec.ID {
		t.Errorf("the Worker's exec: %+v, want denied by the Specialist's policy", dec)
	}
	if dec := authorize(t, d, w.ID, "read"); !dec.Allowed {
		t.Errorf("the Worker's read: %+v", dec)
	}
	_, out := ended(t, d, w.ID)
	if !strings.HasPrefix(out, "NOREAD\nNOLIST\nNOWRITE\n") || !strings.Contains(out, "WROTE") || !strings.Contains(out, "task=7") {
		t.Fatalf("the Worker's view: %q, want the hidden folder hidden, the Specialist's rw folder written, TASK_ID passed", out)
	}
	pol, err := d.Client.Policy(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pol.Effective.Flat.Mounts[visible] != kin.ModeRW || len(pol.Effective.Flat.Mounts) != 1 {
		t.Errorf("the Worker's effective mounts: %v", pol.Effective.Flat.Mounts)
	}

	// The Specialist's max_descendants (1) counts the Worker, though it is
	// the PO's child: a second escalation is refused.
	_, err = worker("W-2", nil, nil, "true")
	wantCode(t, err, kin.ECodeBudget)
	sp, _ := d.Client.Policy(ctx, spec.ID)
	if sp.Spend.SubtreeSpawns != 1 {
		t.Errorf("the Specialist's spawns = %d, want 1", sp.Spend.SubtreeSpawns)
	}
}

// TestEscalatedWorkerSpendsItsSpecialistsBudget: the permission chain
// through the Specialist survives a restart (the authority's cache is
// rebuilt from requested_by) and the caches agree with the store. An
// escalated Worker's usage counts in its Specialist's subtree budget (and
// once in its PO's and GO's), and when it exhausts the Specialist's budget
// the Worker is stopped, though it is not in the Specialist's subtree.
func TestEscalatedWorkerSpendsItsSpecialistsBudget(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"), kintest.WithHome(home))
	goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
	po := register(t, d.Client, kin.RegisterRequest{Name: "PO-MVP1", Parent: goA.ID})
	hundred := int64(100)
	spec := register(t, d.Client, kin.RegisterRequest{Name: "S-backend", Role: "Specialist", Parent: po.ID, Policy: &kin.Policy{
		Tools: &kin.ToolRules{Deny: []string{"exec"}}, Budget: &kin.Budget{MaxTokens: &hundred}}})
	w1 := register(t, d.Client.ActingAs(spec.ID.String()), kin.RegisterRequest{Name: "W-1", Role: "Worker"})
	if w1.Parent != po.ID || w1.RequestedBy != spec.ID {
		t.Fatalf("the Worker: parent %d requested_by %d", w1.Parent, w1.RequestedBy)
	}
	if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("caches after an escalation (%v):\n%s", err, diff)
	}
	d.Close()
	d = kintest.StartDaemon(t, kintest.WithProfile("hierarchy"), kintest.WithHome(home))
	defer d.Close()
	if dec := authorize(t, d, w1.ID, "exec"); dec.Allowed || dec.Agent != spec.ID {
		t.Errorf("the Worker's exec after a restart: %+v, want denied by the Specialist's policy", dec)
	}
	if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("caches after a restart (%v):\n%s", err, diff)
	}

	w := spawnAgent(t, d.Client.ActingAs(spec.ID.String()), "W-2", 0, "sleep", withRole("Worker"))
	if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: w.ID, Tokens: 60}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []kin.AgentID{spec.ID, po.ID, goA.ID} {
		if p, err := d.Client.Policy(ctx, id); err != nil || p.Spend.SubtreeTokens != 60 {
			t.Fatalf("agent %d's subtree tokens after the Worker's 60: %+v, %v", id, p, err)
		}
	}
	if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: w.ID, Tokens: 50}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "the Worker to be stopped for its Specialist's budget", func() bool {
		a, _ := d.Client.Agent(ctx, w.ID)
		return a != nil && a.State.Terminal() && !alive(a.PID)
	})
	if a, _ := d.Client.Agent(ctx, po.ID); a.Status != kin.StatusActive {
		t.Errorf("the PO after its Specialist's budget ran out: %s, want active (its budget is not the Specialist's)", a.Status)
	}
	if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("caches after the budget stop (%v):\n%s", err, diff)
	}
}

// TestEscalatedWorkersReplacementKeepsItsSpecialistsLimits: a Worker the
// supervisor restarts after a crash is registered by the supervisor, under
// the PO; it is held to the same Specialist's chain, or a crash would hand
// the Specialist's command its PO's rights.
func TestEscalatedWorkersReplacementKeepsItsSpecialistsLimits(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
	po := register(t, d.Client, kin.RegisterRequest{Name: "PO-MVP1", Parent: goA.ID})
	spec := register(t, d.Client, kin.RegisterRequest{Name: "S-backend", Role: "Specialist", Parent: po.ID,
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}})
	w := spawnAgent(t, d.Client.ActingAs(spec.ID.String()), "W-1", 0, "exit 1", withRole("Worker"),
		func(r *kin.SpawnRequest) { r.Restart = kin.RestartOnFailure })
	var repl kin.AgentID
	kintest.WaitFor(t, 20*time.Second, "the crashed Worker's replacement", func() bool {
		evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentReplaced}, Agent: w.ID})
		for _, e := range evs {
			if e.Agent == w.ID {
				_ = e.Field("replacement", &repl)
			}
		}
		return repl != 0
	})
	r, err := d.Client.Agent(ctx, repl)
	if err != nil {
		t.Fatal(err)
	}
	if r.Parent != po.ID || r.RequestedBy != spec.ID || r.Replaces != w.ID {
		t.Fatalf("the replacement: parent %d requested_by %d replaces %d", r.Parent, r.RequestedBy, r.Replaces)
	}
	if dec := authorize(t, d, repl, "exec"); dec.Allowed || dec.Agent != spec.ID {
		t.Errorf("the replacement's exec: %+v, want denied by the Specialist's policy", dec)
	}
}

// TestSpecialistsDeadlineStopsItsEscalatedWorker: the Worker lives under
// its Specialist's deadline, though it is the PO's child: when the
// deadline passes, the Specialist's subtree is stopped and so is the
// Worker; the PO runs on.
func TestSpecialistsDeadlineStopsItsEscalatedWorker(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	_, po := hierarchyPO(t, d)
	deadline := kin.Duration(2 * time.Second)
	spec := spawnAgent(t, d.Client, "S-backend", po.ID, "sleep", withRole("Specialist"),
		func(r *kin.SpawnRequest) { r.Policy = &kin.Policy{Budget: &kin.Budget{Deadline: &deadline}} })
	w := spawnAgent(t, d.Client.ActingAs(spec.ID.String()), "W-1", 0, "sleep", withRole("Worker"))
	if w.Parent != po.ID || w.RequestedBy != spec.ID {
		t.Fatalf("the Worker: parent %d requested_by %d", w.Parent, w.RequestedBy)
	}
	for _, a := range []*kin.Agent{spec, w} {
		kintest.WaitFor(t, 20*time.Second, a.Name+" stopped at the Specialist's deadline", func() bool {
			got, _ := d.Client.Agent(ctx, a.ID)
			return got != nil && got.State.Terminal() && !alive(a.PID)
		})
	}
	if got, _ := d.Client.Agent(ctx, po.ID); got == nil || !got.Running() || !alive(po.PID) {
		t.Errorf("the PO after its Specialist's deadline: %+v, want it running", got)
	}
}

// TestAnEscalatedAgentsOwnEscalationGoesToItsOwnAncestors: an escalated
// agent that escalates in turn is placed under its own lineage ancestors,
// never under its asker (which is not its ancestor, though its permission
// chain runs through it), and its child is held to both askers' layers.
func TestAnEscalatedAgentsOwnEscalationGoesToItsOwnAncestors(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "relay.json")
	if err := os.WriteFile(profile, []byte(`{"name": "relay", "max_generation_depth": 5, "roles": {
		"lead":   {"root": true, "spawns": ["spec", "worker", "helper"]},
		"spec":   {"spawns": ["helper"], "escalates": ["worker"]},
		"worker": {"spawns": [], "escalates": ["helper"]},
		"helper": {"spawns": []}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, kintest.WithProfile(profile))
	lead := register(t, d.Client, kin.RegisterRequest{Name: "lead", Role: "lead", Responsible: "r"})
	spec := register(t, d.Client, kin.RegisterRequest{Name: "spec", Role: "spec", Parent: lead.ID,
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}})
	w := register(t, d.Client, kin.RegisterRequest{Name: "worker", Role: "worker", Parent: spec.ID,
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec", "web_*"}}}})
	if w.Parent != lead.ID || w.RequestedBy != spec.ID {
		t.Fatalf("worker: parent %d requested_by %d", w.Parent, w.RequestedBy)
	}
	// spec spawns helpers, but it is not the worker's ancestor: the
	// worker's helper goes to lead.
	h := register(t, d.Client, kin.RegisterRequest{Name: "helper", Role: "helper", Parent: w.ID})
	if h.Parent != lead.ID || h.RequestedBy != w.ID {
		t.Fatalf("helper: parent %d requested_by %d; want lead %d, asked by worker %d", h.Parent, h.RequestedBy, lead.ID, w.ID)
	}
	// The helper's chain: itself, worker, spec, lead.
	if dec := authorize(t, d, h.ID, "web_fetch"); dec.Allowed || dec.Agent != w.ID {
		t.Errorf("helper's web_fetch: %+v, want denied by the worker", dec)
	}
	if dec := authorize(t, d, h.ID, "exec"); dec.Allowed {
		t.Errorf("helper's exec: %+v, want denied", dec)
	}
	pol, err := d.Client.Policy(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	var by []kin.AgentID
	for _, l := range pol.Effective.Layers {
		if l.Agent != 0 {
			by = append(by, l.Agent)
		}
	}
	if fmt.Sprint(by) != fmt.Sprint([]kin.AgentID{spec.ID, w.ID}) {
		t.Errorf("helper's layers come from agents %v, want spec %d then worker %d", by, spec.ID, w.ID)
	}
}

// TestEscalationChainsOutliveTheirAgents: an escalated agent's link to
// its asker stays in the authority's cache after it ended (every check
// walks the links in one lineage walk): the helper an ended worker asked
// for is still held to the worker's and the spec's layers, its spend
// counts in both their subtrees, and the ended worker's own policy still
// reads as its asker's, before and after a restart.
func TestEscalationChainsOutliveTheirAgents(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "relay.json")
	if err := os.WriteFile(profile, []byte(`{"name": "relay", "max_generation_depth": 5, "roles": {
		"lead":   {"root": true, "spawns": ["spec", "worker", "helper"]},
		"spec":   {"spawns": ["helper"], "escalates": ["worker"]},
		"worker": {"spawns": [], "escalates": ["helper"]},
		"helper": {"spawns": []}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithProfile(profile), kintest.WithHome(home))
	lead := register(t, d.Client, kin.RegisterRequest{Name: "lead", Role: "lead", Responsible: "r"})
	spec := register(t, d.Client, kin.RegisterRequest{Name: "spec", Role: "spec", Parent: lead.ID,
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}})
	w := register(t, d.Client, kin.RegisterRequest{Name: "worker", Role: "worker", Parent: spec.ID,
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec", "web_*"}}}})
	h := register(t, d.Client, kin.RegisterRequest{Name: "helper", Role: "helper", Parent: w.ID})
	if w.RequestedBy != spec.ID || h.RequestedBy != w.ID || h.Parent != lead.ID {
		t.Fatalf("worker requested_by %d, helper requested_by %d parent %d", w.RequestedBy, h.RequestedBy, h.Parent)
	}
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: w.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "the worker to end", func() bool {
		a, _ := d.Client.Agent(ctx, w.ID)
		return a != nil && a.State.Terminal()
	})
	check := func(when string) {
		t.Helper()
		if dec := authorize(t, d, h.ID, "web_fetch"); dec.Allowed || dec.Agent != w.ID {
			t.Errorf("%s: the helper's web_fetch: %+v, want denied by the ended worker", when, dec)
		}
		if dec := authorize(t, d, h.ID, "exec"); dec.Allowed || dec.Agent != spec.ID {
			t.Errorf("%s: the helper's exec: %+v, want denied by the spec", when, dec)
		}
		if dec := authorize(t, d, w.ID, "exec"); dec.Allowed || dec.Agent != spec.ID {
			t.Errorf("%s: the ended worker's exec: %+v, want denied by the spec", when, dec)
		}
		if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
			t.Fatalf("%s: caches (%v):\n%s", when, err, diff)
		}
	}
	check("the worker ended")
	if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: h.ID, Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []kin.AgentID{w.ID, spec.ID, lead.ID} {
		if p, err := d.Client.Policy(ctx, id); err != nil || p.Spend.SubtreeTokens != 10 {
			t.Fatalf("agent %d's subtree tokens after the helper's 10: %+v, %v", id, p, err)
		}
	}
	d.Close()
	d = kintest.StartDaemon(t, kintest.WithProfile(profile), kintest.WithHome(home))
	defer d.Close()
	check("after a restart")
}
