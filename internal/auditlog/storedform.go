package auditlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// What a store keeps per leaf. tlog stores, for leaf n, the leaf's hash and
// the hash of every subtree the leaf completes: two hashes (64 bytes) per
// event on average, which made appending a third slower in SQLite (the
// bytes written, not the hashing). kin keeps less and computes the rest:
//
//   - the first FingerprintSize bytes of the leaf hash: enough to name the
//     exact event that was changed (a forger who also matches 8 bytes still
//     changes every signed root above it);
//   - the full hash of every completed subtree of level SparseLevel (16
//     leaves) or more: 1/8 of a hash per event on average.
//
// A hash below SparseLevel is recomputed from the (at most 8) events under
// it when a proof needs it. That is 12 bytes per event on average.
const (
	FingerprintSize = 8
	SparseLevel     = 4
)

// StoredForm appends to dst what a store keeps for a leaf, from the hashes
// tlog.StoredHashes (or Frontier.Append) gives for it.
func StoredForm(dst []byte, hashes []tlog.Hash) []byte {
	dst = append(dst, hashes[0][:FingerprintSize]...)
	for l := SparseLevel; l < len(hashes); l++ {
		dst = append(dst, hashes[l][:]...)
	}
	return dst
}

// StoredAt says where the tree hash with tlog storage index x is kept: in
// the stored form of leaf, at offset. ok is false for a hash a store does not
// keep (below SparseLevel): ComputedFrom says which leaves it is computed
// from.
func StoredAt(x int64) (leaf int64, offset int, ok bool) {
	level, _ := tlog.SplitStoredHashIndex(x)
	if level < SparseLevel {
		return 0, 0, false
	}
	leaf, _ = StoredHashLeaf(x) // the row tlog would store it with
	return leaf, FingerprintSize + (level-SparseLevel)*tlog.HashSize, true
}

// ComputedFrom says which leaves the hash with storage index x covers:
// count leaves from first.
func ComputedFrom(x int64) (first, count int64) {
	level, k := tlog.SplitStoredHashIndex(x)
	return k << level, 1 << level
}

// SubtreeHash is the RFC 6962 hash of a complete subtree from its leaves'
// hashes (a power of two of them).
func SubtreeHash(leaves []tlog.Hash) (tlog.Hash, error) {
	n := len(leaves)
	if n == 0 || n&(n-1) != 0 {
		return tlog.Hash{}, fmt.Errorf("auditlog: a complete subtree has a power of two of leaves, not %d", n)
	}
	hs := append([]tlog.Hash(nil), leaves...)
	for len(hs) > 1 {
		for i := 0; i < len(hs)/2; i++ {
			hs[i] = tlog.NodeHash(hs[2*i], hs[2*i+1])
		}
		hs = hs[:len(hs)/2]
	}
	return hs[0], nil
}
