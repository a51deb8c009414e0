package kin

import "time"

// The verifiable event log: every event is a leaf of an append-only Merkle
// tree (RFC 6962 hashing), whose heads kin signs with its log key as
// checkpoints (the C2SP signed-note format). Hashes travel in standard
// base64, as in the checkpoints themselves.

// LogCheckpoint is a signed head of the event log's tree.
type LogCheckpoint struct {
	Size int64     `json:"size"` // how many events (leaves) it covers
	Root string    `json:"root"` // the tree's RFC 6962 root hash, base64
	Time time.Time `json:"time"` // when kin signed it
	Note string    `json:"note"` // the signed note: checkpoint text, blank line, signature
	// Key is the log's public key (a note verifier key), set on the
	// latest checkpoint.
	Key string `json:"key,omitempty"`
}

// LogProof proves that one event is in the log: its leaf, the leaf's
// position and the hashes that lead from it to a checkpoint's root.
type LogProof struct {
	Seq        int64    `json:"seq"`
	Index      int64    `json:"index"`      // leaf index: Seq-1
	Leaf       string   `json:"leaf"`       // the leaf's exact bytes (a JSON object)
	Proof      []string `json:"proof"`      // RFC 6962 inclusion proof, base64 hashes
	Checkpoint string   `json:"checkpoint"` // the signed note it is proven against
}

// LogConsistency proves that the tree of size From is a prefix of the tree
// of size To.
type LogConsistency struct {
	From  int64    `json:"from"`
	To    int64    `json:"to"`
	Proof []string `json:"proof"` // base64 hashes
}

// LogVerifyRequest asks kin to recompute its log. Checkpoint is a signed
// checkpoint the caller kept earlier (optional), checked against the
// recomputed tree and, by a consistency proof, against the latest one.
type LogVerifyRequest struct {
	Checkpoint string `json:"checkpoint,omitempty"`
}

// LogReport is the outcome of a verification.
type LogReport struct {
	OK          bool  `json:"ok"`
	Events      int64 `json:"events"`      // events (leaves) recomputed
	Checkpoints int   `json:"checkpoints"` // signed checkpoints checked
	// BadIndex is the first leaf index where the log differs from what was
	// recorded or signed, when one can be named; BadSeq is its event's seq.
	BadIndex *int64 `json:"bad_index,omitempty"`
	BadSeq   *int64 `json:"bad_seq,omitempty"`
	// Problem says what differs, in a sentence; "" when OK.
	Problem string `json:"problem,omitempty"`
	// Latest is the latest checkpoint checked.
	Latest *LogCheckpoint `json:"latest,omitempty"`
	// Consistency says how the caller's checkpoint was checked, if one was
	// given.
	Consistency string `json:"consistency,omitempty"`
}

// AncestryProof makes a responsibility chain provable to anyone who trusts
// only the log key: each link's agent.registered event with its inclusion
// proof, all against one checkpoint.
type AncestryProof struct {
	Checkpoint string         `json:"checkpoint"`
	Links      []AncestryLink `json:"links"` // the agent first, its root last
}

// AncestryLink is one agent of a chain and the proof of its registration.
// Agent, Parent, Responsible and Name repeat what the proven leaf says, for
// reading; a verifier takes them from the leaf.
type AncestryLink struct {
	Agent       AgentID  `json:"agent"`
	Parent      AgentID  `json:"parent"`
	Name        string   `json:"name"`
	Responsible string   `json:"responsible"`
	Generation  int      `json:"generation"`
	Proof       LogProof `json:"proof"`
}
