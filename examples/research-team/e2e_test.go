package researchteam

import (
	"context"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/kin"
)

const responsible = "Dr. Schmidt, COAI Research"

// section returns the text of section name ("Name:" on a line of its own)
// of a result.md, up to the next section.
func section(md, name string) string {
	var b strings.Builder
	on := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasSuffix(l, ":") && !strings.ContainsAny(l, " >-") || l == name+":" {
			on = l == name+":"
			continue
		}
		if on && strings.TrimSpace(l) != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestResearchTeamEndToEnd runs seed 000's research team with run.sh on a
// running kin serve: seven real processes that hand work down and results
// up through kin, using only the kin CLI.
func TestResearchTeamEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	d := exampletest.Serve(t, exampletest.Kin(t), "--http", "off")
	c, ctx := d.Client, context.Background()

	out, err := exampletest.RunScript(t, d.Bin, "--home", d.Home)
	if err != nil {
		t.Errorf("run.sh --home: %v\n%s", err, out)
	}
	agents, err := c.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*kin.Agent{}
	for _, a := range agents {
		byName[a.Name] = a
	}

	// The tree's shape: seven agents in generations 0, 1 and 2, each under
	// the parent seed 000 gives it, and all answering to Dr. Schmidt.
	want := []struct {
		name, role, parent string
		gen                int
	}{
		{"Research-Coordinator", "coordinator", "", 0},
		{"Data-Collector", "collector", "Research-Coordinator", 1},
		{"Report-Writer", "writer", "Research-Coordinator", 1},
		{"Peer-Reviewer", "reviewer", "Research-Coordinator", 1},
		{"Web-Scraper", "scraper", "Data-Collector", 2},
		{"API-Fetcher", "fetcher", "Data-Collector", 2},
		{"LaTeX-Formatter", "formatter", "Report-Writer", 2},
	}
	if len(agents) != len(want) {
		t.Fatalf("%d agents, want %d: %v", len(agents), len(want), byName)
	}
	results := map[string]string{}
	for _, w := range want {
		a := byName[w.name]
		if a == nil {
			t.Fatalf("no agent %s", w.name)
		}
		var parent kin.AgentID
		if w.parent != "" {
			parent = byName[w.parent].ID
		}
		if a.Role != w.role || a.Generation != w.gen || a.Parent != parent || a.Responsible != responsible {
			t.Errorf("%s: role %q gen %d parent %d responsible %q; want role %q gen %d parent %d (%s) responsible %q",
				w.name, a.Role, a.Generation, a.Parent, a.Responsible, w.role, w.gen, parent, w.parent, responsible)
		}
		// Every agent exited 0, and kin checked its result and accepted it.
		if a.Exit == nil || !a.Exit.Known || a.Exit.Code != 0 || a.EndReason != "exited" {
			t.Errorf("%s: exit %v, reason %q; want exit 0", w.name, a.Exit, a.EndReason)
		}
		r, err := c.Result(ctx, a.ID)
		if err != nil {
			t.Fatalf("result of %s: %v", w.name, err)
		}
		if r.Status != kin.ResultCompleted || len(r.Violations) != 0 {
			t.Errorf("%s: result %s, violations %q; want completed", w.name, r.Status, r.Violations)
		}
		results[w.name] = r.Result
	}

	// The coordinator's result carries every agent's contribution, quoted
	// as its parent merged it: the children's summaries, the grandchildren's
	// sources, records and typesetting.
	coord := results["Research-Coordinator"]
	quoted := func(text string) string { return "> " + strings.ReplaceAll(strings.TrimSpace(text), "\n", "\n> ") }
	for name, part := range map[string]string{
		"Data-Collector":  section(results["Data-Collector"], "Summary"),
		"Report-Writer":   section(results["Report-Writer"], "Summary"),
		"Peer-Reviewer":   section(results["Peer-Reviewer"], "Summary"),
		"Web-Scraper":     section(results["Web-Scraper"], "Sources"),
		"API-Fetcher":     section(results["API-Fetcher"], "Records"),
		"LaTeX-Formatter": section(results["LaTeX-Formatter"], "Summary"),
	} {
		if strings.TrimSpace(part) == "" {
			t.Errorf("%s's result has nothing to contribute:\n%s", name, results[name])
		} else if !strings.Contains(coord, quoted(part)) {
			t.Errorf("the coordinator's result lacks %s's contribution %q:\n%s", name, quoted(part), coord)
		}
	}
	for _, s := range []string{"Summary", "Data", "Report", "Review"} {
		if section(coord, s) == "" {
			t.Errorf("the coordinator's result has no %s section:\n%s", s, coord)
		}
	}
	if v := section(results["Peer-Reviewer"], "Verdict"); strings.TrimSpace(v) != "accept" {
		t.Errorf("the review's verdict is %q, want accept", v)
	}
	// The formatter's LaTeX came up to the writer as the writer's artifact.
	r, err := c.Result(ctx, byName["Report-Writer"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Refs) != 1 || r.Refs[0].Path != "artifact/report.tex" {
		t.Errorf("Report-Writer's refs = %+v; want artifact/report.tex", r.Refs)
	}

	// run.sh printed the coordinator's merged result and `kin tree`.
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (Research-Coordinator): completed", quoted(section(results["Web-Scraper"], "Sources")))
	tree := out[strings.Index(out, "#1 Research-Coordinator"):]
	wantTree := []string{
		`#1 Research-Coordinator  role=coordinator gen=0 `,
		`├── #2 Data-Collector  role=collector gen=1 `,
		`│   ├── #3 Web-Scraper  role=scraper gen=2 `,
		`│   └── #4 API-Fetcher  role=fetcher gen=2 `,
		`├── #5 Report-Writer  role=writer gen=1 `,
		`│   └── #6 LaTeX-Formatter  role=formatter gen=2 `,
		`└── #7 Peer-Reviewer  role=reviewer gen=1 `,
	}
	lines := strings.Split(strings.TrimSpace(tree), "\n")
	if len(lines) != len(wantTree) {
		t.Fatalf("kin tree printed %d lines, want %d:\n%s", len(lines), len(wantTree), tree)
	}
	for i, w := range wantTree {
		if !strings.HasPrefix(lines[i], w) || !strings.Contains(lines[i], " exit=0 ") {
			t.Errorf("kin tree line %d = %q; want it to start %q and show exit=0", i+1, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], `responsible="`+responsible+`"`) {
		t.Errorf("kin tree's root line lacks the responsible party: %q", lines[0])
	}
}

// TestRunScript runs the example the way its README says, with nothing
// running: run.sh starts its own kin serve on a temporary home, runs the
// team, and stops it.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	out, err := exampletest.RunScript(t, exampletest.Kin(t))
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	exampletest.WantAll(t, "run.sh's output", out, "agent 1 (Research-Coordinator): completed", "Verdict of the review: accept", "└── #7 Peer-Reviewer")
}
