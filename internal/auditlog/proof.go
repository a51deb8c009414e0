package auditlog

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

// Prove returns the inclusion proof of event e against the stored
// checkpoint cp, from the stored hashes of src.
func Prove(ctx context.Context, src Source, e kin.Event, cp StoredCheckpoint) (kin.LogProof, error) {
	i := e.Seq - 1
	if i < 0 || i >= cp.Size {
		return kin.LogProof{}, fmt.Errorf("event %d is not covered by the checkpoint of size %d", e.Seq, cp.Size)
	}
	p, err := tlog.ProveRecord(cp.Size, i, HashReader(ctx, src))
	if err != nil {
		return kin.LogProof{}, fmt.Errorf("inclusion proof of event %d: %w", e.Seq, err)
	}
	return kin.LogProof{Seq: e.Seq, Index: i, Leaf: string(Leaf(e)), Proof: encodeHashes(p), Checkpoint: string(cp.Note)}, nil
}

// ProveConsistency returns the proof that the tree of size from is a prefix
// of the tree of size to, from the stored hashes of src.
func ProveConsistency(ctx context.Context, src Source, from, to int64) (kin.LogConsistency, error) {
	if from < 0 || from > to {
		return kin.LogConsistency{}, fmt.Errorf("no consistency proof from size %d to size %d", from, to)
	}
	if from == 0 {
		// Every tree extends the empty one; tlog has no proof for it.
		return kin.LogConsistency{From: 0, To: to, Proof: []string{}}, nil
	}
	p, err := tlog.ProveTree(to, from, HashReader(ctx, src))
	if err != nil {
		return kin.LogConsistency{}, fmt.Errorf("consistency proof from size %d to %d: %w", from, to, err)
	}
	return kin.LogConsistency{From: from, To: to, Proof: encodeHashes(p)}, nil
}

// VerifyProof checks an inclusion proof with nothing but the log's key and
// returns the proven event and the checkpoint it is proven against.
func VerifyProof(p kin.LogProof, v note.Verifier) (kin.Event, Checkpoint, error) {
	c, err := OpenCheckpoint([]byte(p.Checkpoint), v)
	if err != nil {
		return kin.Event{}, Checkpoint{}, err
	}
	e, err := ParseLeaf([]byte(p.Leaf))
	if err != nil {
		return kin.Event{}, Checkpoint{}, err
	}
	if e.Seq != p.Seq || p.Index != e.Seq-1 {
		return kin.Event{}, Checkpoint{}, fmt.Errorf("the proof is for seq %d at index %d but its leaf is seq %d", p.Seq, p.Index, e.Seq)
	}
	if p.Index >= c.Size {
		return kin.Event{}, Checkpoint{}, fmt.Errorf("index %d is beyond the checkpoint's %d leaves", p.Index, c.Size)
	}
	hashes, err := decodeHashes(p.Proof)
	if err != nil {
		return kin.Event{}, Checkpoint{}, err
	}
	if err := tlog.CheckRecord(hashes, c.Size, c.Root, p.Index, tlog.RecordHash([]byte(p.Leaf))); err != nil {
		return kin.Event{}, Checkpoint{}, fmt.Errorf("event seq %d is not in the log of the checkpoint (size %d): %w", e.Seq, c.Size, err)
	}
	return e, c, nil
}

// VerifyConsistency checks that the tree of size p.From with root old is a
// prefix of the tree of size p.To with root new.
func VerifyConsistency(p kin.LogConsistency, old, new tlog.Hash) error {
	hashes, err := decodeHashes(p.Proof)
	if err != nil {
		return err
	}
	if p.From < 0 || p.From > p.To {
		return fmt.Errorf("no consistency proof from size %d to size %d", p.From, p.To)
	}
	if p.From == 0 {
		// The empty tree is a prefix of every tree: the proof is empty,
		// and old must be the empty tree's root.
		if empty, _ := tlog.TreeHash(0, nil); len(hashes) != 0 || old != empty {
			return fmt.Errorf("the tree of size 0 is not a prefix of the tree of size %d: its root is not the empty tree's or its proof is not empty", p.To)
		}
		return nil
	}
	if err := tlog.CheckTree(hashes, p.To, new, p.From, old); err != nil {
		return fmt.Errorf("the tree of size %d is not a prefix of the tree of size %d: %w", p.From, p.To, err)
	}
	return nil
}

// VerifiedLink is one link of a proven responsibility chain, as its proven
// agent.registered event states it (the JSON names are the event's; Seq and
// Time come from its leaf).
type VerifiedLink struct {
	Agent       kin.AgentID `json:"agent"`
	Parent      kin.AgentID `json:"parent"`
	Name        string      `json:"name"`
	Role        string      `json:"role"`
	Responsible string      `json:"responsible"`
	Generation  int         `json:"generation"`
	Seq         int64       `json:"seq"`
	Time        time.Time   `json:"time"`
}

// VerifyAncestry checks a chain proof with nothing but the log's key: every
// link's agent.registered event is in the log under one checkpoint, each
// link's registered parent is the next link's agent, generations count down
// by one, and the last link is a root. The links it returns are read from the
// proven events, not from the proof's own summary, which must agree.
func VerifyAncestry(p kin.AncestryProof, v note.Verifier) ([]VerifiedLink, Checkpoint, error) {
	if len(p.Links) == 0 {
		return nil, Checkpoint{}, fmt.Errorf("the chain has no links")
	}
	var out []VerifiedLink
	var cp Checkpoint
	for k, l := range p.Links {
		if l.Proof.Checkpoint != p.Checkpoint {
			return nil, Checkpoint{}, fmt.Errorf("link %d (agent %d) is proven against another checkpoint than the chain's", k, l.Agent)
		}
		e, c, err := VerifyProof(l.Proof, v)
		if err != nil {
			return nil, Checkpoint{}, fmt.Errorf("link %d (agent %d): %w", k, l.Agent, err)
		}
		cp = c
		if e.Type != kin.EventAgentRegistered {
			return nil, Checkpoint{}, fmt.Errorf("link %d (agent %d): its proven event is %s, not %s", k, l.Agent, e.Type, kin.EventAgentRegistered)
		}
		var got VerifiedLink // its JSON names are the registration's
		if err := json.Unmarshal(e.Data, &got); err != nil {
			return nil, Checkpoint{}, fmt.Errorf("link %d (agent %d): its registration's data: %w", k, l.Agent, err)
		}
		got.Seq, got.Time = e.Seq, e.Time
		if got.Agent != e.Agent || got.Parent != e.Parent {
			return nil, Checkpoint{}, fmt.Errorf("link %d: its registration names agent %d under %d in its data but %d under %d in its leaf", k, got.Agent, got.Parent, e.Agent, e.Parent)
		}
		if l.Agent != got.Agent || l.Parent != got.Parent || l.Name != got.Name || l.Responsible != got.Responsible || l.Generation != got.Generation {
			return nil, Checkpoint{}, fmt.Errorf("link %d says agent %d %q under %d (responsible %q, generation %d) but its proven registration says agent %d %q under %d (responsible %q, generation %d)",
				k, l.Agent, l.Name, l.Parent, l.Responsible, l.Generation, got.Agent, got.Name, got.Parent, got.Responsible, got.Generation)
		}
		if k > 0 {
			child := out[k-1]
			if child.Parent != got.Agent {
				return nil, Checkpoint{}, fmt.Errorf("link %d is agent %d but link %d's parent is %d", k, got.Agent, k-1, child.Parent)
			}
			if child.Generation != got.Generation+1 {
				return nil, Checkpoint{}, fmt.Errorf("link %d is generation %d but its child (link %d) is generation %d", k, got.Generation, k-1, child.Generation)
			}
		}
		out = append(out, got)
	}
	if last := out[len(out)-1]; last.Parent != 0 || last.Generation != 0 {
		return nil, Checkpoint{}, fmt.Errorf("the chain ends at agent %d, which has parent %d: it does not reach a root", last.Agent, last.Parent)
	}
	return out, cp, nil
}

func encodeHashes(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = b64(h)
	}
	return out
}

func decodeHashes(ss []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ss))
	for i, s := range ss {
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			return nil, fmt.Errorf("proof hash %d (%q) is not %d bytes of base64", i, abbreviate(s), tlog.HashSize)
		}
		copy(out[i][:], b)
	}
	return out, nil
}
