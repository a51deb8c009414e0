package ctxfs_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

// version is the content of version i of a file: self-describing, of a
// length that changes with i (up to max bytes), so that a reader can tell
// a whole version from a torn or mixed one.
func version(tag string, i, max int) []byte {
	n := (i*7919)%max + 1
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s v=%d n=%d\n", tag, i, n)
	b.Write(bytes.Repeat([]byte{'a' + byte(i%26)}, n))
	fmt.Fprintf(&b, "\nend %d\n", i)
	return b.Bytes()
}

// whichVersion returns i if b is exactly version(tag, i, max).
func whichVersion(tag string, b []byte, max int) (int, error) {
	var i, n int
	if _, err := fmt.Sscanf(string(b), tag+" v=%d n=%d\n", &i, &n); err != nil {
		return -1, fmt.Errorf("no header in %d bytes %q...", len(b), b[:min(len(b), 40)])
	}
	if !bytes.Equal(b, version(tag, i, max)) {
		return -1, fmt.Errorf("%d bytes claiming version %d are not version %d", len(b), i, i)
	}
	return i, nil
}

// owned is the test process's own uid and gid: these tests need no root.
func owned() ctxfs.Owner { return ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()} }

// TestReadersNeverSeePartialFiles rewrites one file thousands of times
// while readers read it as fast as they can: every read must be exactly one
// of the versions written. fsync plays no part in what readers see (it
// matters for power loss), so the FS skips it to write faster.
func TestReadersNeverSeePartialFiles(t *testing.T) {
	const (
		rewrites = 2000
		maxLen   = 16 << 10 // up to four pages, so a torn read would show
		readers  = 2
	)
	f := openFS(t, t.TempDir(), ctxfs.Options{NoSync: true})
	path := filepath.Join(f.Root, "agent", "latest.md")
	if err := f.WriteFile(path, version("latest", 0, maxLen), owned(), 0o600); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			last := -1
			for {
				finished := done.Load() // read once more after the writer is done
				b, err := os.ReadFile(path)
				if err != nil {
					errs <- err
					return
				}
				i, err := whichVersion("latest", b, maxLen)
				if err != nil {
					errs <- err
					return
				}
				if i < last {
					errs <- fmt.Errorf("read version %d after version %d", i, last)
					return
				}
				last = i
				reads.Add(1)
				if finished {
					if i != rewrites {
						errs <- fmt.Errorf("the last read saw version %d, not %d", i, rewrites)
					}
					return
				}
			}
		})
	}
	for i := 1; i <= rewrites; i++ {
		if err := f.WriteFile(path, version("latest", i, maxLen), owned(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d rewrites, %d whole reads", rewrites, reads.Load())
	assertNoTemps(t, f.Root)
}

// TestControlReadersSeeWholeFiles updates an agent's control files over and
// over while readers parse them: every file read is a whole file of some
// update (ReadControl fails on a torn number or JSON document).
func TestControlReadersSeeWholeFiles(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{NoSync: true})
	a := agentFixture(1, "coder", 0, 100)
	write := func(i int) error {
		a.PID = 100 + i
		a.Cursor = strings.Repeat("c", (i*131)%9000)
		rt := runtimeFixture(owned(), ctxfs.ParentRef{}, 1)
		rt.Policy = json.RawMessage(fmt.Sprintf(`{"v":%d,"pad":%q}`, i, strings.Repeat("p", (i*977)%20000)))
		v, err := ctxfs.ControlFor(a, rt)
		if err != nil {
			return err
		}
		return f.WriteControl("coder", v)
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			for !done.Load() {
				v, err := f.ReadControl("coder")
				if err != nil {
					errs <- err
					return
				}
				if !json.Valid(v.Policy) || v.Meta.ID != 1 {
					errs <- fmt.Errorf("bad control values: %+v", v)
					return
				}
			}
		})
	}
	for i := 1; i <= 500; i++ {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// crashArgs is the crash writer's input.
type crashArgs struct {
	Root   string
	Spares string // Options.SpareDir: the state's rewrites are exchanges
	UID    int
	GID    int
}

const crashMax = 200 << 10 // latest.md up to 200 KiB: many pages per write

func crashSession(a crashArgs) ctxfs.Session {
	return ctxfs.Session{Owner: ctxfs.Owner{UID: a.UID, GID: a.GID}, Agent: "coder", ID: ctxfs.DefaultSession}
}

func crashEvent(i int) []byte {
	// Up to about 12 KiB: lines that span pages, the only ones SIGKILL can
	// tear (the kernel stops a write between pages for a fatal signal).
	return []byte(fmt.Sprintf(`{"type":"test","i":%d,"pad":%q}`, i, strings.Repeat("e", (i*997)%12000)))
}

func checkEvent(line []byte) error {
	var ev struct {
		I   int    `json:"i"`
		Pad string `json:"pad"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return fmt.Errorf("event line %q...: %w", line[:min(len(line), 40)], err)
	}
	if ev.Pad != strings.Repeat("e", (ev.I*997)%12000) {
		return fmt.Errorf("event %d: wrong pad", ev.I)
	}
	return nil
}

// crashWriter rewrites a session file, the session state, an agent's
// control files and appends events, printing each finished round, until it
// is killed.
func crashWriter(args string) int {
	var a crashArgs
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := ctxfs.Open(a.Root, ctxfs.Options{SpareDir: a.Spares})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s := crashSession(a)
	latest := filepath.Join(f.Dir(s), ctxfs.FileLatest)
	agent := agentFixture(1, "coder", 0, 100)
	start := rand.IntN(1000)
	for i := start; ; i++ {
		agent.PID = 100 + i
		rt := runtimeFixture(s.Owner, ctxfs.ParentRef{}, 1)
		rt.Policy = json.RawMessage(fmt.Sprintf(`{"v":%d,"pad":%q}`, i, strings.Repeat("p", (i*977)%60000)))
		v, err := ctxfs.ControlFor(agent, rt)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// One line of progress after each step, so that the test's kill
		// lands at the start of a random step, inside its writes.
		for step, do := range []func() error{
			func() error { return f.WriteFile(latest, version("latest", i, crashMax), s.Owner, 0o600) },
			func() error {
				return f.SetSessionState(s, kin.AllStates[i%len(kin.AllStates)], t0.Add(time.Duration(i)*time.Second))
			},
			func() error { return f.WriteControl("coder", v) },
			func() error { return f.AppendEvent(s, crashEvent(i)) },
		} {
			if err := do(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Println(i, step)
		}
	}
}

// TestCrash kills a writer (the test binary re-executed) with SIGKILL in
// the middle of its writes, again and again, and checks after each kill
// that every file is whole: the old version or the new one, never part of
// one; events.jsonl is whole lines once the next append has run; and
// RemoveTemps clears what the dead writer left.
func TestCrash(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := crashArgs{Root: t.TempDir(), Spares: t.TempDir(), UID: os.Getuid(), GID: os.Getgid()}
	f := openFS(t, a.Root, ctxfs.Options{SpareDir: a.Spares})
	s := crashSession(a)
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Cwd: "/work", Now: t0}); err != nil {
		t.Fatal(err)
	}
	// The control files exist before the first kill, so that "the old
	// version" is defined also for a kill inside the writer's first
	// WriteControl (which would otherwise, rightly, leave none).
	rt := runtimeFixture(s.Owner, ctxfs.ParentRef{}, 1)
	rt.Policy = json.RawMessage(`{"v":-1}`)
	v, err := ctxfs.ControlFor(agentFixture(1, "coder", 0, 100), rt)
	if err == nil {
		err = f.WriteControl("coder", v)
	}
	if err != nil {
		t.Fatal(err)
	}
	argJSON, _ := json.Marshal(a)
	const kills = 20
	tornTails, temps := 0, 0
	for round := range kills {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"=crash-writer", helperArgs+"="+string(argJSON))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it after a random number of finished steps: it is then
		// starting the next one.
		want := 1 + rand.IntN(40)
		sc := bufio.NewScanner(out)
		got := 0
		for got < want && sc.Scan() {
			got++
		}
		cmd.Process.Kill()
		cmd.Wait()
		if got < want {
			t.Fatalf("round %d: the writer stopped after %d steps: %s", round, got, stderr.String())
		}

		b, err := os.ReadFile(filepath.Join(f.Dir(s), ctxfs.FileLatest))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := whichVersion("latest", b, crashMax); err != nil {
			t.Errorf("round %d: latest.md: %v", round, err)
		}
		if st, err := f.SessionState(s); err != nil || !st.Valid() {
			t.Errorf("round %d: state %q, %v", round, st, err)
		}
		b, err = os.ReadFile(filepath.Join(f.Dir(s), ctxfs.FileUpdatedAt))
		if _, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b))); err != nil || perr != nil {
			t.Errorf("round %d: updated_at %q: %v %v", round, b, err, perr)
		}
		if v, err := f.ReadControl("coder"); err != nil || !json.Valid(v.Policy) {
			t.Errorf("round %d: control files: %v", round, err)
		}
		tornTails += checkEvents(t, f, s, false)
		if err := f.AppendEvent(s, crashEvent(0)); err != nil {
			t.Fatal(err)
		}
		if checkEvents(t, f, s, true) != 0 {
			t.Errorf("round %d: the append did not repair the torn last line", round)
		}
		n, err := f.RemoveTemps()
		if err != nil {
			t.Fatal(err)
		}
		temps += n
		assertNoTemps(t, a.Root)
	}
	t.Logf("%d kills: %d torn event lines repaired, %d temporary files removed", kills, tornTails, temps)
}

// checkEvents checks that events.jsonl is whole, valid lines, except for a
// last line without its '\n' when torn is allowed; it returns 1 if there is
// such a line.
func checkEvents(t *testing.T, f *ctxfs.FS, s ctxfs.Session, whole bool) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.Dir(s), ctxfs.FileEvents))
	if err != nil {
		t.Fatal(err)
	}
	torn := 0
	if len(b) > 0 && b[len(b)-1] != '\n' {
		torn = 1
		if whole {
			t.Errorf("events.jsonl ends in a partial line")
		}
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(l) == 0 && len(b) == 0 {
			break
		}
		if err := checkEvent(l); err != nil {
			t.Error(err)
		}
	}
	return torn
}

func assertNoTemps(t *testing.T, root string) {
	t.Helper()
	for _, p := range listTree(t, root) {
		if strings.Contains(p, ".kin-") {
			t.Errorf("temporary file left behind: %s", p)
		}
	}
}

// TestAppendRepairsTornTail: a last line without '\n' (as a crash in the
// middle of a long append leaves) is cut before the next append.
func TestAppendRepairsTornTail(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	s := ctxfs.Session{Owner: owned(), Agent: "coder", ID: "default"}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.Dir(s), ctxfs.FileEvents)
	for i, ev := range []string{`{"i":1}`, "{\n  \"i\": 2\n}"} { // indented input is compacted
		if err := f.AppendEvent(s, []byte(ev)); err != nil {
			t.Fatal(i, err)
		}
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"i":3,"torn`)
	fh.Close()
	if err := f.AppendEvent(s, []byte(`{"i":4}`)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "{\"i\":1}\n{\"i\":2}\n{\"i\":4}\n"; string(b) != want {
		t.Errorf("events.jsonl = %q, want %q", b, want)
	}
	for _, bad := range []string{``, `[1]`, `{"a":`, `"x"`, `{} {}`} {
		if err := f.AppendEvent(s, []byte(bad)); err == nil {
			t.Errorf("AppendEvent(%q) succeeded", bad)
		}
	}
	big := []byte(`{"pad":"` + strings.Repeat("x", ctxfs.MaxEventLine) + `"}`)
	if err := f.AppendEvent(s, big); err == nil {
		t.Errorf("an event over MaxEventLine was appended")
	}
	if n := strings.Count(string(mustRead(t, path)), "\n"); n != 3 {
		t.Errorf("%d lines after refused appends, want 3", n)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
