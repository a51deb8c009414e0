package auditlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

// The log most tests mutate: 500 events, checkpoints at 100, 250, 400 and
// 480, and 20 events after the last.
var verifyCheckpoints = []int{100, 250, 400, 480}

func buildVerifyLog(t testing.TB) *testLog {
	return buildLog(t, 42, 500, verifyCheckpoints...)
}

func verify(t *testing.T, l *testLog, src *memSource, kept []byte) kin.LogReport {
	t.Helper()
	rep, err := Verify(context.Background(), src, VerifyOptions{Verifier: l.v, Kept: kept})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// wantBad checks that rep is a finding at leaf index i.
func wantBad(t *testing.T, rep kin.LogReport, i int64) {
	t.Helper()
	if rep.OK {
		t.Fatalf("report OK, want a finding at index %d", i)
	}
	if rep.Problem == "" {
		t.Fatalf("report without a problem")
	}
	if rep.BadIndex == nil || rep.BadSeq == nil {
		t.Fatalf("report names no index (%s), want %d", rep.Problem, i)
	}
	if *rep.BadIndex != i || *rep.BadSeq != i+1 {
		t.Fatalf("BadIndex %d BadSeq %d, want %d, %d (%s)", *rep.BadIndex, *rep.BadSeq, i, i+1, rep.Problem)
	}
}

// wantBadNoIndex checks that rep is a finding naming no leaf.
func wantBadNoIndex(t *testing.T, rep kin.LogReport, mention string) {
	t.Helper()
	if rep.OK {
		t.Fatalf("report OK, want a finding about %q", mention)
	}
	if rep.BadIndex != nil {
		t.Fatalf("BadIndex %d, want none (%s)", *rep.BadIndex, rep.Problem)
	}
	if !strings.Contains(rep.Problem, mention) {
		t.Fatalf("problem %q does not mention %q", rep.Problem, mention)
	}
}

func TestVerifyCleanLog(t *testing.T) {
	l := buildVerifyLog(t)
	rep := verify(t, l, l.src, nil)
	if !rep.OK || rep.Problem != "" || rep.BadIndex != nil {
		t.Fatalf("clean log: %+v", rep)
	}
	if rep.Events != 500 || rep.Checkpoints != len(verifyCheckpoints) {
		t.Fatalf("clean log: %d events, %d checkpoints, want 500, %d", rep.Events, rep.Checkpoints, len(verifyCheckpoints))
	}
	last := l.src.cps[len(l.src.cps)-1]
	if rep.Latest == nil || rep.Latest.Size != 480 || rep.Latest.Root != b64(l.roots[480]) || rep.Latest.Note != string(last.Note) || !rep.Latest.Time.Equal(last.Time) {
		t.Fatalf("clean log: latest %+v", rep.Latest)
	}
	if rep.Consistency != "" {
		t.Fatalf("Consistency %q without a kept checkpoint", rep.Consistency)
	}
}

func TestVerifyEmptyAndUncheckpointedLogs(t *testing.T) {
	l := newTestLog(t, 1)
	rep := verify(t, l, l.src, nil)
	if !rep.OK || rep.Events != 0 || rep.Checkpoints != 0 || rep.Latest != nil {
		t.Fatalf("empty log: %+v", rep)
	}
	// A checkpoint of the empty log, then events not yet signed.
	l.checkpoint(t)
	l.addRandom(t, 10)
	rep = verify(t, l, l.src, nil)
	if !rep.OK || rep.Events != 10 || rep.Checkpoints != 1 {
		t.Fatalf("log with an empty checkpoint: %+v", rep)
	}
}

func TestVerifyMutations(t *testing.T) {
	base := buildVerifyLog(t)
	rng := base.rng
	n := int64(len(base.src.entries))
	tests := []struct {
		name   string
		mutate func(s *memSource) int64 // returns the expected BadIndex
	}{
		{"edit one byte of data", func(s *memSource) int64 {
			i := rng.Int64N(n)
			d := s.entries[i].Event.Data
			k := 1 + rng.IntN(len(d)-2)
			d[k] ^= 0x01
			return i
		}},
		{"change type", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Event.Type += "x"
			return i
		}},
		{"change agent", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Event.Agent++
			return i
		}},
		{"change parent", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Event.Parent--
			return i
		}},
		{"change time by a nanosecond", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Event.Time = s.entries[i].Event.Time.Add(time.Nanosecond)
			return i
		}},
		{"delete an event", func(s *memSource) int64 {
			i := rng.Int64N(480)
			s.entries = append(s.entries[:i], s.entries[i+1:]...)
			return i
		}},
		{"delete the first event", func(s *memSource) int64 {
			s.entries = s.entries[1:]
			return 0
		}},
		{"duplicate an event", func(s *memSource) int64 {
			i := rng.Int64N(n - 1)
			s.entries = append(s.entries[:i+1], s.entries[i:]...)
			return i + 1
		}},
		{"swap two events' content", func(s *memSource) int64 {
			i, j := rng.Int64N(n), rng.Int64N(n)
			for i == j {
				j = rng.Int64N(n)
			}
			a, b := &s.entries[i].Event, &s.entries[j].Event
			a.Time, b.Time = b.Time, a.Time
			a.Type, b.Type = b.Type, a.Type
			a.Agent, b.Agent = b.Agent, a.Agent
			a.Parent, b.Parent = b.Parent, a.Parent
			a.Data, b.Data = b.Data, a.Data
			return min(i, j)
		}},
		{"swap two whole entries", func(s *memSource) int64 {
			i, j := int64(17), int64(300)
			s.entries[i], s.entries[j] = s.entries[j], s.entries[i]
			return i
		}},
		{"truncate below the last checkpoint", func(s *memSource) int64 {
			m := 400 + rng.Int64N(80)
			s.entries = s.entries[:m]
			return m
		}},
		{"truncate to nothing", func(s *memSource) int64 {
			s.entries = nil
			return 0
		}},
		{"edit the leaf hash", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Hashes[rng.IntN(FingerprintSize)] ^= 0x80
			return i
		}},
		{"edit a subtree hash", func(s *memSource) int64 {
			var i int64
			for i = rng.Int64N(n); len(s.entries[i].Hashes) <= FingerprintSize; i = rng.Int64N(n) {
			}
			h := s.entries[i].Hashes
			h[FingerprintSize+rng.IntN(len(h)-FingerprintSize)] ^= 0x01
			return i
		}},
		{"drop a subtree hash", func(s *memSource) int64 {
			i := int64(255) // completes subtrees up to level 8
			s.entries[i].Hashes = s.entries[i].Hashes[:len(s.entries[i].Hashes)-tlog.HashSize]
			return i
		}},
		{"add a hash", func(s *memSource) int64 {
			i := int64(10)
			s.entries[i].Hashes = append(s.entries[i].Hashes, make([]byte, tlog.HashSize)...)
			return i
		}},
		{"hashes nil", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Hashes = nil
			return i
		}},
		{"hashes short", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Hashes = s.entries[i].Hashes[:FingerprintSize-1]
			return i
		}},
		{"damaged", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Damaged = "time column is not a time"
			return i
		}},
		{"wrong seq", func(s *memSource) int64 {
			i := rng.Int64N(n)
			s.entries[i].Event.Seq += 1000
			return i
		}},
	}
	for _, tt := range tests {
		for round := range 3 {
			t.Run(fmt.Sprintf("%s/%d", tt.name, round), func(t *testing.T) {
				src := base.src.clone()
				want := tt.mutate(src)
				rep := verify(t, base, src, nil)
				wantBad(t, rep, want)
			})
		}
	}
	// The base log was not touched by any mutation.
	if rep := verify(t, base, base.src, nil); !rep.OK {
		t.Fatalf("base log after mutations: %+v", rep)
	}
}

func TestVerifyRewrittenHistory(t *testing.T) {
	base := buildVerifyLog(t)
	for _, i := range []int64{0, 50, 99, 100, 101, 249, 250, 300, 399, 400, 479} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			src := base.src.clone()
			src.entries[i].Event.Data = []byte(`{"forged":true}`)
			src.rehash(t)
			rep := verify(t, base, src, nil)
			// Every stored hash agrees with the forged events: only a
			// checkpoint signed after i can tell, and the report names
			// the last checkpoint that still matched.
			wantBad(t, rep, lastCheckpointAtOrBelow(base.src.cps, i))
			if !strings.Contains(rep.Problem, "does not match") {
				t.Fatalf("problem %q", rep.Problem)
			}
		})
	}
	// Rewritten after the last checkpoint: nothing signed tells.
	src := base.src.clone()
	src.entries[490].Event.Data = []byte(`{"forged":true}`)
	src.rehash(t)
	if rep := verify(t, base, src, nil); !rep.OK {
		t.Fatalf("history rewritten after the last checkpoint: %+v", rep)
	}
}

func TestVerifyBadStoredCheckpoint(t *testing.T) {
	base := buildVerifyLog(t)
	t.Run("altered note", func(t *testing.T) {
		src := base.src.clone()
		src.cps[1].Note = []byte(strings.Replace(string(src.cps[1].Note), "\n250\n", "\n251\n", 1))
		wantBadNoIndex(t, verify(t, base, src, nil), "checkpoint of size 250")
	})
	t.Run("signed by another key", func(t *testing.T) {
		other := newTestLog(t, 9)
		other.addRandom(t, 100)
		src := base.src.clone()
		src.cps[0] = other.sign(t, 100)
		rep := verify(t, base, src, nil)
		wantBadNoIndex(t, rep, "checkpoint")
		if !strings.Contains(rep.Problem, "not signed by the log key") {
			t.Fatalf("problem %q", rep.Problem)
		}
	})
	t.Run("stored size differs from signed", func(t *testing.T) {
		src := base.src.clone()
		src.cps[2].Size = 401
		wantBadNoIndex(t, verify(t, base, src, nil), "checkpoint")
	})
	t.Run("garbage note", func(t *testing.T) {
		src := base.src.clone()
		src.cps[3].Note = []byte("garbage")
		wantBadNoIndex(t, verify(t, base, src, nil), "checkpoint")
	})
	t.Run("signed with a wrong root", func(t *testing.T) {
		src := base.src.clone()
		msg, err := base.key.Sign(Checkpoint{Origin: base.key.Name(), Size: 250, Root: base.roots[249]})
		if err != nil {
			t.Fatal(err)
		}
		src.cps[1].Note = msg
		// The checkpoint at 100 matched; the one at 250 does not.
		wantBad(t, verify(t, base, src, nil), 100)
	})
}

func TestVerifyKeptCheckpoint(t *testing.T) {
	base := buildVerifyLog(t)
	for _, size := range []int64{0, 1, 37, 100, 150, 250, 399, 480} {
		t.Run(fmt.Sprintf("earlier size %d", size), func(t *testing.T) {
			kept := base.sign(t, size)
			rep := verify(t, base, base.src, kept.Note)
			if !rep.OK {
				t.Fatalf("kept checkpoint of size %d: %+v", size, rep)
			}
			if rep.Consistency == "" {
				t.Fatal("no Consistency text")
			}
			if size > 0 && !strings.Contains(rep.Consistency, fmt.Sprintf("the latest checkpoint (size %d)", 480)) {
				t.Fatalf("Consistency %q does not name the latest stored checkpoint (480)", rep.Consistency)
			}
			if rep.Checkpoints != len(verifyCheckpoints)+1 || rep.Latest == nil || rep.Latest.Size != 480 {
				t.Fatalf("checkpoints %d latest %+v", rep.Checkpoints, rep.Latest)
			}
		})
	}
	t.Run("proven against the latest", func(t *testing.T) {
		// With 3 (or 5, 6, 7) stored checkpoints the kept one is appended
		// in place and sorted among them; the consistency proof must
		// still go to the latest stored checkpoint.
		for _, stored := range [][]int{{100, 200, 300}, {50, 100, 150, 200, 250}, {10, 20, 30, 40, 50, 60, 300}} {
			l := buildLog(t, 7, 310, stored...)
			latest := stored[len(stored)-1]
			kept := l.sign(t, 45)
			rep := verify(t, l, l.src, kept.Note)
			if !rep.OK {
				t.Fatalf("stored %v, kept 45: %+v", stored, rep)
			}
			want := fmt.Sprintf("your checkpoint (size 45) matches the recomputed tree, and a consistency proof of %d hashes shows the latest checkpoint (size %d) extends it", consistencyProofLen(t, l, latest, 45), latest)
			if rep.Consistency != want {
				t.Fatalf("stored %v, kept 45:\nConsistency %q\nwant        %q", stored, rep.Consistency, want)
			}
		}
	})
	t.Run("from another log key", func(t *testing.T) {
		other := newTestLog(t, 8)
		other.addRandom(t, 100)
		kept := other.sign(t, 100)
		wantBadNoIndex(t, verify(t, base, base.src, kept.Note), "your checkpoint")
	})
	t.Run("larger than the latest stored", func(t *testing.T) {
		// Signed by the log key over the real tree of 490 events, but kin
		// keeps no checkpoint that large: one was deleted.
		kept := base.sign(t, 490)
		rep := verify(t, base, base.src, kept.Note)
		wantBadNoIndex(t, rep, "newer than every checkpoint")
	})
	t.Run("larger than the log", func(t *testing.T) {
		l := buildLog(t, 3, 60, 20, 40)
		kept := l.sign(t, 60)
		src := l.src.clone()
		src.entries = src.entries[:50]
		wantBad(t, verify(t, l, src, kept.Note), 50)
	})
	t.Run("does not match the log", func(t *testing.T) {
		// The log was rewritten consistently after the kept checkpoint was
		// taken, and so were its stored checkpoints (the key was stolen):
		// the kept one still tells.
		l := buildLog(t, 4, 300, 100, 200, 300)
		kept := l.sign(t, 150)
		src := l.src.clone()
		src.entries[120].Event.Type = "forged"
		src.rehash(t)
		var f Frontier
		for _, e := range src.entries {
			f.Append(LeafHash(e.Event))
			if f.Size() == 100 || f.Size() == 200 || f.Size() == 300 {
				msg, err := l.key.Sign(Checkpoint{Origin: l.key.Name(), Size: f.Size(), Root: f.Root()})
				if err != nil {
					t.Fatal(err)
				}
				src.cps[f.Size()/100-1].Note = msg
			}
		}
		if rep := verify(t, l, src, nil); !rep.OK {
			t.Fatalf("the consistent forgery is not caught without the kept checkpoint, yet: %+v", rep)
		}
		rep := verify(t, l, src, kept.Note)
		wantBad(t, rep, 100)
		if !strings.Contains(rep.Problem, "your checkpoint") {
			t.Fatalf("problem %q", rep.Problem)
		}
	})
}

// errSource fails at reading.
type errSource struct {
	memSource
	entriesErr, cpsErr error
}

func (s *errSource) LogEntries(ctx context.Context, fn func(Entry) error) error {
	if s.entriesErr != nil {
		return s.entriesErr
	}
	return s.memSource.LogEntries(ctx, fn)
}

func (s *errSource) LogCheckpoints(ctx context.Context) ([]StoredCheckpoint, error) {
	if s.cpsErr != nil {
		return nil, s.cpsErr
	}
	return s.memSource.LogCheckpoints(ctx)
}

func TestVerifyReadErrors(t *testing.T) {
	l := buildLog(t, 5, 30, 10)
	boom := errors.New("disk on fire")
	for _, s := range []*errSource{{memSource: *l.src, entriesErr: boom}, {memSource: *l.src, cpsErr: boom}} {
		if rep, err := Verify(context.Background(), s, VerifyOptions{Verifier: l.v}); !errors.Is(err, boom) {
			t.Fatalf("Verify of an unreadable source = %+v, %v, want the read error", rep, err)
		}
	}
}

func TestHashReaderServesStoredHashes(t *testing.T) {
	l := buildLog(t, 6, 77)
	r := HashReader(context.Background(), l.src)
	for _, size := range []int64{1, 2, 31, 64, 77} {
		root, err := tlog.TreeHash(size, r)
		if err != nil || root != l.roots[size] {
			t.Fatalf("TreeHash(%d) through HashReader = %v, %v, want %v", size, root, err, l.roots[size])
		}
	}
	// The in-memory source is a faithful store: it matches the
	// reference layout of tlog.
	if _, err := LoadFrontier(77, r); err != nil {
		t.Fatal(err)
	}
}

func consistencyProofLen(t *testing.T, l *testLog, to, from int) int {
	t.Helper()
	p, err := tlog.ProveTree(int64(to), int64(from), HashReader(context.Background(), l.src))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) == 0 {
		t.Fatalf("empty proof from %d to %d", from, to)
	}
	return len(p)
}
