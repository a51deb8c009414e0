package auditlog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestProveVerifyProof(t *testing.T) {
	ctx := context.Background()
	l := buildLog(t, 11, 260, 1, 2, 3, 64, 100, 129, 255, 260)
	checked := 0
	for _, cp := range l.src.cps {
		for i := int64(0); i < cp.Size; i += 1 + i/7 {
			e := l.src.entries[i].Event
			p, err := Prove(ctx, l.src, e, cp)
			if err != nil {
				t.Fatalf("Prove(seq %d, size %d): %v", e.Seq, cp.Size, err)
			}
			if p.Seq != e.Seq || p.Index != i || p.Leaf != string(Leaf(e)) || p.Checkpoint != string(cp.Note) {
				t.Fatalf("Prove(seq %d, size %d) = %+v", e.Seq, cp.Size, p)
			}
			got, c, err := VerifyProof(p, l.v)
			if err != nil {
				t.Fatalf("VerifyProof(seq %d, size %d): %v", e.Seq, cp.Size, err)
			}
			if !bytes.Equal(Leaf(got), Leaf(e)) {
				t.Fatalf("VerifyProof returned %+v, want %+v", got, e)
			}
			if c.Size != cp.Size || c.Root != l.roots[cp.Size] || c.Origin != l.key.Name() {
				t.Fatalf("VerifyProof checkpoint %+v, want size %d", c, cp.Size)
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("only %d proofs checked", checked)
	}
}

func TestProveRefusesUncovered(t *testing.T) {
	ctx := context.Background()
	l := buildLog(t, 12, 50, 20)
	cp := l.src.cps[0]
	for _, seq := range []int64{0, -1, 21, 50} {
		e := kin.Event{Seq: seq}
		if seq >= 1 {
			e = l.src.entries[seq-1].Event
		}
		if p, err := Prove(ctx, l.src, e, cp); err == nil {
			t.Fatalf("Prove(seq %d, size 20) = %+v", seq, p)
		}
	}
	// A store missing a hash it keeps fails to prove: leaf 15 holds the
	// subtree of leaves 0-15, which the proof of leaf 17 needs.
	src := l.src.clone()
	src.entries[15].Hashes = src.entries[15].Hashes[:FingerprintSize]
	if _, err := Prove(ctx, src, l.src.entries[17].Event, cp); err == nil {
		t.Fatal("Prove with a hash missing from the store succeeded")
	}
}

func flipHash(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	b[0] ^= 1
	return base64.StdEncoding.EncodeToString(b)
}

func TestVerifyProofRefuses(t *testing.T) {
	ctx := context.Background()
	l := buildLog(t, 13, 200, 200)
	cp := l.src.cps[0]
	e := l.src.entries[77].Event
	good, err := Prove(ctx, l.src, e, cp)
	if err != nil {
		t.Fatal(err)
	}
	other := newTestLog(t, 14)
	tests := []struct {
		name   string
		mutate func(p *kin.LogProof) *testLog
	}{
		{"tampered leaf data", func(p *kin.LogProof) *testLog {
			e2 := e
			e2.Data = []byte(strings.Replace(string(e.Data), `"tokens":`, `"tokens":1`, 1))
			p.Leaf = string(Leaf(e2))
			return l
		}},
		{"tampered leaf type", func(p *kin.LogProof) *testLog {
			e2 := e
			e2.Type = "forged"
			p.Leaf = string(Leaf(e2))
			return l
		}},
		{"non-canonical leaf", func(p *kin.LogProof) *testLog {
			p.Leaf = strings.Replace(p.Leaf, `,"type"`, `, "type"`, 1)
			return l
		}},
		{"another event's leaf", func(p *kin.LogProof) *testLog {
			e2 := l.src.entries[78].Event
			e2.Seq = e.Seq
			p.Leaf = string(Leaf(e2))
			return l
		}},
		{"tampered first proof hash", func(p *kin.LogProof) *testLog {
			p.Proof[0] = flipHash(p.Proof[0])
			return l
		}},
		{"tampered last proof hash", func(p *kin.LogProof) *testLog {
			p.Proof[len(p.Proof)-1] = flipHash(p.Proof[len(p.Proof)-1])
			return l
		}},
		{"dropped proof hash", func(p *kin.LogProof) *testLog {
			p.Proof = p.Proof[1:]
			return l
		}},
		{"extra proof hash", func(p *kin.LogProof) *testLog {
			p.Proof = append(p.Proof, p.Proof[0])
			return l
		}},
		{"proof hash not base64", func(p *kin.LogProof) *testLog {
			p.Proof[0] = "!!"
			return l
		}},
		{"proof hash too short", func(p *kin.LogProof) *testLog {
			p.Proof[0] = base64.StdEncoding.EncodeToString(make([]byte, 31))
			return l
		}},
		{"wrong index", func(p *kin.LogProof) *testLog {
			p.Index++
			return l
		}},
		{"wrong seq", func(p *kin.LogProof) *testLog {
			p.Seq++
			return l
		}},
		{"wrong seq and index, leaf moved", func(p *kin.LogProof) *testLog {
			// The leaf claims another position: the proof does not hold there.
			e2 := e
			e2.Seq++
			p.Seq, p.Index, p.Leaf = e2.Seq, e2.Seq-1, string(Leaf(e2))
			return l
		}},
		{"other key", func(p *kin.LogProof) *testLog {
			return other
		}},
		{"altered checkpoint", func(p *kin.LogProof) *testLog {
			p.Checkpoint = strings.Replace(p.Checkpoint, "\n200\n", "\n199\n", 1)
			return l
		}},
		{"checkpoint of another size", func(p *kin.LogProof) *testLog {
			p.Checkpoint = string(l.sign(t, 150).Note)
			return l
		}},
		{"index beyond the checkpoint", func(p *kin.LogProof) *testLog {
			p.Checkpoint = string(l.sign(t, 77).Note)
			return l
		}},
	}
	if _, _, err := VerifyProof(good, l.v); err != nil {
		t.Fatalf("the untampered proof: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			p.Proof = append([]string(nil), good.Proof...)
			who := tt.mutate(&p)
			if e, c, err := VerifyProof(p, who.v); err == nil {
				t.Fatalf("VerifyProof = %+v, %+v, want an error", e, c)
			}
		})
	}
}

func TestProveVerifyConsistency(t *testing.T) {
	ctx := context.Background()
	l := buildLog(t, 15, 140)
	sizes := []int64{0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 100, 127, 128, 139, 140}
	for _, from := range sizes {
		for _, to := range sizes {
			if from > to {
				if p, err := ProveConsistency(ctx, l.src, from, to); err == nil {
					t.Fatalf("ProveConsistency(%d, %d) = %+v", from, to, p)
				}
				continue
			}
			p, err := ProveConsistency(ctx, l.src, from, to)
			if err != nil {
				t.Fatalf("ProveConsistency(%d, %d): %v", from, to, err)
			}
			if p.From != from || p.To != to || p.Proof == nil {
				t.Fatalf("ProveConsistency(%d, %d) = %+v", from, to, p)
			}
			if err := VerifyConsistency(p, l.roots[from], l.roots[to]); err != nil {
				t.Fatalf("VerifyConsistency(%d, %d): %v", from, to, err)
			}
			// Wrong roots fail.
			if from > 0 && from < to {
				if err := VerifyConsistency(p, l.roots[from-1], l.roots[to]); err == nil {
					t.Fatalf("VerifyConsistency(%d, %d) with the old root of %d succeeded", from, to, from-1)
				}
			}
			if from != to && from > 0 { // every tree extends the empty one
				if err := VerifyConsistency(p, l.roots[from], l.roots[to-1]); err == nil {
					t.Fatalf("VerifyConsistency(%d, %d) with the new root of %d succeeded", from, to, to-1)
				}
			}
			// A tampered proof fails.
			for k := range p.Proof {
				q := p
				q.Proof = append([]string(nil), p.Proof...)
				q.Proof[k] = flipHash(q.Proof[k])
				if err := VerifyConsistency(q, l.roots[from], l.roots[to]); err == nil {
					t.Fatalf("VerifyConsistency(%d, %d) with hash %d flipped succeeded", from, to, k)
				}
			}
			if len(p.Proof) > 0 {
				q := p
				q.Proof = p.Proof[1:]
				if err := VerifyConsistency(q, l.roots[from], l.roots[to]); err == nil {
					t.Fatalf("VerifyConsistency(%d, %d) with a hash dropped succeeded", from, to)
				}
			}
		}
	}
	// The empty tree is a prefix of every tree, but only the empty tree.
	p, err := ProveConsistency(ctx, l.src, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyConsistency(p, l.roots[1], l.roots[100]); err == nil {
		t.Fatal("VerifyConsistency from size 0 accepted a non-empty root")
	}
	p.Proof = []string{b64(l.roots[1])}
	if err := VerifyConsistency(p, l.roots[0], l.roots[100]); err == nil {
		t.Fatal("VerifyConsistency from size 0 accepted a non-empty proof")
	}
	if err := VerifyConsistency(kin.LogConsistency{From: 5, To: 3}, l.roots[5], l.roots[3]); err == nil {
		t.Fatal("VerifyConsistency from 5 to 3 succeeded")
	}
	if _, err := ProveConsistency(ctx, l.src, -1, 5); err == nil {
		t.Fatal("ProveConsistency from -1 succeeded")
	}
	// Proven consistency JSON-round-trips.
	p, err = ProveConsistency(ctx, l.src, 37, 140)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	var q kin.LogConsistency
	if err := json.Unmarshal(b, &q); err != nil || VerifyConsistency(q, l.roots[37], l.roots[140]) != nil {
		t.Fatalf("consistency proof through JSON: %v", err)
	}
}

// ancestryLog builds a log with the registrations of a chain 7 → 3 → 1
// among other events, and one checkpoint covering them.
type ancestryLog struct {
	*testLog
	reg map[kin.AgentID]kin.Event // each agent's agent.registered event
	cp  StoredCheckpoint
	cp2 StoredCheckpoint // a later checkpoint
}

func registration(agent, parent kin.AgentID, gen int, name, responsible string) kin.Event {
	data, _ := json.Marshal(map[string]any{
		"agent": agent, "name": name, "role": "writer", "creator": "x", "responsible": responsible,
		"parent": parent, "generation": gen, "life": "owned",
	})
	return kin.Event{Type: kin.EventAgentRegistered, Agent: agent, Parent: parent, Data: data}
}

func buildAncestryLog(t *testing.T) *ancestryLog {
	a := &ancestryLog{testLog: newTestLog(t, 21), reg: map[kin.AgentID]kin.Event{}}
	chain := []struct {
		agent, parent kin.AgentID
		gen           int
		name          string
	}{{1, 0, 0, "Root"}, {3, 1, 1, "Report-Writer"}, {7, 3, 2, "Fact-Checker"}}
	for _, c := range chain {
		a.addRandom(t, 13)
		a.reg[c.agent] = a.add(t, registration(c.agent, c.parent, c.gen, c.name, "Dr. Schmidt"))
		a.addRandom(t, 5)
		// Another agent registered in between, not in the chain.
		a.add(t, registration(c.agent+100, c.agent, c.gen+1, "bystander", "someone"))
	}
	a.addRandom(t, 20)
	a.cp = a.checkpoint(t)
	a.addRandom(t, 10)
	a.cp2 = a.checkpoint(t)
	return a
}

func (a *ancestryLog) link(t *testing.T, e kin.Event, cp StoredCheckpoint) kin.AncestryLink {
	t.Helper()
	p, err := Prove(context.Background(), a.src, e, cp)
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		Name        string `json:"name"`
		Responsible string `json:"responsible"`
		Generation  int    `json:"generation"`
	}
	if err := json.Unmarshal(e.Data, &reg); err != nil {
		t.Fatal(err)
	}
	return kin.AncestryLink{Agent: e.Agent, Parent: e.Parent, Name: reg.Name, Responsible: reg.Responsible, Generation: reg.Generation, Proof: p}
}

// registered finds agent id's agent.registered event.
func (a *ancestryLog) registered(t *testing.T, id kin.AgentID) kin.Event {
	t.Helper()
	for _, en := range a.src.entries {
		if en.Event.Type == kin.EventAgentRegistered && en.Event.Agent == id {
			return en.Event
		}
	}
	t.Fatalf("agent %d is not registered", id)
	return kin.Event{}
}

func (a *ancestryLog) proof(t *testing.T, agents ...kin.AgentID) kin.AncestryProof {
	t.Helper()
	p := kin.AncestryProof{Checkpoint: string(a.cp.Note)}
	for _, id := range agents {
		p.Links = append(p.Links, a.link(t, a.reg[id], a.cp))
	}
	return p
}

func TestVerifyAncestry(t *testing.T) {
	a := buildAncestryLog(t)
	p := a.proof(t, 7, 3, 1)
	// Through JSON, as it travels.
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var p2 kin.AncestryProof
	if err := json.Unmarshal(b, &p2); err != nil {
		t.Fatal(err)
	}
	links, c, err := VerifyAncestry(p2, a.v)
	if err != nil {
		t.Fatalf("VerifyAncestry: %v", err)
	}
	if c.Size != a.cp.Size || c.Root != a.roots[a.cp.Size] {
		t.Fatalf("checkpoint %+v, want size %d", c, a.cp.Size)
	}
	want := []VerifiedLink{
		{Agent: 7, Parent: 3, Name: "Fact-Checker", Role: "writer", Responsible: "Dr. Schmidt", Generation: 2, Seq: a.reg[7].Seq, Time: a.reg[7].Time},
		{Agent: 3, Parent: 1, Name: "Report-Writer", Role: "writer", Responsible: "Dr. Schmidt", Generation: 1, Seq: a.reg[3].Seq, Time: a.reg[3].Time},
		{Agent: 1, Parent: 0, Name: "Root", Role: "writer", Responsible: "Dr. Schmidt", Generation: 0, Seq: a.reg[1].Seq, Time: a.reg[1].Time},
	}
	if len(links) != len(want) {
		t.Fatalf("%d links, want %d", len(links), len(want))
	}
	for k := range want {
		g, w := links[k], want[k]
		if !g.Time.Equal(w.Time) {
			t.Fatalf("link %d time %v, want %v", k, g.Time, w.Time)
		}
		g.Time = w.Time
		if g != w {
			t.Fatalf("link %d = %+v, want %+v", k, g, w)
		}
	}
	// A bystander's chain verifies too.
	p = kin.AncestryProof{Checkpoint: string(a.cp.Note), Links: []kin.AncestryLink{a.link(t, a.registered(t, 103), a.cp), p.Links[1], p.Links[2]}}
	if links, _, err := VerifyAncestry(p, a.v); err != nil || len(links) != 3 || links[0].Agent != 103 || links[0].Responsible != "someone" {
		t.Fatalf("chain of 103: %+v, %v", links, err)
	}
	// A chain starting at the root alone is a chain too.
	if links, _, err := VerifyAncestry(a.proof(t, 1), a.v); err != nil || len(links) != 1 {
		t.Fatalf("root alone: %v, %v", links, err)
	}
}

func TestVerifyAncestryRefuses(t *testing.T) {
	a := buildAncestryLog(t)
	other := newTestLog(t, 22)
	tests := []struct {
		name string
		make func() (kin.AncestryProof, *testLog)
		msg  string
	}{
		{"summary lies about the responsible", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Links[1].Responsible = "Prof. Müller"
			return p, a.testLog
		}, "proven registration says"},
		{"summary lies about the name", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Links[0].Name = "Someone-Else"
			return p, a.testLog
		}, "proven registration says"},
		{"summary lies about the generation", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Links[2].Generation = 5
			return p, a.testLog
		}, "proven registration says"},
		{"links out of order", func() (kin.AncestryProof, *testLog) {
			return a.proof(t, 3, 7, 1), a.testLog
		}, "parent"},
		{"a link skipped", func() (kin.AncestryProof, *testLog) {
			return a.proof(t, 7, 1), a.testLog
		}, "parent"},
		{"another agent substituted in the middle", func() (kin.AncestryProof, *testLog) {
			// Agent 101 is registered under 1, generation 1, like 3.
			p := a.proof(t, 7, 3, 1)
			p.Links[1] = a.link(t, a.registered(t, 101), a.cp)
			return p, a.testLog
		}, "parent"},
		{"not reaching a root", func() (kin.AncestryProof, *testLog) {
			return a.proof(t, 7, 3), a.testLog
		}, "does not reach a root"},
		{"no links", func() (kin.AncestryProof, *testLog) {
			return kin.AncestryProof{Checkpoint: string(a.cp.Note)}, a.testLog
		}, "no links"},
		{"a link proven against another checkpoint", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Links[1] = a.link(t, a.reg[3], a.cp2)
			return p, a.testLog
		}, "another checkpoint"},
		{"every link proven against another checkpoint than the chain's", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Checkpoint = string(a.cp2.Note)
			return p, a.testLog
		}, "another checkpoint"},
		{"a link whose event is not agent.registered", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			// An event about agent 3 under 1 of another type.
			var e kin.Event
			for _, en := range a.src.entries {
				if en.Event.Type != kin.EventAgentRegistered && en.Event.Seq < a.cp.Size {
					e = en.Event
					break
				}
			}
			l := a.link(t, e, a.cp)
			l.Agent, l.Parent, l.Name, l.Responsible, l.Generation = 3, 1, "Report-Writer", "Dr. Schmidt", 1
			p.Links[1] = l
			return p, a.testLog
		}, "not " + kin.EventAgentRegistered},
		{"a tampered leaf", func() (kin.AncestryProof, *testLog) {
			p := a.proof(t, 7, 3, 1)
			p.Links[1].Proof.Leaf = strings.Replace(p.Links[1].Proof.Leaf, "Dr. Schmidt", "Dr. Schmidx", 1)
			return p, a.testLog
		}, "link 1"},
		{"another key", func() (kin.AncestryProof, *testLog) {
			return a.proof(t, 7, 3, 1), other
		}, "not signed by the log key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, who := tt.make()
			links, _, err := VerifyAncestry(p, who.v)
			if err == nil {
				t.Fatalf("VerifyAncestry = %+v, want an error", links)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestVerifyAncestryDataDisagreesWithLeaf(t *testing.T) {
	// A registration whose data names another parent than its leaf's
	// columns: the proof is valid, the registration is not.
	l := newTestLog(t, 23)
	root := l.add(t, registration(1, 0, 0, "Root", "r"))
	bad := registration(3, 1, 1, "W", "r")
	bad.Parent = 2
	bad = l.add(t, bad)
	cp := l.checkpoint(t)
	var links []kin.AncestryLink
	for _, e := range []kin.Event{bad, root} {
		p, err := Prove(context.Background(), l.src, e, cp)
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, kin.AncestryLink{Agent: e.Agent, Parent: e.Parent, Proof: p})
	}
	_, _, err := VerifyAncestry(kin.AncestryProof{Checkpoint: string(cp.Note), Links: links}, l.v)
	if err == nil || !strings.Contains(err.Error(), "in its data but") {
		t.Fatalf("VerifyAncestry: %v", err)
	}
}
