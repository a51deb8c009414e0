// Package auditlog makes kin's event stream a transparency log in the style
// of Certificate Transparency and Go's checksum database: every event is a
// leaf of an append-only Merkle tree hashed as RFC 6962 says
// (golang.org/x/mod/sumdb/tlog does the tree math), and kin signs the tree's
// head with its own Ed25519 log key as a checkpoint in the signed-note format
// (golang.org/x/mod/sumdb/note, C2SP tlog-checkpoint).
//
// It holds the pieces every side shares: the canonical bytes of a leaf
// (leaf.go), the right edge of a tree that appending and recomputing need
// (frontier.go), checkpoints and the log key (checkpoint.go), the
// recomputation that `kin log verify` runs over a store (verify.go), proofs
// and the chain proofs of `kin ancestors --proof` (proof.go), and the export
// a third party checks with nothing but the log's public key (export.go).
//
// The package never reads a store or a daemon itself: callers hand it
// events and stored hashes, so the offline verifier shares every line of
// the checking code with the daemon's.
package auditlog
