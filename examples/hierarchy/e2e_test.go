package hierarchy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/kin"
)

// TestHierarchyEndToEnd runs seed 002's chain with run.sh on a running
// kin serve --profile profile.json (hierarchy-l4): GO → PO-MVP1 → Specialist-backend → three
// Workers, real processes using only the kin CLI.
func TestHierarchyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	d := exampletest.Serve(t, exampletest.Kin(t), "--http", "off", "--profile", profilePath(t))
	c, ctx := d.Client, context.Background()

	out, err := exampletest.RunScript(t, d.Bin, "--home", d.Home)
	if err != nil {
		t.Errorf("run.sh --home: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("run.sh said:\n%s", out)
		}
	})
	agents, err := c.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	result := func(a *kin.Agent) *kin.AgentResult {
		t.Helper()
		r, err := c.Result(ctx, a.ID)
		if err != nil {
			t.Fatalf("result of %s: %v", a.Name, err)
		}
		return r
	}

	// The chain: GO (gen 0) → PO-MVP1 (1) → Specialist-backend (2) → Workers
	// (3), Worker-2 twice: the crashed one and its replacement.
	want := []struct {
		name, role, parent string
		gen                int
	}{
		{"GO", "GO", "", 0},
		{"PO-MVP1", "PO", "GO", 1},
		{"Specialist-backend", "Specialist", "PO-MVP1", 2},
		{"Worker-1", "Worker", "Specialist-backend", 3},
		{"Worker-2", "Worker", "Specialist-backend", 3},
		{"Worker-3", "Worker", "Specialist-backend", 3},
		{"Worker-2", "Worker", "Specialist-backend", 3},
	}
	if len(agents) != len(want) {
		t.Fatalf("%d agents, want %d", len(agents), len(want))
	}
	ids := map[string]kin.AgentID{}
	for i, w := range want { // a fresh home: ids in spawn order
		a := agents[i]
		if a.Name != w.name || a.Role != w.role || a.Generation != w.gen || a.Parent != ids[w.parent] || a.Responsible != "Shai" {
			t.Errorf("agent %d: %s role %q gen %d parent %d responsible %q; want %s role %q gen %d parent %s (%d) responsible Shai",
				a.ID, a.Name, a.Role, a.Generation, a.Parent, a.Responsible, w.name, w.role, w.gen, w.parent, ids[w.parent])
		}
		if _, seen := ids[w.name]; !seen {
			ids[w.name] = a.ID
		}
	}
	spec, w1, w2, w3, w2r := agents[2], agents[3], agents[4], agents[5], agents[6]
	for _, a := range []*kin.Agent{agents[0], agents[1], spec, w1, w3, w2r} {
		if a.Exit == nil || a.Exit.Code != 0 || a.EndReason != "exited" {
			t.Errorf("%s (agent %d): exit %v, reason %q; want exit 0", a.Name, a.ID, a.Exit, a.EndReason)
		}
		if r := result(a); r.Status != kin.ResultCompleted {
			t.Errorf("%s (agent %d): result %s %q; want completed", a.Name, a.ID, r.Status, r.Violations)
		}
	}

	type rejected struct {
		Parent     kin.AgentID   `json:"parent"`
		Name       string        `json:"name"`
		Generation int           `json:"generation"`
		Code       kin.ErrorCode `json:"code"`
		Message    string        `json:"message"`
	}
	var refusals []rejected
	for _, e := range d.Events(t, kin.EventSpawnRejected) {
		var r rejected
		if err := json.Unmarshal(e.Data, &r); err != nil {
			t.Fatal(err)
		}
		refusals = append(refusals, r)
	}
	if len(refusals) != 2 {
		t.Fatalf("spawn.rejected events = %+v; want two", refusals)
	}

	// (a) A Worker (generation 3, L4) never spawns: its spawn would be
	// generation 4, past the profile's max_generation_depth 3.
	if r := refusals[0]; r.Parent != w1.ID || r.Name != "Helper" || r.Generation != 4 || r.Code != kin.ECodeSpawnDepth {
		t.Errorf("first refusal = %+v; want Worker-1's (agent %d) spawn of Helper at generation 4 refused with %s", r, w1.ID, kin.ECodeSpawnDepth)
	}
	if r := result(w1).Result; !strings.Contains(r, "(spawn_depth_exceeded)") {
		t.Errorf("Worker-1's result lacks its refusal:\n%s", r)
	}

	// (b) A fourth concurrent child: the Specialist had three live Workers.
	if r := refusals[1]; r.Parent != spec.ID || r.Name != "Worker-4" || r.Code != kin.ECodeMaxChildren || !strings.Contains(r.Message, "already has 3 live children") {
		t.Errorf("second refusal = %+v; want Specialist-backend's (agent %d) fourth Worker refused with %s", r, spec.ID, kin.ECodeMaxChildren)
	}
	if r := result(spec).Result; !strings.Contains(r, "Worker-4: kin: agent 3 already has 3 live children; profile hierarchy-l4 allows at most 3 (max_children_exceeded)") {
		t.Errorf("Specialist-backend's result lacks its refusal:\n%s", r)
	}

	// (c) Worker-2 crashed after page 3; kin replaced it (restart
	// on-failure), handing the replacement its last cursor.
	if w2.Exit == nil || w2.Exit.Code != 1 || w2.EndReason != "crashed" || w2.Cursor != "page=3" || w2.Restart != kin.RestartOnFailure {
		t.Errorf("the first Worker-2: exit %v reason %q cursor %q restart %q; want a crash (exit 1) at cursor page=3 under on-failure",
			w2.Exit, w2.EndReason, w2.Cursor, w2.Restart)
	}
	if r := result(w2); r.Status != kin.ResultFailed {
		t.Errorf("the first Worker-2's result is %s, want failed", r.Status)
	}
	es := d.Events(t, kin.EventAgentReplaced)
	var rep struct {
		Agent       kin.AgentID `json:"agent"`
		Replacement kin.AgentID `json:"replacement"`
		Cursor      string      `json:"cursor"`
		Reason      string      `json:"reason"`
	}
	if len(es) != 1 || json.Unmarshal(es[0].Data, &rep) != nil || rep.Agent != w2.ID || rep.Replacement != w2r.ID || rep.Cursor != "page=3" || rep.Reason != "crashed" {
		t.Errorf("agent.replaced events = %d, the first %+v; want one: agent %d replaced by %d from cursor page=3 after a crash", len(es), rep, w2.ID, w2r.ID)
	}
	if w2r.Replaces != w2.ID || w2r.Cursor != "page=6" {
		t.Errorf("the replacement: replaces %d, cursor %q; want %d and page=6", w2r.Replaces, w2r.Cursor, w2.ID)
	}
	if l := d.Logs(w2r.ID); !strings.Contains(l, "KIN_RESUME_CURSOR=page=3") || strings.Contains(l, "page 3\n") {
		t.Errorf("the replacement's log does not show it resuming after page 3:\n%s", l)
	}
	if r := result(w2r).Result; !strings.Contains(r, "Worker-2 processed pages 4 5 6, resuming after cursor page=3.") {
		t.Errorf("the replacement's result:\n%s", r)
	}
	if r := result(w3).Result; !strings.Contains(r, "Worker-3 processed pages 1 2 3 4 5 6.") {
		t.Errorf("Worker-3's result:\n%s", r)
	}

	// All of it reached GO's result, which run.sh printed with kin tree.
	goResult := result(agents[0]).Result
	exampletest.WantAll(t, "GO's result", goResult, "(spawn_depth_exceeded)", "(max_children_exceeded)", "pages 4 5 6, resuming after cursor page=3")
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (GO): completed", "code=spawn_depth_exceeded", "code=max_children_exceeded", `agent.replaced        agent=5 cursor="page=3"`,
		"#1 GO  role=GO gen=0 ", "    └── #3 Specialist-backend  role=Specialist gen=2 ", "#5 Worker-2  role=Worker gen=3 status=terminated state=exited exit=1 reason=crashed")
}

// TestRunScript runs the example the way its README says, with nothing
// running: run.sh starts its own kin serve --profile profile.json on a
// temporary home, runs the chain, and stops it.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	out, err := exampletest.RunScript(t, exampletest.Kin(t))
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (GO): completed", "(spawn_depth_exceeded)", "(max_children_exceeded)", "resuming after cursor page=3")
}

// profilePath is the example's profile: the shipped hierarchy, with the
// Specialist spawning its Workers itself (seed 002 §4.2's four levels).
func profilePath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("profile.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
