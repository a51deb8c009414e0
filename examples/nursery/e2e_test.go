package nursery

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/kin"
)

// section returns the lines of section name ("Name:" on a line of its
// own) of a result.md, up to the next blank line.
func section(md, name string) string {
	_, after, ok := strings.Cut(md, "\n"+name+":\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(after, "\n\n")
	return strings.TrimSpace(body)
}

// TestNurseryEndToEnd runs seed 003's nursery with run.sh on a running kin
// serve: Mano, the mentor, creates Spark and Nova from templates and
// promotes Nova restricted → supervised → full; real processes using only
// the kin CLI.
func TestNurseryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	d := exampletest.Serve(t, exampletest.Kin(t), "--http", "off")
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

	// The nursery: Mano (stage full) and its two children, whose roles
	// and first stages come from their templates' .kin.json. Nova ends at
	// full, where Mano promoted it.
	want := []struct {
		name, role, stage string
		gen               int
	}{
		{"Mano", "mentor", "full", 0},
		{"Spark", "elder", "full", 1},
		{"Nova", "newborn", "full", 1},
	}
	if len(agents) != len(want) {
		t.Fatalf("%d agents, want %d", len(agents), len(want))
	}
	results := map[string]string{}
	for i, w := range want { // a fresh home: ids in spawn order
		a := agents[i]
		parent := kin.AgentID(0)
		if w.gen > 0 {
			parent = agents[0].ID
		}
		if a.Name != w.name || a.Role != w.role || a.Stage != w.stage || a.Generation != w.gen || a.Parent != parent || a.Responsible != "Ada" {
			t.Errorf("agent %d: %s role %q stage %q gen %d parent %d responsible %q; want %s role %q stage %q gen %d parent %d responsible Ada",
				a.ID, a.Name, a.Role, a.Stage, a.Generation, a.Parent, a.Responsible, w.name, w.role, w.stage, w.gen, parent)
		}
		if a.Exit == nil || a.Exit.Code != 0 || a.EndReason != "exited" {
			t.Errorf("%s (agent %d): exit %v, reason %q; want exit 0", a.Name, a.ID, a.Exit, a.EndReason)
		}
		r, err := c.Result(ctx, a.ID)
		if err != nil {
			t.Fatalf("result of %s: %v", a.Name, err)
		}
		if r.Status != kin.ResultCompleted {
			t.Errorf("%s (agent %d): result %s %q; want completed", a.Name, a.ID, r.Status, r.Violations)
		}
		results[a.Name] = r.Result
	}
	mano, spark, nova := agents[0], agents[1], agents[2]

	// 1. Nova's workspace, as templates/newborn made it: SOUL.md with
	// every placeholder filled in (Nova read it from its workspace).
	soul := "> # Nova\n> \n> I am Nova, a newborn of the nursery. Mano created me and\n> hosts me; Ada answers for me.\n> \n> My first lesson: ask before you act"
	if got := section(results["Nova"], "Workspace"); got != soul {
		t.Errorf("Nova's SOUL.md:\n%s\nwant:\n%s", got, soul)
	}
	// Each child's consent is its template's.
	for _, w := range []struct {
		a    *kin.Agent
		want kin.Visibility
	}{
		{nova, kin.Visibility{ReadFrom: []string{"Mano", "Spark"}, ReadableTo: []string{"Spark"}, Scope: []string{"memory/**", "SOUL.md"}}},
		{spark, kin.Visibility{ReadableTo: []string{"Nova"}, Scope: []string{"memory/**"}}},
	} {
		p, err := c.Policy(ctx, w.a.ID)
		if err != nil {
			t.Fatal(err)
		}
		var v kin.Visibility
		if p.Requested != nil && p.Requested.Visibility != nil {
			v = *p.Requested.Visibility
		}
		if !slices.Equal(v.ReadFrom, w.want.ReadFrom) || !slices.Equal(v.ReadableTo, w.want.ReadableTo) || !slices.Equal(v.Scope, w.want.Scope) {
			t.Errorf("%s's visibility = %+v, want %+v", w.a.Name, v, w.want)
		}
	}

	// 2. Stages: Mano promoted Nova twice, and only Mano did (Nova's own
	// try was refused).
	type promoted struct {
		Agent kin.AgentID `json:"agent"`
		From  string      `json:"from"`
		To    string      `json:"to"`
		By    string      `json:"by"`
	}
	es := d.Events(t, kin.EventAgentPromoted)
	var got []promoted
	for _, e := range es {
		var p promoted
		if err := json.Unmarshal(e.Data, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	by := kin.AgentCreatedBy(mano.ID)
	wantPromoted := []promoted{{nova.ID, "restricted", "supervised", by}, {nova.ID, "supervised", "full", by}}
	if !slices.Equal(got, wantPromoted) {
		t.Fatalf("agent.promoted events = %+v, want %+v", got, wantPromoted)
	}
	if s := section(results["Nova"], "Promoting itself"); s != "kin: agent 3 may not promote itself: only its parent or the operator may (forbidden)" {
		t.Errorf("Nova's own promotion: %q; want it refused (forbidden)", s)
	}

	// At each stage Nova asked kin about the same tools; every denial is a
	// tool.denied event, so the events between promotions are the stage's
	// denied set: the restricted preset allows only read (of these), the
	// supervised one denies spawn (not in its allow list) and cron, full
	// denies nothing.
	denied := [][]string{{}, {}, {}} // by stage
	for _, e := range d.Events(t, kin.EventToolDenied) {
		var td struct {
			Agent kin.AgentID `json:"agent"`
			Tool  string      `json:"tool"`
		}
		if err := json.Unmarshal(e.Data, &td); err != nil {
			t.Fatal(err)
		}
		if td.Agent != nova.ID {
			t.Errorf("tool.denied for agent %d (%s); want only Nova's", td.Agent, td.Tool)
			continue
		}
		stage := 0
		for _, p := range es {
			if e.Seq > p.Seq {
				stage++
			}
		}
		denied[stage] = append(denied[stage], td.Tool)
	}
	wantDenied := [][]string{{"write", "edit", "exec", "web_fetch", "spawn", "cron"}, {"spawn", "cron"}, {}}
	for i, stage := range []string{"restricted", "supervised", "full"} {
		if !slices.Equal(denied[i], wantDenied[i]) {
			t.Errorf("denied at stage %s: %q, want %q", stage, denied[i], wantDenied[i])
		}
	}
	table := strings.Join([]string{
		"stage       read      write     edit      exec      web_fetch spawn     cron",
		"restricted  allowed   denied    denied    denied    denied    denied    denied",
		"supervised  allowed   allowed   allowed   allowed   allowed   denied    denied",
		"full        allowed   allowed   allowed   allowed   allowed   allowed   allowed",
	}, "\n")
	if s := section(results["Nova"], "Tools"); s != table {
		t.Errorf("Nova's tools table:\n%s\nwant:\n%s", s, table)
	}

	// 3. Consented reads, as the agents tried them, then again through
	// the CLI (kin read --as): refused with permission_denied where either
	// side lacks consent, the file where both consent.
	for _, w := range []struct{ who, line string }{
		{"Nova", `Spark:SOUL.md: refused: kin: "SOUL.md" is outside the scope [memory/**] of Spark (agent 2) (the owner) (permission_denied)`},
		{"Nova", `Mano:memory/plan.md: refused: kin: Mano (agent 1) does not consent to be read by Nova (agent 3) (its visibility.readable_to does not name it) (permission_denied)`},
		{"Nova", "Spark:memory/lessons.md: read\n> # What Spark has learned\n> \n> - share memory/, keep the rest to yourself"},
		{"Spark", `Nova:SOUL.md: refused: kin: Spark (agent 2) does not ask to read from Nova (agent 3) (its visibility.read_from does not name it) (permission_denied)`},
	} {
		if !strings.Contains(results[w.who], w.line) {
			t.Errorf("%s's result lacks %q:\n%s", w.who, w.line, results[w.who])
		}
	}
	for _, r := range []struct {
		reader *kin.Agent
		file   string
	}{
		{spark, "3:SOUL.md"},         // Nova consents; Spark does not ask
		{nova, "2:SOUL.md"},          // both name each other; Spark's scope is memory/** only
		{nova, "1:memory/plan.md"},   // Nova asks; Mano does not consent
		{nova, "2:memory/secret.md"}, // in both scopes, but Spark's memory holds no such file
	} {
		out, err := d.Kin("--json", "read", r.file, "--as", r.reader.ID.String())
		var e kin.Error
		if err == nil || json.Unmarshal([]byte(out), &e) != nil {
			t.Errorf("kin read %s --as %d: %v %q; want a refusal", r.file, r.reader.ID, err, out)
			continue
		}
		want := kin.ECodeDenied
		if r.file == "2:memory/secret.md" {
			want = kin.ECodeNotFound
		}
		if e.Code != want {
			t.Errorf("kin read %s --as %d: %s (%s); want %s", r.file, r.reader.ID, e.Code, e.Message, want)
		}
	}
	if out, err := d.Kin("read", "2:memory/lessons.md", "--as", nova.ID.String()); err != nil || out != "# What Spark has learned\n\n- share memory/, keep the rest to yourself\n" {
		t.Errorf("kin read 2:memory/lessons.md --as %d: %v\n%s", nova.ID, err, out)
	}

	// run.sh printed Mano's result, the events and the tree.
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (Mano): completed", table[strings.Index(table, "supervised"):strings.Index(table, "\nfull")],
		"agent.promoted        agent=3 by=agent:1 from=restricted to=supervised",
		"agent.promoted        agent=3 by=agent:1 from=supervised to=full",
		"#1 Mano  role=mentor gen=0 ", "└── #3 Nova  role=newborn gen=1 ")
}

// TestRunScript runs the example the way its README says, with nothing
// running: run.sh starts its own kin serve on a temporary home, runs the
// nursery, and stops it.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	out, err := exampletest.RunScript(t, exampletest.Kin(t))
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (Mano): completed", "> > My first lesson: ask before you act",
		"> full        allowed   allowed   allowed   allowed   allowed   allowed   allowed",
		"> Spark:memory/lessons.md: read", "(permission_denied)", "from=supervised to=full")
}
