package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestTree(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)

	r := kinAt(t, d, "tree")
	wantOK(t, r)
	want := `#1 Research-Coordinator  role=coordinator gen=0 status=active state=registered responsible="Dr. Schmidt"
├── #2 Data-Collector  role=collector gen=1 status=active state=registered
│   ├── #5 Web-Scraper  role=scraper gen=2 status=active state=registered
│   └── #6 API-Fetcher  role=fetcher gen=2 status=active state=registered
├── #3 Report-Writer  role=writer gen=1 status=active state=registered
│   └── #7 LaTeX-Formatter  role=formatter gen=2 status=active state=registered
└── #4 Peer-Reviewer  role=reviewer gen=1 status=active state=registered
`
	if r.stdout != want {
		t.Errorf("tree:\n%s\nwant:\n%s", r.stdout, want)
	}

	for _, args := range [][]string{{"tree", "--json"}, {"tree", "--format", "json"}, {"tree", "--format", "json", "--json"}} {
		r = kinAt(t, d, args...)
		wantOK(t, r)
		var forest []*kin.TreeNode
		decodeOne(t, r.stdout, &forest)
		if len(forest) != 1 || forest[0].ID != 1 || len(forest[0].Children) != 3 ||
			len(forest[0].Children[0].Children) != 2 || forest[0].Children[1].Children[0].Name != "LaTeX-Formatter" {
			t.Errorf("%v: forest = %+v", args, forest)
		}
	}

	r = kinAt(t, d, "tree", "3", "--json")
	wantOK(t, r)
	var sub []*kin.TreeNode
	decodeOne(t, r.stdout, &sub)
	if len(sub) != 1 || sub[0].ID != 3 || len(sub[0].Children) != 1 || sub[0].Children[0].ID != 7 {
		t.Errorf("subtree = %+v", sub)
	}

	r = kinAt(t, d, "tree", "--format", "mermaid")
	wantOK(t, r)
	for _, want := range []string{
		"graph TD\n",
		`R1["Responsible<br/>Dr. Schmidt"]`,
		`R1 -->|"registers"| A1["Agent #1 — Research-Coordinator<br/>Generation 0<br/>coordinator"]`,
		`A3 -->|"spawns"| A7["Agent #7 — LaTeX-Formatter<br/>Generation 2<br/>formatter"]`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("mermaid lacks %q:\n%s", want, r.stdout)
		}
	}

	r = kinAt(t, d, "tree", "2", "--format", "dot")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "digraph kin {") || !strings.Contains(r.stdout, "A2 -> A5") || strings.Contains(r.stdout, "A1 ") {
		t.Errorf("dot:\n%s", r.stdout)
	}
}

func TestTreeEmpty(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "tree")
	wantOK(t, r)
	if r.stdout != "(no agents)\n" {
		t.Errorf("tree = %q", r.stdout)
	}
	r = kinAt(t, d, "tree", "--json")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("tree --json = %q", r.stdout)
	}
}

func TestTreeErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	wantError(t, kinAt(t, d, "tree", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "tree", "abc", "--json"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "tree", "0", "--json"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "tree", "-1", "--json"), kin.ECodeInvalid)
	wantUsage(t, kinAt(t, d, "tree", "1", "2"), "at most one agent ID")
	wantUsage(t, kinAt(t, d, "tree", "--format", "png"), "--format", "text, json, mermaid, dot")
	wantUsage(t, kinAt(t, d, "tree", "--format", "mermaid", "--json"), "--json", "--format")
	wantUsage(t, kinAt(t, d, "tree", "--bogus"), "--bogus")
}

// TestTreeRuntime: the text tree gives a running agent's pid, and how and
// why an ended one ended.
func TestTreeRuntime(t *testing.T) {
	d := kintest.StartDaemon(t)
	boss := spawnJSON(t, d, "--name", "boss", "--responsible", "ops", "sleep", "600")
	done := spawnJSON(t, d, "--name", "done", "--parent", boss.ID.String(), "true")
	waitEnded(t, d, done.ID)
	r := kinAt(t, d, "tree")
	wantOK(t, r)
	want := fmt.Sprintf("#%d boss  role=- gen=0 status=active state=%s pid=%d responsible=ops\n"+
		"└── #%d done  role=- gen=1 status=terminated state=terminated exit=0 reason=exited\n",
		boss.ID, boss.State, boss.PID, done.ID)
	if r.stdout != want {
		t.Errorf("tree:\n%s\nwant:\n%s", r.stdout, want)
	}
}

// TestTreeSpend: an agent's subtree spend after its node, in the text tree
// only; --json carries it as "spend".
func TestTreeSpend(t *testing.T) {
	svc := &fakeService{forest: spendForest()[:1]}
	r := runFake(t, svc, "", "tree")
	wantOK(t, r)
	for _, want := range []string{
		`#1 Research-Coordinator  role=coordinator gen=0 status=active state=registered responsible="Dr. Schmidt, COAI Research"  tokens 1200/5000 cost 0.40/1.00 spawns 3/10` + "\n",
		"├── #2 Data-Collector  role=collector gen=1 status=active state=active pid=4242  tokens 300 cost 0.004\n",
		"└── #4 Peer-Reviewer  role=- gen=1 status=active state=registered\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tree lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runFake(t, svc, "", "tree", "--json")
	wantOK(t, r)
	var forest []*kin.TreeNode
	decodeOne(t, r.stdout, &forest)
	if s := forest[0].Spend; s == nil || s.SubtreeTokens != 1200 || *s.MaxTokens != 5000 || forest[0].Children[1].Spend != nil {
		t.Errorf("--json spend: %+v", forest[0].Spend)
	}
	r = runFake(t, svc, "", "tree", "--format", "mermaid")
	wantOK(t, r)
	if strings.Contains(r.stdout, "tokens") {
		t.Errorf("the diagram shows spend:\n%s", r.stdout)
	}
}
