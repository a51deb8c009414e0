package ctxfs_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// holder opens the file args names for writing, prints its inode number,
// and then, for each line read from stdin, replaces the file's content
// through that descriptor with "pwned\n" and prints "wrote": an agent
// keeping its old state file open across kin's rewrites.
func holder(path string) int {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println(st.Ino)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if err := f.Truncate(0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := f.WriteAt([]byte("pwned\n"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("wrote")
	}
	return 0
}

// TestRewritesReuseTheirInodes: with a spare directory, a session's state
// and updated_at and a child folder's status are rewritten by exchange
// with their spares: each file alternates between two inodes, and after a
// file's first rewrite no inode is allocated or freed.
func TestRewritesReuseTheirInodes(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{NoSync: true, SpareDir: t.TempDir()})
	parent := ctxfs.Session{Owner: owned(), Agent: "planner", ID: ctxfs.DefaultSession}
	child := ctxfs.Session{Owner: owned(), Agent: "coder", ID: ctxfs.DefaultSession}
	for i, s := range []ctxfs.Session{parent, child} {
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: kin.AgentID(i + 1), Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.CreateChildDir(ctxfs.ChildParams{Parent: parent, Child: "coder", ChildID: 2, ChildSession: child.ID}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(f.Dir(child), ctxfs.FileState)
	status := filepath.Join(f.ChildDir(parent.UID, parent.Agent, parent.ID, "coder"), ctxfs.FileChildStatus)
	seen := map[string]map[uint64]bool{state: {}, status: {}}
	rewrite := func(i int) {
		st := []kin.State{kin.StateActive, kin.StateStale}[i%2]
		if err := f.SetSessionState(child, st, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
		cs := []ctxfs.ChildStatus{ctxfs.ChildCompleted, ctxfs.ChildFailed}[i%2]
		if err := f.SetChildStatus(parent, "coder", cs); err != nil {
			t.Fatal(err)
		}
		if got, err := f.SessionState(child); err != nil || got != st {
			t.Fatalf("rewrite %d: state %q, %v; want %q", i, got, err, st)
		}
		if got, err := f.ChildStatusOf(parent, "coder"); err != nil || got != cs {
			t.Fatalf("rewrite %d: status %q, %v; want %q", i, got, err, cs)
		}
		for p := range seen {
			seen[p][inode(t, p)] = true
		}
	}
	rewrite(0)
	counter, cerr := proctest.CountInodes()
	for i := 1; i < 10; i++ {
		rewrite(i)
	}
	for p, inos := range seen {
		if len(inos) != 2 {
			t.Errorf("%s stood on %d inodes over 10 rewrites, want 2", p, len(inos))
		}
	}
	if cerr != nil {
		t.Logf("inodes not counted: %v", cerr)
		return
	}
	defer counter.Close()
	if n, freed := counter.Read(); n != 0 || freed != 0 {
		t.Errorf("9 rewrites of three files after their first allocated %d inodes and freed %d, want 0 and 0", n, freed)
	}
}

// TestSparesStayInTheirSession is the attack on spares: an agent keeps its
// old state file open for writing across kin's rewrites and writes through
// it after each. That inode must never stand in another session or another
// agent's files, and nothing another agent owns may ever read what it
// wrote. A state file the agent replaced with a hard link to another of its
// files is never written through either.
func TestSparesStayInTheirSession(t *testing.T) {
	dir := publicTempDir(t) // the holder, as the attacker's uid, reaches its session
	f := openFS(t, filepath.Join(dir, "ctx"), ctxfs.Options{NoSync: true, SpareDir: filepath.Join(dir, "spare")})
	owner := func(uid int) ctxfs.Owner {
		if os.Geteuid() != 0 {
			return owned()
		}
		return ctxfs.Owner{UID: uid, GID: uid}
	}
	attacker := ctxfs.Session{Owner: owner(41001), Agent: "mallory", ID: ctxfs.DefaultSession}
	others := []ctxfs.Session{
		{Owner: owner(41001), Agent: "mallory", ID: "second"}, // the attacker's other session
		{Owner: owner(41002), Agent: "alice", ID: ctxfs.DefaultSession},
		{Owner: owner(41003), Agent: "mallory2", ID: ctxfs.DefaultSession},
	}
	for i, s := range append([]ctxfs.Session{attacker}, others...) {
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: kin.AgentID(i + 1), Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(helperBinary(t, dir))
	cmd.Env = append(os.Environ(), helperEnv+"=holder", helperArgs+"="+filepath.Join(f.Dir(attacker), ctxfs.FileState))
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(attacker.UID), Gid: uint32(attacker.GID)}}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := bufio.NewScanner(outPipe)
	if !out.Scan() {
		t.Fatalf("holder: %s", stderr.String())
	}
	var held uint64
	fmt.Sscan(out.Text(), &held)

	files := []string{ctxfs.FileState, ctxfs.FileUpdatedAt, ctxfs.FileMessages, ctxfs.FileEvents, ctxfs.FileLatest, ctxfs.FileMeta, ctxfs.FileCwd, ctxfs.FileCreatedAt}
	check := func(round int) {
		t.Helper()
		for _, s := range others {
			for _, name := range files {
				p := filepath.Join(f.Dir(s), name)
				if inode(t, p) == held {
					t.Fatalf("round %d: the inode the attacker holds stands at %s", round, p)
				}
				if b, err := os.ReadFile(p); err != nil || strings.Contains(string(b), "pwned") {
					t.Fatalf("round %d: %s holds %q (%v)", round, p, b, err)
				}
			}
		}
	}
	states := []kin.State{kin.StateActive, kin.StateStale, kin.StateStopping, kin.StateExited}
	for round := range 12 {
		now := t0.Add(time.Duration(round) * time.Second)
		if err := f.SetSessionState(attacker, states[round%len(states)], now); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in, "write")
		if !out.Scan() {
			t.Fatalf("holder: %s", stderr.String())
		}
		for _, s := range others {
			if err := f.SetSessionState(s, states[(round+1)%len(states)], now); err != nil {
				t.Fatal(err)
			}
		}
		check(round)
	}

	// The attacker's state replaced by a hard link to its latest.md: kin
	// exchanges it out once, and never writes into it.
	latest := filepath.Join(f.Dir(attacker), ctxfs.FileLatest)
	if err := os.WriteFile(latest, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(f.Dir(attacker), ctxfs.FileState)
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(latest, state); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		if err := f.SetSessionState(attacker, states[round], t0); err != nil {
			t.Fatal(err)
		}
		if got, err := f.SessionState(attacker); err != nil || got != states[round] {
			t.Fatalf("state %q, %v; want %q", got, err, states[round])
		}
		if b, err := os.ReadFile(latest); err != nil || string(b) != "mine\n" {
			t.Fatalf("rewrite %d wrote into the linked latest.md: %q, %v", round, b, err)
		}
	}
	check(12)
}

// TestNewSessionDropsOldSpares: a session made again at the same path
// (its predecessor removed) never gets the old session's spare, which a
// process of the old agent could still hold open.
func TestNewSessionDropsOldSpares(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{NoSync: true, SpareDir: t.TempDir()})
	s := ctxfs.Session{Owner: owned(), Agent: "coder", ID: ctxfs.DefaultSession}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(f.Dir(s), ctxfs.FileState)
	old := inode(t, state)
	keep, err := os.Open(state) // the old agent's descriptor: its inode is not reused meanwhile
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if err := f.SetSessionState(s, kin.StateActive, t0); err != nil { // old: now the spare
		t.Fatal(err)
	}
	if err := os.RemoveAll(f.Dir(s)); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 2, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for i, st := range []kin.State{kin.StateActive, kin.StateStale} {
		if err := f.SetSessionState(s, st, t0); err != nil {
			t.Fatal(err)
		}
		if inode(t, state) == old {
			t.Fatalf("rewrite %d of the new session put the old session's state inode in place", i)
		}
	}
}

// TestMadeAgainChurnsNothing: a session or a child folder asked for where
// one stands (an agent spawned again under a name whose default session
// is left, which then gets a session of its own) is refused before a stage
// is built: no inode is allocated or freed. Building and removing the
// stage allocated and freed some ten inodes, each of which the next
// allocations in its block group scan on a journal-less ext4.
func TestMadeAgainChurnsNothing(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{NoSync: true, SpareDir: t.TempDir()})
	s := ctxfs.Session{Owner: owned(), Agent: "coder", ID: ctxfs.DefaultSession}
	sp := ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0, Output: true, Handoff: []byte("Task: review\n")}
	if err := f.CreateSession(sp); err != nil {
		t.Fatal(err)
	}
	cp := ctxfs.ChildParams{Parent: s, Child: "rev", ChildID: 2, ChildSession: ctxfs.DefaultSession}
	if err := f.CreateChildDir(cp); err != nil {
		t.Fatal(err)
	}
	counter, cerr := proctest.CountInodes()
	sp.AgentID = 3
	if err := f.CreateSession(sp); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateSession where one stands: %v, want fs.ErrExist", err)
	}
	cp.ChildID = 4
	if err := f.CreateChildDir(cp); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateChildDir where one stands: %v, want fs.ErrExist", err)
	}
	assertNoTemps(t, f.Root)
	if cerr != nil {
		t.Skipf("inodes not counted (the ext4 tracepoints, through perf_event_open): %v", cerr)
	}
	defer counter.Close()
	if n, freed := counter.Read(); n != 0 || freed != 0 {
		t.Errorf("the two refusals allocated %d inodes and freed %d, want 0 and 0", n, freed)
	}
}
