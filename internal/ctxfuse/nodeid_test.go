package ctxfuse

import (
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

// FuzzNodeOf: any node id the kernel sends decodes without a panic, and
// an agent's node's id decodes back to the agent and kind it was made of.
func FuzzNodeOf(f *testing.F) {
	for _, seed := range []uint64{0, inoRoot, 2, 31, 32, ino(7, kindDir), ino(7, kindFile0+len(ctxfs.ControlFiles)), inoSocket, inoSocket + 1, 1<<63 | 5, ^uint64(0)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id uint64) {
		n, ok := nodeOf(id)
		if !ok {
			return
		}
		if n.id <= 0 || n.kind < kindID || n.kind >= kindFile0+len(ctxfs.ControlFiles) || ino(n.id, n.kind) != id {
			t.Fatalf("nodeOf(%#x) = %+v", id, n)
		}
	})
}

// TestNodeIDs: an agent's nodes are its own, and no other node's id
// (the root's, a socket's) decodes as an agent's.
func TestNodeIDs(t *testing.T) {
	for _, id := range []kin.AgentID{1, 7, 1 << 40} {
		for kind := kindID; kind < kindFile0+len(ctxfs.ControlFiles); kind++ {
			if n, ok := nodeOf(ino(id, kind)); !ok || n.id != id || n.kind != kind {
				t.Errorf("nodeOf(ino(%d, %d)) = %+v, %v", id, kind, n, ok)
			}
		}
	}
	for _, id := range []uint64{0, inoRoot, 31, ino(7, kindFile0+len(ctxfs.ControlFiles)), inoSocket, inoSocket + 9} {
		if n, ok := nodeOf(id); ok {
			t.Errorf("nodeOf(%#x) = %+v, an agent's", id, n)
		}
	}
}
