package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// statusEvent is the benchmarks' i-th event.
func statusEvent(i int) kin.Event { return storetest.StatusEvent(i) }

// BenchmarkEventAppend appends 1,000 events per Update (one transaction,
// synchronous=FULL), with and without the log's tree hashes.
func BenchmarkEventAppend(b *testing.B) {
	storetest.BenchEventAppend(b, func(b *testing.B, unhashed bool) store.Store {
		s, err := Open(context.Background(), filepath.Join(b.TempDir(), "kin.db"), Options{unhashed: unhashed})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// verify1M is the database of BenchmarkLogVerify1M, built once.
var verify1M struct {
	once sync.Once
	dir  string
	path string
	v    note.Verifier
	err  error
}

const events1M = 1_000_000

func build1M() error {
	dir, err := os.MkdirTemp("", "kin-verify1m-")
	if err != nil {
		return err
	}
	verify1M.dir, verify1M.path = dir, filepath.Join(dir, "kin.db")
	key, err := auditlog.LoadKey(filepath.Join(dir, "key"))
	if err != nil {
		return err
	}
	if verify1M.v, err = auditlog.NewVerifier(key.VerifierKey()); err != nil {
		return err
	}
	ctx := context.Background()
	s, err := Open(ctx, verify1M.path, Options{Synchronous: "NORMAL"})
	if err != nil {
		return err
	}
	defer s.Close()
	const perTx = 10_000
	for i := 0; i < events1M; i += perTx {
		err := s.Update(ctx, func(tx store.Tx) error {
			for j := i; j < i+perTx; j++ {
				if _, err := tx.EventAppend(ctx, statusEvent(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	size, root, err := s.LogHead(ctx)
	if err != nil {
		return err
	}
	msg, err := key.Sign(auditlog.Checkpoint{Origin: key.Name(), Size: size, Root: root})
	if err != nil {
		return err
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.LogCheckpointInsert(ctx, auditlog.StoredCheckpoint{Size: size, Time: time.Now(), Note: msg})
	}); err != nil {
		return err
	}
	return s.Close()
}

// BenchmarkLogVerify1M verifies a log of a million events (`kin log verify
// --db`), and measures the two floors it is made of: reading the events
// (scan-only) and recomputing the tree in memory (hash-only).
func BenchmarkLogVerify1M(b *testing.B) {
	verify1M.once.Do(func() { verify1M.err = build1M() })
	if verify1M.err != nil {
		b.Fatal(verify1M.err)
	}
	ctx := context.Background()
	report := func(b *testing.B) {
		sec := b.Elapsed().Seconds() / float64(b.N)
		b.ReportMetric(sec, "s/verify")
		b.ReportMetric(events1M/sec, "events/s")
	}
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			ro, err := OpenReadOnly(ctx, verify1M.path)
			if err != nil {
				b.Fatal(err)
			}
			rep, err := auditlog.Verify(ctx, ro, auditlog.VerifyOptions{Verifier: verify1M.v})
			ro.Close()
			if err != nil {
				b.Fatal(err)
			}
			if !rep.OK || rep.Events != events1M || rep.Checkpoints != 1 {
				b.Fatalf("Verify: ok=%v events=%d checkpoints=%d: %s", rep.OK, rep.Events, rep.Checkpoints, rep.Problem)
			}
		}
		report(b)
	})
	b.Run("scan-only", func(b *testing.B) {
		for b.Loop() {
			ro, err := OpenReadOnly(ctx, verify1M.path)
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			err = ro.LogEntries(ctx, func(auditlog.Entry) error { n++; return nil })
			ro.Close()
			if err != nil {
				b.Fatal(err)
			}
			if n != events1M {
				b.Fatalf("%d events", n)
			}
		}
		report(b)
	})
	b.Run("hash-only", func(b *testing.B) {
		const templates = 1000
		events := make([]kin.Event, templates)
		for i := range events {
			events[i] = statusEvent(i)
		}
		var leaf []byte
		for b.Loop() {
			var f auditlog.Frontier
			for i := range events1M {
				e := events[i%templates]
				e.Seq = int64(i + 1)
				leaf = auditlog.AppendLeaf(leaf[:0], e)
				f.Append(tlog.RecordHash(leaf))
			}
			if f.Size() != events1M {
				b.Fatal(f.Size())
			}
		}
		report(b)
	})
}

// BenchmarkEventInsertRows appends a cascade's record of events (2,220,
// with their tree hashes) in one Update, inserted as appended, one INSERT
// each (each-append, the store before issue 22's batching), or held to
// the batch's end and inserted rows=N a statement (then N/8, ..., 1; N=1
// is one prepared statement stepped in a loop). cpu-ms/op is the
// process's CPU per Update with its durable commit.
func BenchmarkEventInsertRows(b *testing.B) {
	const perTx = 2220
	events := make([]kin.Event, perTx)
	for i := range events {
		events[i] = statusEvent(i)
	}
	for _, bc := range []struct {
		name string
		rows int
	}{{"each-append", -1}, {"rows=1", 1}, {"rows=16", 16}, {"rows=64", 64}, {"rows=256", 256}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "kin.db"), Options{eventRows: bc.rows})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			cpu0 := proctest.CPU()
			for b.Loop() {
				if err := storetest.AppendInOneUpdate(ctx, s, events); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}
