package auditlog

import (
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// Frontier is the right edge of a tree: the hashes of its maximal complete
// subtrees, one per set bit of its size. It is all that appending a leaf and
// computing the root need, so a store keeps it in memory and a verifier
// recomputes a whole log with it in constant space. The zero value is the
// empty tree. Copying a Frontier copies the tree (it has no pointers), which
// is how a store undoes a rolled-back append.
type Frontier struct {
	n      int64
	levels [64]tlog.Hash // levels[l]: the complete subtree at level l, when bit l of n is set
}

// Size is the number of leaves.
func (f *Frontier) Size() int64 { return f.n }

// Append adds the leaf whose RFC 6962 hash is h as leaf Size() and returns
// the hashes tlog stores for it (tlog.StoredHashes: the leaf's hash, then
// every subtree it completes, lowest first).
func (f *Frontier) Append(h tlog.Hash) []tlog.Hash {
	hs, _ := f.AppendTo(nil, h)
	return hs
}

// Undo is what AppendTo replaced, to take an append back.
type Undo struct {
	level int
	old   tlog.Hash
}

// AppendTo is Append into dst (no allocation when dst has room), for the
// hot paths (the store's writer, Verify); it returns what to hand to Revert
// to take the append back. The hashes are the ones
// tlog.StoredHashesForRecordHash computes (the tests hold them equal): each
// trailing one bit of the size pairs the new subtree with the edge's.
func (f *Frontier) AppendTo(dst []tlog.Hash, h tlog.Hash) ([]tlog.Hash, Undo) {
	m := bits.TrailingZeros64(uint64(f.n + 1))
	dst = append(dst, h)
	for l := 0; l < m; l++ {
		h = tlog.NodeHash(f.levels[l], h)
		dst = append(dst, h)
	}
	u := Undo{level: m, old: f.levels[m]}
	f.levels[m] = h
	f.n++
	return dst, u
}

// Revert takes back the last AppendTo, whose Undo u is.
func (f *Frontier) Revert(u Undo) {
	f.n--
	f.levels[u.level] = u.old
}

// Root is the tree's RFC 6962 root hash (for the empty tree, as tlog has
// it, SHA-256 of the empty string).
func (f *Frontier) Root() tlog.Hash {
	h, err := tlog.TreeHash(f.n, f)
	if err != nil {
		panic(err) // ReadHashes never fails for the hashes TreeHash asks for
	}
	return h
}

// ReadHashes serves tlog the frontier's hashes; any other index is an error.
func (f *Frontier) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 {
			return nil, fmt.Errorf("auditlog: hash %d is not a storage index", x)
		}
		level, k := tlog.SplitStoredHashIndex(x)
		if f.n&(1<<level) == 0 || k != f.n>>level-1 {
			return nil, fmt.Errorf("auditlog: hash %d (level %d, #%d) is not on the edge of a tree of %d leaves", x, level, k, f.n)
		}
		out[i] = f.levels[level]
	}
	return out, nil
}

// LoadFrontier rebuilds the frontier of a tree of n leaves from its stored
// hashes, read through r (tlog's storage indexes).
func LoadFrontier(n int64, r tlog.HashReader) (Frontier, error) {
	if n < 0 {
		return Frontier{}, fmt.Errorf("auditlog: a tree of %d leaves", n)
	}
	f := Frontier{n: n}
	var idx []int64
	var lv []int
	for l := 63; l >= 0; l-- {
		if n&(1<<l) != 0 {
			idx = append(idx, tlog.StoredHashIndex(l, n>>l-1))
			lv = append(lv, l)
		}
	}
	hs, err := r.ReadHashes(idx)
	if err != nil {
		return Frontier{}, err
	}
	if len(hs) != len(idx) {
		return Frontier{}, fmt.Errorf("auditlog: asked for %d stored hashes, got %d", len(idx), len(hs))
	}
	for i, l := range lv {
		f.levels[l] = hs[i]
	}
	return f, nil
}

// StoredHashLeaf says which leaf's stored hashes hold storage index x, and
// where among them: tlog stores the hash of a subtree when its last leaf is
// appended, so every index belongs to exactly one leaf.
func StoredHashLeaf(x int64) (leaf int64, offset int) {
	level, k := tlog.SplitStoredHashIndex(x)
	leaf = (k+1)<<level - 1
	return leaf, int(x - tlog.StoredHashIndex(0, leaf))
}
