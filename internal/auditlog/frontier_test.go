package auditlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// hashStore is tlog's reference storage: every stored hash at its index.
type hashStore []tlog.Hash

func (s hashStore) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s)) {
			return nil, fmt.Errorf("hashStore: no hash %d", x)
		}
		out[i] = s[x]
	}
	return out, nil
}

func testRecord(i int64) []byte {
	b := binary.BigEndian.AppendUint64([]byte("record "), uint64(i))
	h := sha256.Sum256(b)
	return append(b, h[:i%32]...)
}

func TestFrontierMatchesTlog(t *testing.T) {
	const n = 300
	var f Frontier
	var ref hashStore
	frontiers := []Frontier{f}
	if f.Size() != 0 {
		t.Fatalf("zero Frontier has size %d", f.Size())
	}
	if root, err := tlog.TreeHash(0, ref); err != nil || f.Root() != root {
		t.Fatalf("empty root %v, tlog says %v (%v)", f.Root(), root, err)
	}
	for i := int64(0); i < n; i++ {
		rec := testRecord(i)
		want, err := tlog.StoredHashes(i, rec, ref)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ref)) != tlog.StoredHashIndex(0, i) {
			t.Fatalf("reference store has %d hashes before leaf %d, tlog says leaf %d starts at %d", len(ref), i, i, tlog.StoredHashIndex(0, i))
		}
		ref = append(ref, want...)
		got := f.Append(tlog.RecordHash(rec))
		if len(got) != len(want) {
			t.Fatalf("leaf %d: Append stored %d hashes, tlog.StoredHashes %d", i, len(got), len(want))
		}
		for k := range got {
			if got[k] != want[k] {
				t.Fatalf("leaf %d: stored hash %d is %v, tlog says %v", i, k, got[k], want[k])
			}
		}
		if f.Size() != i+1 {
			t.Fatalf("after leaf %d: Size() = %d", i, f.Size())
		}
		root, err := tlog.TreeHash(i+1, ref)
		if err != nil {
			t.Fatal(err)
		}
		if f.Root() != root {
			t.Fatalf("size %d: Root() = %v, tlog.TreeHash = %v", i+1, f.Root(), root)
		}
		frontiers = append(frontiers, f)
	}

	// LoadFrontier from the reference store gives the same frontier, which
	// appends on identically.
	for size := int64(0); size <= n; size++ {
		loaded, err := LoadFrontier(size, ref)
		if err != nil {
			t.Fatalf("LoadFrontier(%d): %v", size, err)
		}
		if !sameEdge(loaded, frontiers[size]) {
			t.Fatalf("LoadFrontier(%d) differs from the appended frontier", size)
		}
		if loaded.Size() != size || loaded.Root() != frontiers[size].Root() {
			t.Fatalf("LoadFrontier(%d): size %d root %v, want root %v", size, loaded.Size(), loaded.Root(), frontiers[size].Root())
		}
		if size+5 > n {
			continue
		}
		appended := frontiers[size] // a copy
		for i := size; i < size+5; i++ {
			h := tlog.RecordHash(testRecord(i))
			a := loaded.Append(h)
			b := appended.Append(h)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("from size %d: leaf %d stores %v after LoadFrontier, %v after appending", size, i, a, b)
			}
		}
		if loaded.Root() != frontiers[size+5].Root() {
			t.Fatalf("from LoadFrontier(%d), five more leaves give root %v, want %v", size, loaded.Root(), frontiers[size+5].Root())
		}
		// Copying a frontier copied the tree: the saved one did not move.
		if frontiers[size].Size() != size {
			t.Fatalf("appending to a copy changed the original")
		}
	}

	// StoredHashLeaf names, for every storage index, the leaf whose stored
	// hashes hold it and its offset among them.
	leaf := int64(0)
	for x := int64(0); x < int64(len(ref)); x++ {
		for leaf+1 < n && tlog.StoredHashIndex(0, leaf+1) <= x {
			leaf++
		}
		gotLeaf, off := StoredHashLeaf(x)
		if gotLeaf != leaf || int64(off) != x-tlog.StoredHashIndex(0, leaf) {
			t.Fatalf("StoredHashLeaf(%d) = %d, %d, want %d, %d", x, gotLeaf, off, leaf, x-tlog.StoredHashIndex(0, leaf))
		}
		stored, err := tlog.StoredHashes(leaf, testRecord(leaf), ref)
		if err != nil {
			t.Fatal(err)
		}
		if off >= len(stored) || stored[off] != ref[x] {
			t.Fatalf("StoredHashLeaf(%d) = %d, %d, but that leaf's stored hashes do not hold it there", x, gotLeaf, off)
		}
	}
	// And per level: the hash of subtree (level, k) is stored with its last leaf.
	for level := 0; level < 8; level++ {
		for k := int64(0); (k+1)<<level <= n; k++ {
			x := tlog.StoredHashIndex(level, k)
			gotLeaf, off := StoredHashLeaf(x)
			if want := (k+1)<<level - 1; gotLeaf != want || off != level {
				t.Fatalf("StoredHashLeaf(StoredHashIndex(%d, %d)) = %d, %d, want %d, %d", level, k, gotLeaf, off, want, level)
			}
		}
	}
}

// sameEdge says whether a and b are the same tree: same size, same
// subtree hashes on the edge (levels off the edge are stale leftovers).
func sameEdge(a, b Frontier) bool {
	if a.n != b.n {
		return false
	}
	for l := range 64 {
		if a.n&(1<<l) != 0 && a.levels[l] != b.levels[l] {
			return false
		}
	}
	return true
}

func TestFrontierReadHashesRefusesOffEdge(t *testing.T) {
	var f Frontier
	var ref hashStore
	for i := int64(0); i < 13; i++ { // 13 = 0b1101: subtrees at levels 3, 2, 0
		stored := f.Append(tlog.RecordHash(testRecord(i)))
		ref = append(ref, stored...)
	}
	edge := []int64{tlog.StoredHashIndex(3, 0), tlog.StoredHashIndex(2, 2), tlog.StoredHashIndex(0, 12)}
	hs, err := f.ReadHashes(edge)
	if err != nil {
		t.Fatalf("ReadHashes(edge %v): %v", edge, err)
	}
	for i, x := range edge {
		if hs[i] != ref[x] {
			t.Fatalf("ReadHashes(%d) = %v, want %v", x, hs[i], ref[x])
		}
	}
	for _, x := range []int64{
		tlog.StoredHashIndex(0, 11),  // a leaf inside the level-2 subtree
		tlog.StoredHashIndex(1, 5),   // level 1: bit 1 of 13 is clear
		tlog.StoredHashIndex(2, 0),   // an interior level-2 subtree
		tlog.StoredHashIndex(0, 13),  // the next leaf, not appended
		tlog.StoredHashIndex(4, 0),   // the level-4 subtree does not exist yet
		tlog.StoredHashIndex(60, 0),  // far off
		-1,                           // not an index at all
		tlog.StoredHashIndex(0, 200), // beyond the tree
	} {
		if hs, err := f.ReadHashes([]int64{edge[0], x}); err == nil {
			t.Errorf("ReadHashes(%d) = %v, want an error", x, hs)
		}
	}
	var empty Frontier
	if _, err := empty.ReadHashes([]int64{0}); err == nil {
		t.Errorf("the empty frontier served hash 0")
	}
}

func TestLoadFrontierErrors(t *testing.T) {
	if _, err := LoadFrontier(5, hashStore{}); err == nil {
		t.Errorf("LoadFrontier from an empty store succeeded")
	}
	short := tlog.HashReaderFunc(func(x []int64) ([]tlog.Hash, error) { return make([]tlog.Hash, len(x)-1), nil })
	if _, err := LoadFrontier(7, short); err == nil {
		t.Errorf("LoadFrontier accepted too few hashes")
	}
	if _, err := LoadFrontier(-1, hashStore{}); err == nil {
		t.Errorf("LoadFrontier(-1) succeeded")
	}
	f, err := LoadFrontier(0, hashStore{})
	if err != nil || !sameEdge(f, Frontier{}) {
		t.Errorf("LoadFrontier(0) = %v, %v, want the empty frontier", f, err)
	}
}

// TestAppendToMatchesAppendAndReverts: the store's allocation-free append
// gives tlog's stored hashes, and Revert takes it back exactly.
func TestAppendToMatchesAppendAndReverts(t *testing.T) {
	var a, b Frontier
	var buf []tlog.Hash
	for i := 0; i < 300; i++ {
		leaf := []byte(fmt.Sprintf(`{"seq":%d}`, i+1))
		h := HashLeaf(append([]byte{0}, leaf...))
		if h != tlog.RecordHash(leaf) {
			t.Fatalf("HashLeaf(0x00 || leaf %d) differs from tlog.RecordHash", i)
		}
		want := a.Append(h)
		before := b
		var u Undo
		buf, u = b.AppendTo(buf[:0], h)
		if !slices.Equal(buf, want) {
			t.Fatalf("leaf %d: AppendTo gave %d hashes, Append %d, or they differ", i, len(buf), len(want))
		}
		b.Revert(u)
		if b != before {
			t.Fatalf("leaf %d: Revert did not restore the frontier", i)
		}
		buf, _ = b.AppendTo(buf[:0], h)
		if b.Root() != a.Root() {
			t.Fatalf("leaf %d: roots differ after AppendTo", i)
		}
	}
}
