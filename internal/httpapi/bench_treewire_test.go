package httpapi_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// benchTree is a root with 10 children, 100 grandchildren and chains below
// them: 10,001 agents, the shape of the daemon's BenchmarkSubtree.
func benchTree() []*kin.TreeNode {
	now := time.Now().UTC()
	id := kin.AgentID(0)
	node := func(parent kin.AgentID, gen int) *kin.TreeNode {
		id++
		return &kin.TreeNode{Agent: kin.Agent{ID: id, Name: fmt.Sprintf("t0-n%d", id), Parent: parent, Generation: gen,
			Responsible: "bench@example.org", ConstitutionHash: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Life: kin.LifeOwned, Status: kin.StatusActive, State: kin.StateRegistered, CreatedAt: now, CreatedBy: "operator", UpdatedAt: now},
			Children: []*kin.TreeNode{}}
	}
	root := node(0, 0)
	var grand, leaves []*kin.TreeNode
	for range 10 {
		c := node(root.ID, 1)
		root.Children = append(root.Children, c)
		for range 10 {
			g := node(c.ID, 2)
			c.Children = append(c.Children, g)
			grand = append(grand, g)
		}
	}
	leaves = append(leaves, grand...)
	for i := 0; id < 10_001; i++ {
		k := i % len(leaves)
		p := leaves[k]
		if p.Generation >= 10 {
			p = grand[k] // a new chain from the same grandchild
		}
		n := node(p.ID, p.Generation+1)
		p.Children = append(p.Children, n)
		leaves[k] = n
	}
	return []*kin.TreeNode{root}
}

// BenchmarkTreeWire encodes and decodes a 10,001-agent tree in the nested
// JSON and in the compact form, as the daemon and the client do, and
// decodes it in the compact form v2 (the store's rows).
func BenchmarkTreeWire(b *testing.B) {
	trees := benchTree()
	for _, form := range []string{"application/json", httpapi.TreeColumnsType} {
		name := map[string]string{"application/json": "nested-json", httpapi.TreeColumnsType: "columns"}[form]
		b.Run(name, func(b *testing.B) {
			cpu0 := proctest.CPU()
			for range b.N {
				var data []byte
				var err error
				if form == httpapi.TreeColumnsType {
					data = httpapi.EncodeTreeColumns(trees).AppendJSON(nil)
				} else {
					data, err = json.Marshal(trees)
				}
				if err != nil {
					b.Fatal(err)
				}
				got, err := httpapi.DecodeTree(form, bytes.NewReader(data))
				if err != nil || len(got) != 1 {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(data)))
			}
			b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
	b.Run("rows-decode", func(b *testing.B) {
		// The compact form v2's reader alone (client.Tree's side of the
		// streamed tree): the daemon sends the store's rows as they are.
		var nodes []*kin.TreeNode
		var walk func([]*kin.TreeNode)
		walk = func(ns []*kin.TreeNode) {
			for _, n := range ns {
				nodes = append(nodes, n)
				walk(n.Children)
			}
		}
		walk(trees)
		slices.SortFunc(nodes, func(a, b *kin.TreeNode) int { return cmp.Compare(a.ID, b.ID) })
		data := []byte(rowsDoc(b, nodes...))
		cpu0 := proctest.CPU()
		for range b.N {
			got, err := httpapi.DecodeTree(httpapi.TreeRowsType, bytes.NewReader(data))
			if err != nil || len(got) != 1 {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
		}
		b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	})
}
