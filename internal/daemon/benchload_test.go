package daemon_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Shape of the synthetic registry the read benchmarks query: forestTrees
// roots with forestDescendants descendants each, 100,010 agents in all.
const (
	forestTrees       = 10
	forestDescendants = 10_000
	forestDepth       = 10 // the deepest generation, the default profile's limit
	loadBatch         = 5_000
)

// shapeNode is one agent of a tree: its parent's index in the tree (-1 for
// the root) and its generation.
type shapeNode struct {
	parent int
	gen    int
}

// treeShape lays out one tree of descendants agents below its root: 10
// children, 100 grandchildren, then chains of agents from generation 3 down
// to forestDepth hung round-robin under the grandchildren, until the tree is
// full. Every parent comes before its children.
func treeShape(descendants int) []shapeNode {
	nodes := []shapeNode{{parent: -1, gen: 0}}
	for i := 0; i < 10; i++ {
		nodes = append(nodes, shapeNode{parent: 0, gen: 1})
	}
	for i := 0; i < 100; i++ {
		nodes = append(nodes, shapeNode{parent: 1 + i%10, gen: 2})
	}
	for chain := 0; len(nodes) < descendants+1; chain++ {
		parent := 11 + chain%100
		for gen := 3; gen <= forestDepth && len(nodes) < descendants+1; gen++ {
			nodes = append(nodes, shapeNode{parent: parent, gen: gen})
			parent = len(nodes) - 1
		}
	}
	return nodes
}

// forest is a daemon serving a store of synthetic agents, plus direct
// handles on the same database for the raw floors.
type forest struct {
	d      *kintest.Daemon
	store  store.Store // the store layer, opened on the daemon's database
	db     floorDB     // plain database/sql on the same database
	roots  []kin.AgentID
	deep   []kin.AgentID // agents at generation forestDepth
	agents int
}

// loadForest bulk-loads forestTrees trees into a fresh store of drv
// through the store (many AgentInserts per Update), then starts a daemon
// on it. The trees are inserted round-robin, as if they had grown side by
// side, so a subtree's rows are spread over the database rather than
// packed together. Events are not written: the lineage queries never read
// them. What it starts ends with b.
func loadForest(b *testing.B, drv benchDriver) *forest {
	b.Helper()
	ctx := context.Background()
	home := kintest.TempHome(b)
	if err := os.MkdirAll(home, 0o700); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	st := openBenchStore(b, drv, home, "NORMAL")
	shape := treeShape(forestDescendants)
	ids := make([][]kin.AgentID, forestTrees)
	for t := range ids {
		ids[t] = make([]kin.AgentID, len(shape))
	}
	now := time.Now().UTC()
	total := len(shape) * forestTrees
	for next := 0; next < total; {
		end := min(next+loadBatch, total)
		err := st.Update(ctx, func(tx store.Tx) error {
			for k := next; k < end; k++ {
				i, t := k/forestTrees, k%forestTrees
				n := shape[i]
				a := benchAgent(fmt.Sprintf("t%d-n%d", t, i), now)
				a.Generation = n.gen
				if n.parent >= 0 {
					a.Parent = ids[t][n.parent]
				}
				got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, NameContext: fmt.Sprintf("n%d", i)})
				if err != nil {
					return err
				}
				ids[t][i] = got.ID
			}
			return nil
		})
		if err != nil {
			b.Fatalf("bulk load: %v", err)
		}
		next = end
	}
	if err := closeStore(st); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: loaded %d agents in %s", drv.name, total, time.Since(start).Round(time.Millisecond))

	f := &forest{agents: total}
	for t := range ids {
		f.roots = append(f.roots, ids[t][0])
		for i, n := range shape {
			if n.gen == forestDepth {
				f.deep = append(f.deep, ids[t][i])
			}
		}
	}
	f.d = kintest.StartDaemon(b, kintest.WithHome(home), drv.daemonStore(b))
	f.store = openBenchStore(b, drv, home, "")
	f.db = drv.floorDB(b, home)
	return f
}

// benchAgent is a registered, active agent with the fields a typical
// registration fills in.
func benchAgent(name string, now time.Time) kin.Agent {
	return kin.Agent{
		Name:             name,
		Role:             "worker",
		Responsible:      "bench@example.org",
		ConstitutionHash: benchHash,
		Life:             kin.LifeOwned,
		Status:           kin.StatusActive,
		State:            kin.StateRegistered,
		CreatedAt:        now,
		CreatedBy:        kin.Operator,
		UpdatedAt:        now,
	}
}

const benchHash = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestTreeShape(t *testing.T) {
	shape := treeShape(forestDescendants)
	if len(shape) != forestDescendants+1 {
		t.Fatalf("tree has %d agents, want %d", len(shape), forestDescendants+1)
	}
	deep := 0
	for i, n := range shape[1:] {
		p := shape[n.parent]
		if n.parent > i || n.gen != p.gen+1 || n.gen > forestDepth {
			t.Fatalf("node %d = %+v under %+v", i+1, n, p)
		}
		if n.gen == forestDepth {
			deep++
		}
	}
	if deep < 1000 {
		t.Fatalf("only %d agents at generation %d", deep, forestDepth)
	}
}
