package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

var errBoom = errors.New("boom: this update fails after appending")

// logTime is the time of the test events' first event.
var logTime = time.Date(2026, 11, 21, 15, 2, 39, 123456789, time.UTC)

// logWords are the strings the test events' data is made of.
var logWords = []string{"active", "suspended", "terminated", "operator", "budget", "reviewed", "quota", "restart", "Ünïcode", "quote\"d", "tab\there", "line\nbreak", "<html>"}

// logEvent is the i-th test event (i from 0): its type, agents and data
// depend only on i, and no two events have the same data.
func logEvent(t testing.TB, i int) kin.Event {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(i)))
	types := []string{kin.EventAgentRegistered, kin.EventChildSpawned, kin.EventAgentStatus, kin.EventAgentUsage, kin.EventAgentMessage, kin.EventToolDenied}
	typ := types[rng.IntN(len(types))]
	agent := kin.AgentID(1 + rng.IntN(200))
	parent := kin.AgentID(rng.IntN(int(agent)))
	word := func() string { return logWords[rng.IntN(len(logWords))] }
	data := map[string]any{"n": i, "agent": agent, "reason": word() + " " + word()}
	switch typ {
	case kin.EventAgentStatus:
		data["from"], data["to"], data["by"] = word(), word(), "operator@host"
	case kin.EventAgentUsage:
		data["tokens"], data["cost"] = rng.IntN(100000), float64(rng.IntN(10000))/100
	case kin.EventAgentMessage:
		data["text"] = strings.Repeat(word()+" ", 1+rng.IntN(20))
		data["meta"] = map[string]any{"session": fmt.Sprintf("s%d", rng.IntN(9)), "tags": []string{word(), word()}}
	default:
		data["parent"], data["generation"] = parent, rng.IntN(5)
	}
	e, err := kin.NewEvent(typ, agent, parent, data)
	if err != nil {
		t.Fatal(err)
	}
	e.Time = logTime.Add(time.Duration(i)*time.Millisecond + time.Duration(rng.IntN(1000)))
	if i%17 == 0 {
		e.Time = logTime.Add(time.Duration(i) * time.Second) // a whole second: no fraction digits
	}
	return e
}

func openLog(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openReadOnly(t testing.TB, path string) *ReadOnly {
	t.Helper()
	r, err := OpenReadOnly(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// testKey is a fresh log key and its verifier.
func testKey(t testing.TB) (*auditlog.Key, note.Verifier) {
	t.Helper()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "key")) // LoadKey wants a 0700 directory
	if err != nil {
		t.Fatal(err)
	}
	v, err := auditlog.NewVerifier(key.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	return key, v
}

// appendEvents appends events from..to-1 (logEvent) in one Update, which
// then returns fail; it returns the events as appended.
func appendEvents(t testing.TB, s *Store, from, to int, fail error) ([]kin.Event, error) {
	t.Helper()
	ctx := context.Background()
	var got []kin.Event
	err := s.Update(ctx, func(tx store.Tx) error {
		got = got[:0]
		for i := from; i < to; i++ {
			e, err := tx.EventAppend(ctx, logEvent(t, i))
			if err != nil {
				return err
			}
			got = append(got, e)
		}
		return fail
	})
	return got, err
}

// checkpoint signs the store's current head and keeps it; it returns the
// signed note.
func checkpoint(t testing.TB, s *Store, key *auditlog.Key) []byte {
	t.Helper()
	ctx := context.Background()
	size, root := logHead(t, s)
	msg, err := key.Sign(auditlog.Checkpoint{Origin: key.Name(), Size: size, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.LogCheckpointInsert(ctx, auditlog.StoredCheckpoint{Size: size, Time: logTime.Add(time.Duration(size) * time.Second), Note: msg})
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// logHead is s.LogHead, failing the test on an error.
func logHead(t testing.TB, s *Store) (int64, tlog.Hash) {
	t.Helper()
	size, root, err := s.LogHead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return size, root
}

// frontierOf is the tree of events, which must be seqs 1, 2, 3, ...
func frontierOf(t testing.TB, events []kin.Event) auditlog.Frontier {
	t.Helper()
	var f auditlog.Frontier
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		f.Append(auditlog.LeafHash(e))
	}
	return f
}

func checkHead(t testing.TB, s *Store, events []kin.Event) {
	t.Helper()
	f := frontierOf(t, events)
	size, root := logHead(t, s)
	if size != f.Size() || root != f.Root() {
		t.Fatalf("LogHead = %d %s, recomputed from the events %d %s", size, root, f.Size(), f.Root())
	}
}

func verify(t testing.TB, src auditlog.Source, v note.Verifier, kept []byte) kin.LogReport {
	t.Helper()
	rep, err := auditlog.Verify(context.Background(), src, auditlog.VerifyOptions{Verifier: v, Kept: kept})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func wantOK(t testing.TB, rep kin.LogReport, events int64, checkpoints int) {
	t.Helper()
	if !rep.OK || rep.Events != events || rep.Checkpoints != checkpoints {
		bad := "none"
		if rep.BadIndex != nil {
			bad = fmt.Sprint(*rep.BadIndex)
		}
		t.Fatalf("Verify: ok=%v events=%d checkpoints=%d bad index %s (%s); want ok with %d events, %d checkpoints",
			rep.OK, rep.Events, rep.Checkpoints, bad, rep.Problem, events, checkpoints)
	}
}

func sortBySeq(events []kin.Event) {
	sort.Slice(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
}

func TestEventLogAppendsHashesInTheSameTransaction(t *testing.T) {
	ctx := context.Background()
	s := openLog(t, filepath.Join(t.TempDir(), "kin.db"))
	key, v := testKey(t)
	var (
		mu        sync.Mutex
		committed []kin.Event
		next      atomic.Int64 // the next logEvent index: failed Updates use theirs up
	)
	// update appends n events in one Update that returns fail (or panics).
	update := func(n int, fail error, panics bool) error {
		from := int(next.Add(int64(n))) - n
		var got []kin.Event
		err := s.Update(ctx, func(tx store.Tx) error {
			for i := from; i < from+n; i++ {
				e, err := tx.EventAppend(ctx, logEvent(t, i))
				if err != nil {
					return err
				}
				got = append(got, e)
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

	// One Update at a time: a failed one leaves no gap.
	for u := range 40 {
		n := 1 + u%6
		before, _ := logHead(t, s)
		if u%5 == 4 {
			if err := update(n, errBoom, false); !errors.Is(err, errBoom) {
				t.Fatalf("update %d: %v, want %v", u, err, errBoom)
			}
			if after, _ := logHead(t, s); after != before {
				t.Fatalf("update %d failed but the tree grew from %d to %d", u, before, after)
			}
			continue
		}
		if err := update(n, nil, false); err != nil {
			t.Fatal(err)
		}
		if first := committed[len(committed)-n].Seq; first != before+1 {
			t.Fatalf("update %d: first event has seq %d after a tree of %d", u, first, before)
		}
		checkHead(t, s, committed)
	}

	// Many Updates in one batch: hold the writer in an Update until all are
	// queued, so that the writer commits them together, failing ones among
	// them.
	release := make(chan struct{})
	blocking := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		from := int(next.Add(2)) - 2
		var got []kin.Event
		err := s.Update(ctx, func(tx store.Tx) error {
			for i := from; i < from+2; i++ {
				e, err := tx.EventAppend(ctx, logEvent(t, i))
				if err != nil {
					return err
				}
				got = append(got, e)
			}
			close(blocking)
			<-release
			return nil
		})
		if err == nil {
			mu.Lock()
			committed = append(committed, got...)
			mu.Unlock()
		}
		held <- err
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
				errs[g] = update(1+g%4, nil, true)
			case g%3 == 1:
				errs[g] = update(1+g%5, errBoom, false)
			default:
				errs[g] = update(1+g%5, nil, false)
			}
		}()
	}
	for len(s.queue) < queued {
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
			if !errors.Is(err, errBoom) {
				t.Errorf("queued update %d: %v, want %v", g, err, errBoom)
			}
		default:
			if err != nil {
				t.Errorf("queued update %d: %v", g, err)
			}
		}
	}

	// Free-running writers.
	var failed atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(11, uint64(w)))
			for range 15 {
				fail := error(nil)
				if rng.IntN(4) == 0 {
					fail = errBoom
				}
				err := update(1+rng.IntN(8), fail, false)
				if !errors.Is(err, fail) {
					t.Errorf("writer %d: %v, want %v", w, err, fail)
				}
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if failed.Load() == 0 {
		t.Fatal("no free-running update failed: the test does not test what it says")
	}

	// The committed events are seqs 1, 2, 3, ... with no gap, and the store
	// holds exactly them.
	sortBySeq(committed)
	n := int64(len(committed))
	checkHead(t, s, committed)
	var stored []kin.Event
	err := s.LogEntries(ctx, func(en auditlog.Entry) error {
		if en.Damaged != "" {
			t.Errorf("seq %d: damaged: %s", en.Event.Seq, en.Damaged)
		}
		stored = append(stored, en.Event)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(stored)) != n {
		t.Fatalf("%d events stored, %d committed", len(stored), n)
	}
	for i, e := range stored {
		c := committed[i]
		if e.Seq != c.Seq || !e.Time.Equal(c.Time) || e.Type != c.Type || e.Agent != c.Agent || e.Parent != c.Parent || !bytes.Equal(e.Data, c.Data) {
			t.Fatalf("stored event %d is %+v, committed %+v", i, e, c)
		}
	}

	rep := verify(t, s, v, nil)
	wantOK(t, rep, n, 0)

	// A signed checkpoint of the head is checked.
	kept := checkpoint(t, s, key)
	wantOK(t, verify(t, s, v, nil), n, 1)

	// More events after it; the kept checkpoint is proved consistent with
	// a later one, through the store's stored hashes.
	more, err := appendEvents(t, s, int(next.Add(9))-9, int(next.Load()), nil)
	if err != nil {
		t.Fatal(err)
	}
	committed = append(committed, more...)
	checkHead(t, s, committed)
	checkpoint(t, s, key)
	rep = verify(t, s, v, kept)
	wantOK(t, rep, n+9, 3) // the two stored checkpoints and the kept one
	if rep.Consistency == "" {
		t.Error("no consistency proof from the kept checkpoint")
	}
}

func TestEventLogSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	key, v := testKey(t)
	s := openLog(t, path)
	var all []kin.Event
	for i := 0; i < 100; i += 10 {
		got, err := appendEvents(t, s, i, i+10, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	if _, err := appendEvents(t, s, 100, 105, errBoom); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	first := checkpoint(t, s, key)
	size, root := logHead(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openLog(t, path)
	if size2, root2 := logHead(t, s); size2 != size || root2 != root {
		t.Fatalf("after reopen LogHead = %d %s, before %d %s", size2, root2, size, root)
	}
	wantOK(t, verify(t, s, v, nil), 100, 1)
	for i := 105; i < 230; i += 25 {
		got, err := appendEvents(t, s, i, i+25, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Seq != int64(len(all)+1) {
			t.Fatalf("after reopen the next event has seq %d, want %d", got[0].Seq, len(all)+1)
		}
		all = append(all, got...)
	}
	checkHead(t, s, all)
	checkpoint(t, s, key)
	rep := verify(t, s, v, first)
	wantOK(t, rep, int64(len(all)), 3)
	if rep.Consistency == "" {
		t.Error("no consistency proof from the checkpoint kept before the reopen")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// And once more, read-only.
	wantOK(t, verify(t, openReadOnly(t, path), v, first), int64(len(all)), 3)
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
	rawExec(t, path,
		`ALTER TABLE events DROP COLUMN hashes`,
		`DROP TABLE log_checkpoints`,
		`DELETE FROM schema_migrations WHERE version >= 7`)
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

func TestEventAppendRefusesDataWithNewlines(t *testing.T) {
	ctx := context.Background()
	s := openLog(t, filepath.Join(t.TempDir(), "kin.db"))
	_, v := testKey(t)
	var kept kin.Event
	err := s.Update(ctx, func(tx store.Tx) error {
		for _, data := range []string{"{\n}", "{\"a\":1,\n\"b\":2}", "{\"a\":1}\n"} {
			e := kin.Event{Time: logTime, Type: kin.EventAgentStatus, Agent: 1, Data: []byte(data)}
			if _, err := tx.EventAppend(ctx, e); err == nil || !strings.Contains(err.Error(), "newline") {
				return fmt.Errorf("data %q: EventAppend returned %v, want an error about newlines", data, err)
			}
		}
		// An escaped newline inside a string is compact JSON: it goes in,
		// as seq 1 (the refused ones took no seq).
		e, err := kin.NewEvent(kin.EventAgentStatus, 1, 0, map[string]string{"reason": "two\nlines"})
		if err != nil {
			return err
		}
		e.Time = logTime
		kept, err = tx.EventAppend(ctx, e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Seq != 1 {
		t.Fatalf("the event after the refused ones has seq %d, want 1", kept.Seq)
	}
	checkHead(t, s, []kin.Event{kept})
	wantOK(t, verify(t, s, v, nil), 1, 0)
}

// TestOpenReadOnlyTakesAnyPath opens databases whose paths hold characters
// a SQLite URI gives meaning to, read-only: it must open the file named,
// and never create another.
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
		if _, err := ro.db.ExecContext(ctx, `DELETE FROM events`); err == nil {
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

// TestEventLogTwoHandles appends from two Stores opened on one file, as two
// processes would: each batch must continue the log the other extended, so
// the seqs stay gapless and the tree verifies; and each handle's LogHead
// reports the other's appends.
func TestEventLogTwoHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	a, b := openLog(t, path), openLog(t, path)
	_, v := testKey(t)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []kin.Event
	for w := range 8 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				n := 1 + w%3
				from := int(next.Add(int64(n))) - n
				got, err := appendEvents(t, s, from, from+n, nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	sortBySeq(all)
	checkHead(t, a, all)
	checkHead(t, b, all)
	wantOK(t, verify(t, a, v, nil), int64(len(all)), 0)
	// One more from a: b's cached edge is behind, and LogHead reloads it.
	more, err := appendEvents(t, a, int(next.Load()), int(next.Load())+3, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkHead(t, b, append(all, more...))
}
