package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenForest is seed 000's example hierarchy, plus a second root whose
// responsible party needs escaping in every format, a suspended subtree and
// a terminated leaf, with fixed times.
func goldenForest() []*kin.TreeNode {
	at := time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)
	node := func(id, parent kin.AgentID, gen int, name, role, responsible string, status kin.Status, kids ...*kin.TreeNode) *kin.TreeNode {
		state := kin.StateRegistered
		if status == kin.StatusTerminated {
			state = kin.StateTerminated
		}
		if kids == nil {
			kids = []*kin.TreeNode{}
		}
		return &kin.TreeNode{Agent: kin.Agent{
			ID: id, Name: name, Role: role, Parent: parent, Generation: gen, Responsible: responsible,
			Life: kin.LifeOwned, Status: status, State: state,
			CreatedAt: at.Add(time.Duration(id) * time.Second), CreatedBy: kin.Operator,
			UpdatedAt: at.Add(time.Duration(id) * time.Second),
		}, Children: kids}
	}
	const hp = "Dr. Schmidt, COAI Research"
	forest := []*kin.TreeNode{
		node(1, 0, 0, "Research-Coordinator", "coordinator", hp, kin.StatusActive,
			node(2, 1, 1, "Data-Collector", "collector", hp, kin.StatusActive,
				node(5, 2, 2, "Web-Scraper", "scraper", hp, kin.StatusActive),
				node(6, 2, 2, "API-Fetcher", "fetcher", hp, kin.StatusActive)),
			node(3, 1, 1, "Report-Writer", "writer", hp, kin.StatusSuspended,
				node(7, 3, 2, "LaTeX-Formatter", "formatter", hp, kin.StatusSuspended)),
			node(4, 1, 1, "Peer-Reviewer", "", hp, kin.StatusActive,
				node(9, 4, 2, "Checker", "", hp, kin.StatusTerminated))),
		node(8, 0, 0, "Trader@exchange", "trader", `ACME "#1" <Ops> \ Desk`, kin.StatusActive),
	}
	// Spawned agents: #2 and #8 run; #6 crashed; #9 was stopped; #7 was
	// lost while the daemon was down.
	spawned := func(n *kin.TreeNode, pid int, state kin.State) {
		n.PID, n.State = pid, state
		n.Command = []string{"/usr/bin/agent", "--name", n.Name}
		n.Restart, n.Grace = kin.RestartNever, kin.Duration(5*time.Second)
		n.StartedAt = n.CreatedAt
	}
	ended := func(n *kin.TreeNode, exit kin.Exit, reason string) {
		n.Status, n.EndedAt, n.Exit, n.EndReason = kin.StatusTerminated, at.Add(time.Minute), &exit, reason
	}
	data, checker := forest[0].Children[0], forest[0].Children[2].Children[0]
	spawned(data, 4242, kin.StateActive)
	spawned(forest[1], 5150, kin.StateActive)
	spawned(data.Children[1], 4343, kin.StateExited)
	ended(data.Children[1], kin.Exit{Code: 1, Known: true}, "crashed")
	spawned(checker, 4444, kin.StateCancelled)
	ended(checker, kin.Exit{Code: -1, Signal: "killed", Known: true}, "stopped")
	formatter := forest[0].Children[1].Children[0]
	spawned(formatter, 4545, kin.StateExited)
	ended(formatter, kin.Exit{Code: -1}, "lost")
	return forest
}

// spendForest is goldenForest with spend: #1 under a budget partly spent,
// #2 without a budget but having reported usage, #8 stopped at its
// deadline; the others have nothing to show.
func spendForest() []*kin.TreeNode {
	forest := goldenForest()
	i64 := func(n int64) *int64 { return &n }
	f64 := func(x float64) *float64 { return &x }
	forest[0].Spend = &kin.Spend{Tokens: 200, SubtreeTokens: 1200, SubtreeCost: 0.4, SubtreeSpawns: 3,
		MaxTokens: i64(5000), MaxCost: f64(1), MaxDescendants: i64(10)}
	forest[0].Children[0].Spend = &kin.Spend{Tokens: 300, SubtreeTokens: 300, SubtreeCost: 0.004}
	forest[0].Children[2].Spend = &kin.Spend{} // nothing spent, no budget: nothing shown
	forest[1].Spend = &kin.Spend{SubtreeTokens: 90, MaxTokens: i64(100),
		DeadlineAt: time.Date(2026, 3, 30, 13, 0, 0, 0, time.UTC), Exhausted: "deadline"}
	return forest
}

func TestRenderTreeGolden(t *testing.T) {
	subtree := goldenForest()[0].Children[1] // #3 Report-Writer, not a root
	for _, c := range []struct {
		name   string
		forest []*kin.TreeNode
		format treeFormat
	}{
		{"forest.txt", goldenForest(), formatText},
		{"spend.txt", spendForest(), formatText},
		{"forest.json", goldenForest(), formatJSON},
		{"forest.mmd", goldenForest(), formatMermaid},
		{"forest.dot", goldenForest(), formatDOT},
		{"subtree.txt", []*kin.TreeNode{subtree}, formatText},
		{"subtree.mmd", []*kin.TreeNode{subtree}, formatMermaid},
		{"subtree.dot", []*kin.TreeNode{subtree}, formatDOT},
		{"empty.txt", nil, formatText},
		{"empty.json", nil, formatJSON},
		{"empty.mmd", nil, formatMermaid},
		{"empty.dot", nil, formatDOT},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := renderTree(&buf, c.forest, c.format); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "tree", c.name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", c.name, buf.Bytes(), want)
			}
		})
	}
}

// TestRenderTreeDeterministic: the order siblings arrive in does not change
// the drawing, and rendering twice gives the same bytes.
func TestRenderTreeDeterministic(t *testing.T) {
	shuffled := goldenForest()
	shuffled[0], shuffled[1] = shuffled[1], shuffled[0]
	kids := shuffled[1].Children
	kids[0], kids[2] = kids[2], kids[0]
	kids[2].Children[0], kids[2].Children[1] = kids[2].Children[1], kids[2].Children[0]
	for _, f := range []treeFormat{formatText, formatMermaid, formatDOT} {
		var a, b, c bytes.Buffer
		renderTree(&a, goldenForest(), f)
		renderTree(&b, goldenForest(), f)
		renderTree(&c, shuffled, f)
		if a.String() != b.String() || a.String() != c.String() {
			t.Errorf("%s: not deterministic:\n%s\n---\n%s", f, a.String(), c.String())
		}
	}
}

func TestRenderTreeUnknownFormat(t *testing.T) {
	if err := renderTree(&bytes.Buffer{}, nil, "png"); err == nil {
		t.Fatal("no error for format png")
	}
}
