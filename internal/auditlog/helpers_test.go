package auditlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

// memSource is a stored log in memory: entries with their stored hashes
// and signed checkpoints. LogHashes serves hashes out of the entries'
// stored blobs, as a store does.
type memSource struct {
	entries []Entry
	cps     []StoredCheckpoint
}

func (m *memSource) LogEntries(ctx context.Context, fn func(Entry) error) error {
	for _, e := range m.entries {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (m *memSource) LogCheckpoints(ctx context.Context) ([]StoredCheckpoint, error) {
	return slices.Clone(m.cps), nil
}

func (m *memSource) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		leaf, off, ok := StoredAt(x)
		if !ok {
			first, count := ComputedFrom(x)
			if first+count > int64(len(m.entries)) {
				return nil, fmt.Errorf("memSource: hash %d needs leaves %d..%d, not stored", x, first, first+count-1)
			}
			var leaves []tlog.Hash
			for _, e := range m.entries[first : first+count] {
				leaves = append(leaves, LeafHash(e.Event))
			}
			h, err := SubtreeHash(leaves)
			if err != nil {
				return nil, err
			}
			out[i] = h
			continue
		}
		if leaf < 0 || leaf >= int64(len(m.entries)) {
			return nil, fmt.Errorf("memSource: hash %d belongs to leaf %d, not stored", x, leaf)
		}
		blob := m.entries[leaf].Hashes
		if off+tlog.HashSize > len(blob) {
			return nil, fmt.Errorf("memSource: hash %d is at byte %d of leaf %d, which has %d bytes", x, off, leaf, len(blob))
		}
		copy(out[i][:], blob[off:])
	}
	return out, nil
}

// clone deep-copies the source so that a mutation does not leak.
func (m *memSource) clone() *memSource {
	c := &memSource{entries: make([]Entry, len(m.entries)), cps: make([]StoredCheckpoint, len(m.cps))}
	for i, e := range m.entries {
		e.Event.Data = bytes.Clone(e.Event.Data)
		e.Hashes = bytes.Clone(e.Hashes)
		c.entries[i] = e
	}
	for i, cp := range m.cps {
		cp.Note = bytes.Clone(cp.Note)
		c.cps[i] = cp
	}
	return c
}

// rehash recomputes every stored hash from the entries' events, as a
// forger rewriting history consistently would.
func (m *memSource) rehash(t testing.TB) {
	t.Helper()
	var f Frontier
	for i := range m.entries {
		stored := f.Append(LeafHash(m.entries[i].Event))
		m.entries[i].Hashes = concatHashes(stored)
	}
}

func concatHashes(hs []tlog.Hash) []byte { return StoredForm(nil, hs) }

// testLog builds a log: events appended with a Frontier, their stored
// hashes, and checkpoints signed with a real log key.
type testLog struct {
	key   *Key
	v     note.Verifier
	src   *memSource
	f     Frontier
	roots []tlog.Hash // roots[n]: the root of the tree of n leaves
	rng   *rand.Rand
	t0    time.Time
}

func newTestLog(t testing.TB, seed uint64) *testLog {
	t.Helper()
	// t.TempDir's own directory is 0755, which LoadKey refuses; let it
	// create one.
	key, err := LoadKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(key.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	l := &testLog{key: key, v: v, src: &memSource{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		t0: time.Date(2026, 11, 21, 15, 2, 39, 0, time.UTC)}
	l.roots = []tlog.Hash{l.f.Root()}
	return l
}

var eventTypes = []string{kin.EventChildSpawned, kin.EventAgentStatus, kin.EventAgentStarted, kin.EventAgentExited, kin.EventAgentUsage, kin.EventToolDenied, kin.EventAgentMessage}

// randomEvent makes an event of a random type with random data.
func (l *testLog) randomEvent() kin.Event {
	r := l.rng
	agent := kin.AgentID(1 + r.IntN(20))
	parent := kin.AgentID(r.IntN(int(agent)))
	data, _ := json.Marshal(map[string]any{
		"agent":  agent,
		"parent": parent,
		"tokens": r.IntN(100000),
		"text":   fmt.Sprintf("note %d \"quoted\" \\ é", r.Uint32()),
	})
	return kin.Event{Type: eventTypes[r.IntN(len(eventTypes))], Agent: agent, Parent: parent, Data: data}
}

// add appends e as the next event (setting its seq and time) and returns it.
func (l *testLog) add(t testing.TB, e kin.Event) kin.Event {
	t.Helper()
	e.Seq = l.f.Size() + 1
	// Times with varied fractions: whole seconds, millis, nanos.
	e.Time = l.t0.Add(time.Duration(e.Seq) * time.Second)
	switch e.Seq % 3 {
	case 1:
		e.Time = e.Time.Add(time.Duration(e.Seq%1000) * time.Millisecond)
	case 2:
		e.Time = e.Time.Add(time.Duration(l.rng.IntN(1e9)))
	}
	stored := l.f.Append(LeafHash(e))
	l.src.entries = append(l.src.entries, Entry{Event: e, Hashes: concatHashes(stored)})
	l.roots = append(l.roots, l.f.Root())
	return e
}

// addRandom appends n random events.
func (l *testLog) addRandom(t testing.TB, n int) {
	t.Helper()
	for range n {
		l.add(t, l.randomEvent())
	}
}

// sign signs the checkpoint of the tree of size n (which must have been
// reached) without storing it.
func (l *testLog) sign(t testing.TB, n int64) StoredCheckpoint {
	t.Helper()
	msg, err := l.key.Sign(Checkpoint{Origin: l.key.Name(), Size: n, Root: l.roots[n]})
	if err != nil {
		t.Fatal(err)
	}
	return StoredCheckpoint{Size: n, Time: l.t0.Add(time.Duration(n) * time.Second), Note: msg}
}

// checkpoint signs and stores a checkpoint at the current size.
func (l *testLog) checkpoint(t testing.TB) StoredCheckpoint {
	t.Helper()
	cp := l.sign(t, l.f.Size())
	l.src.cps = append(l.src.cps, cp)
	return cp
}

// buildLog makes a log of n random events with checkpoints at the given
// sizes (increasing, each ≤ n).
func buildLog(t testing.TB, seed uint64, n int, cps ...int) *testLog {
	t.Helper()
	l := newTestLog(t, seed)
	for _, c := range cps {
		l.addRandom(t, c-int(l.f.Size()))
		l.checkpoint(t)
	}
	l.addRandom(t, n-int(l.f.Size()))
	return l
}

// lastCheckpointAtOrBelow is the size of the largest checkpoint ≤ i, or 0.
func lastCheckpointAtOrBelow(cps []StoredCheckpoint, i int64) int64 {
	var good int64
	for _, c := range cps {
		if c.Size <= i {
			good = c.Size
		}
	}
	return good
}
