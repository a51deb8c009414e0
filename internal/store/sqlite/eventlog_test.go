package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlstore"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// The log's contract (appends, proofs, verification, reopening, several
// handles) is storetest's; these are SQLite's own: group commit, the
// migration that hashes older databases, damage found in the file, the
// read-only open.

var (
	appendEvents = storetest.AppendEvents
	logHead      = storetest.LogHead
	checkHead    = storetest.CheckHead
	verify       = storetest.Verify
	wantOK       = storetest.WantOK
	testKey      = storetest.LogKey
)

func openLog(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openReadOnly(t testing.TB, path string) *sqlstore.ReadOnly {
	t.Helper()
	r, err := OpenReadOnly(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// checkpoint signs the store's current head and keeps it; it returns the
// signed note.
func checkpoint(t testing.TB, s store.Store, key *auditlog.Key) []byte {
	t.Helper()
	return storetest.Checkpoint(t, s, key).Note
}

// TestEventLogGroupCommit holds the writer inside an Update until 60 more
// are queued, so that the writer commits them in one transaction, failing
// and panicking ones among them: each undoes only its own events and its
// part of the tree, and the batch's events are gapless and verify.
func TestEventLogGroupCommit(t *testing.T) {
	ctx := context.Background()
	s := openLog(t, filepath.Join(t.TempDir(), "kin.db"))
	_, v := testKey(t)
	if _, err := appendEvents(t, s, 0, 5, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		committed []kin.Event
		next      atomic.Int64 // the next LogEvent index: failed Updates use theirs up
	)
	next.Store(5)
	update := func(n int, fail error, panics bool, hold func()) error {
		from := int(next.Add(int64(n))) - n
		var got []kin.Event
		err := s.Update(ctx, func(tx store.Tx) error {
			got = got[:0]
			for i := from; i < from+n; i++ {
				e, err := tx.EventAppend(ctx, storetest.LogEvent(t, i))
				if err != nil {
					return err
				}
				got = append(got, e)
			}
			if hold != nil {
				hold()
			}
			if panics {
				panic("this update panics after appending")
			}
			return fail
		})
		if err == nil {
			mu.Lock()
			committed = append(committed, got...)
			mu.Unlock()
		}
		return err
	}
	release := make(chan struct{})
	blocking := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- update(2, nil, false, func() {
			close(blocking)
			<-release
		})
	}()
	const queued = 60
	var wg sync.WaitGroup
	errs := make([]error, queued)
	<-blocking
	for g := range queued {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case g%7 == 3:
				errs[g] = update(1+g%4, nil, true, nil)
			case g%3 == 1:
				errs[g] = update(1+g%5, storetest.ErrBoom, false, nil)
			default:
				errs[g] = update(1+g%5, nil, false, nil)
			}
		}()
	}
	for s.Queued() < queued {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for g, err := range errs {
		switch {
		case g%7 == 3:
			if err == nil || !strings.Contains(err.Error(), "panicked") {
				t.Errorf("queued update %d panicked but returned %v", g, err)
			}
		case g%3 == 1:
			if !errors.Is(err, storetest.ErrBoom) {
				t.Errorf("queued update %d: %v, want %v", g, err, storetest.ErrBoom)
			}
		default:
			if err != nil {
				t.Errorf("queued update %d: %v", g, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	storetest.SortBySeq(committed)
	if committed[0].Seq != 6 {
		t.Fatalf("the batch's first event has seq %d, want 6", committed[0].Seq)
	}
	var all []kin.Event
	err := s.LogEntries(ctx, func(en auditlog.Entry) error {
		all = append(all, en.Event)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5+len(committed) {
		t.Fatalf("%d events stored, want the 5 before and the %d committed", len(all), len(committed))
	}
	checkHead(t, s, all)
	wantOK(t, verify(t, s, v, nil), int64(len(all)), 0)
}

func TestEventLogBackfillsOldDatabases(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	_, v := testKey(t)
	s := openLog(t, path)
	// More than one of the backfill's pages of 10,000 events.
	var all []kin.Event
	for i := 0; i < 10500; i += 3500 {
		got, err := appendEvents(t, s, i, i+3500, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	size, root := logHead(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Make it a database from before the log.
	rawExec(t, path, append(UndoHosts,
		`ALTER TABLE events DROP COLUMN hashes`,
		`DROP TABLE log_checkpoints`,
		`ALTER TABLE agent_spend DROP COLUMN sub_tokens`,
		`ALTER TABLE agent_spend DROP COLUMN sub_cost`,
		`ALTER TABLE agent_spend DROP COLUMN spawns`,
		`DELETE FROM schema_migrations WHERE version >= 7`)...)
	db := rawOpen(t, path)
	var cols int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('events') WHERE name = 'hashes'`).Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("hashes column still there (%d, %v)", cols, err)
	}
	db.Close()
	if _, err := OpenReadOnly(ctx, path); err == nil || !strings.Contains(err.Error(), "predates the event log") {
		t.Fatalf("OpenReadOnly of a database from before the log: %v", err)
	}

	s = openLog(t, path)
	if size2, root2 := logHead(t, s); size2 != size || root2 != root {
		t.Fatalf("after the backfill LogHead = %d %s, before %d %s", size2, root2, size, root)
	}
	wantOK(t, verify(t, s, v, nil), size, 0)
	got, err := appendEvents(t, s, 10500, 10510, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq != size+1 {
		t.Fatalf("after the backfill the next event has seq %d, want %d", got[0].Seq, size+1)
	}
	checkHead(t, s, append(all, got...))
	wantOK(t, verify(t, s, v, nil), size+10, 0)
}

// rawOpen opens a kin database with database/sql alone, as an attacker or
// an old kin would.
func rawOpen(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

func rawExec(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db := rawOpen(t, path)
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyDB copies a closed database (its file and any -wal and -shm) into dir.
func copyDB(t testing.TB, path, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(path))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		in, err := os.Open(path + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst+suffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			in.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// valueLetters are the offsets of the ASCII letters inside the string
// values (not the member names) of a JSON text, outside escapes.
func valueLetters(data []byte) []int {
	var out []int
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			continue
		}
		var letters []int
		j := i + 1
		for ; j < len(data) && data[j] != '"'; j++ {
			switch c := data[j]; {
			case c == '\\':
				if j+1 < len(data) && data[j+1] == 'u' {
					j += 4
				}
				j++
			case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
				letters = append(letters, j)
			}
		}
		k := j + 1
		for k < len(data) && data[k] == ' ' {
			k++
		}
		if k >= len(data) || data[k] != ':' {
			out = append(out, letters...)
		}
		i = j
	}
	return out
}

func TestValueLetters(t *testing.T) {
	data := `{"ab":"x\ny\u00e9Z","n":1,"l":["q"],"m":{"k":"w"}}`
	var got []byte
	for _, at := range valueLetters([]byte(data)) {
		got = append(got, data[at])
	}
	// Not the member names' letters, nor the escapes' (n, u, e).
	if string(got) != "xyZqw" {
		t.Fatalf("valueLetters finds %q, want %q", got, "xyZqw")
	}
}

// mutation is one change made to a copy of the log's database, and the
// first leaf index it must be found at.
type mutation struct {
	kind  string
	what  string
	index int64
}

func TestEventLogMutationsAreFoundAtTheFirstBadIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "kin.db")
	key, v := testKey(t)
	s := openLog(t, path)
	const n = 400
	rng := rand.New(rand.NewPCG(2026, 11))
	var checkpoints []int64
	for i := 0; i < n; {
		k := min(1+rng.IntN(12), n-i)
		if _, err := appendEvents(t, s, i, i+k, nil); err != nil {
			t.Fatal(err)
		}
		i += k
		if len(checkpoints) < 4 && i >= 60*(len(checkpoints)+1) {
			checkpoint(t, s, key)
			checkpoints = append(checkpoints, int64(i))
		}
	}
	checkpoint(t, s, key)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	nCheckpoints := len(checkpoints) + 1

	// Unchanged, a copy verifies.
	wantOK(t, verify(t, openReadOnly(t, copyDB(t, path, t.TempDir())), v, nil), n, nCheckpoints)

	kinds := []string{"data", "delete", "swap", "truncate", "hash"}
	const rounds = 15 // of each kind
	seen := map[string]int{}
	for r := range rounds * len(kinds) {
		kind := kinds[r%len(kinds)]
		seen[kind]++
		cp := copyDB(t, path, t.TempDir())
		db := rawOpen(t, cp)
		m := mutate(t, db, rng, kind, n, seen[kind])
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		ro, err := OpenReadOnly(ctx, cp)
		if err != nil {
			t.Fatalf("%s: OpenReadOnly: %v", m.what, err)
		}
		rep := verify(t, ro, v, nil)
		ro.Close()
		t.Logf("%s: %s", m.what, rep.Problem)
		switch {
		case rep.OK:
			t.Errorf("%s: Verify passed", m.what)
		case rep.BadIndex == nil:
			t.Errorf("%s: Verify names no bad index (%s), want %d", m.what, rep.Problem, m.index)
		case *rep.BadIndex != m.index:
			t.Errorf("%s: Verify names bad index %d (%s), want %d", m.what, *rep.BadIndex, rep.Problem, m.index)
		case rep.BadSeq == nil || *rep.BadSeq != m.index+1:
			t.Errorf("%s: bad seq %v, want %d", m.what, rep.BadSeq, m.index+1)
		}
	}
}

// mutate makes one change of the kind named to a database of n events;
// round counts the changes of that kind, from 1.
func mutate(t *testing.T, db *sql.DB, rng *rand.Rand, kind string, n int64, round int) mutation {
	t.Helper()
	exec := func(q string, args ...any) {
		t.Helper()
		res, err := db.Exec(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if rows, err := res.RowsAffected(); err != nil || rows == 0 {
			t.Fatalf("%s changed nothing (%v)", q, err)
		}
	}
	seq := 1 + rng.Int64N(n)
	switch kind {
	case "data":
		var data string
		if err := db.QueryRow(`SELECT data FROM events WHERE seq = ?`, seq).Scan(&data); err != nil {
			t.Fatal(err)
		}
		letters := valueLetters([]byte(data))
		if len(letters) == 0 {
			t.Fatalf("seq %d: no letter in a string value of %s", seq, data)
		}
		at := letters[rng.IntN(len(letters))]
		b := []byte(data)
		b[at] ^= 0x20 // a <-> A
		exec(`UPDATE events SET data = ? WHERE seq = ?`, string(b), seq)
		return mutation{kind, fmt.Sprintf("byte %d of the data of seq %d changed to %q", at, seq, b[at]), seq - 1}
	case "delete":
		if round == 1 {
			seq = n // the last event: only the checkpoint covers it
		}
		exec(`DELETE FROM events WHERE seq = ?`, seq)
		return mutation{kind, fmt.Sprintf("seq %d deleted", seq), seq - 1}
	case "swap":
		a, b := seq, 1+rng.Int64N(n)
		for a == b {
			b = 1 + rng.Int64N(n)
		}
		a, b = min(a, b), max(a, b)
		exec(`UPDATE events SET (type, time, agent_id, parent_id, data) =
			(SELECT o.type, o.time, o.agent_id, o.parent_id, o.data FROM events o WHERE o.seq = (? + ?) - events.seq)
			WHERE seq IN (?, ?)`, a, b, a, b)
		return mutation{kind, fmt.Sprintf("the contents of seq %d and %d swapped", a, b), a - 1}
	case "truncate":
		k := rng.Int64N(n)
		switch round {
		case 1:
			k = 0
		case 2:
			k = n - 1
		}
		exec(`DELETE FROM events WHERE seq > ?`, k)
		return mutation{kind, fmt.Sprintf("the events after seq %d deleted", k), k}
	case "hash":
		later := round%2 == 0
		if later {
			// Leaves 15, 31, 47, ... complete a subtree of 16 or more:
			// their stored form holds full hashes after the fingerprint.
			seq = (seq/16)*16 + 16
			if seq > n {
				seq = 16
			}
		}
		var blob []byte
		if err := db.QueryRow(`SELECT hashes FROM events WHERE seq = ?`, seq).Scan(&blob); err != nil {
			t.Fatal(err)
		}
		if (len(blob)-auditlog.FingerprintSize)%tlog.HashSize != 0 || len(blob) < auditlog.FingerprintSize || later && len(blob) <= auditlog.FingerprintSize {
			t.Fatalf("seq %d stores %d bytes of hashes", seq, len(blob))
		}
		at := rng.IntN(auditlog.FingerprintSize)
		if later {
			at = auditlog.FingerprintSize + rng.IntN(len(blob)-auditlog.FingerprintSize)
		}
		blob[at] ^= byte(1 + rng.IntN(255))
		exec(`UPDATE events SET hashes = ? WHERE seq = ?`, blob, seq)
		return mutation{kind, fmt.Sprintf("byte %d of the %d bytes of hashes of seq %d changed", at, len(blob), seq), seq - 1}
	}
	t.Fatalf("no mutation %q", kind)
	return mutation{}
}

func TestOpenRefusesALogItCannotContinue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	_, v := testKey(t)
	s := openLog(t, path)
	if _, err := appendEvents(t, s, 0, 37, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The tree of 37 leaves is 32 + 4 + 1: the hash of leaves 0-31 is kept
	// with seq 32 (the smaller ones are recomputed from their events).
	rawExec(t, path, `UPDATE events SET hashes = NULL WHERE seq = 32`)

	s2, err := Open(ctx, path, Options{})
	if err == nil {
		s2.Close()
		t.Fatal("Open continued a log whose edge it cannot read")
	}
	if !strings.Contains(err.Error(), "kin log verify") {
		t.Fatalf("Open: %v; want it to point at `kin log verify`", err)
	}
	rep := verify(t, openReadOnly(t, path), v, nil)
	if rep.OK || rep.BadIndex == nil || *rep.BadIndex != 31 {
		t.Fatalf("Verify: ok=%v bad index %v (%s), want bad index 31", rep.OK, rep.BadIndex, rep.Problem)
	}
}

func TestOpenReadOnlyTakesAnyPath(t *testing.T) {
	ctx := context.Background()
	_, v := testKey(t)
	for _, name := range []string{"a b", "a#b", "a?b", "a%41b", "a&mode=rwc"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name, "kin.db")
		s := openLog(t, path)
		if _, err := appendEvents(t, s, 0, 5, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		ro, err := OpenReadOnly(ctx, path)
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		wantOK(t, verify(t, ro, v, nil), 5, 0)
		if _, err := ro.DB().ExecContext(ctx, `DELETE FROM events`); err == nil {
			t.Errorf("%q: a read-only database took a write", name)
		}
		ro.Close()
		after, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("%q: OpenReadOnly created a file next to the database's directory: %v", name, after)
		}
	}
}

// UndoHosts takes a database back to before migration 9 (the fleet's
// hosts), for tests that make an older database.
var UndoHosts = []string{
	`ALTER TABLE agents DROP COLUMN requested_by`,
	`DELETE FROM schema_migrations WHERE version >= 12`,
	`DROP TABLE signing_keys`,
	`DELETE FROM schema_migrations WHERE version >= 11`,
	`DROP TABLE leases`,
	`DELETE FROM schema_migrations WHERE version >= 10`,
	`DROP INDEX agents_host`,
	`ALTER TABLE agents DROP COLUMN host`,
	`DROP TABLE hosts`,
	`DELETE FROM schema_migrations WHERE version >= 9`,
}
