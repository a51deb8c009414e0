package supervisor

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// echoAgent is an agent running cat from a request pipe (fd 3) to a
// response pipe (stdout): it answers a line only while it can run.
type echoAgent struct {
	p    *Process
	req  *os.File // write end: requests
	resp *os.File // read end: answers
	buf  []byte
}

func startEcho(t *testing.T, s *Supervisor, id, parent kin.AgentID) *echoAgent {
	t.Helper()
	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reqW.Close(); respR.Close() })
	p := start(t, s, Spec{ID: id, ParentID: parent, Argv: []string{"/bin/sh", "-c", "exec cat <&3"},
		Stdout: respW, ExtraFiles: []*os.File{reqR}})
	reqR.Close()
	respW.Close()
	return &echoAgent{p: p, req: reqW, resp: respR}
}

func (e *echoAgent) send(t *testing.T, line string) {
	t.Helper()
	if _, err := e.req.WriteString(line + "\n"); err != nil {
		t.Fatalf("agent %d: write: %v", e.p.ID, err)
	}
}

// expect reads the next answer, failing after d.
func (e *echoAgent) expect(t *testing.T, line string, d time.Duration) {
	t.Helper()
	e.resp.SetReadDeadline(time.Now().Add(d))
	for !bytes.Contains(e.buf, []byte("\n")) {
		var b [256]byte
		n, err := e.resp.Read(b[:])
		e.buf = append(e.buf, b[:n]...)
		if err != nil {
			t.Fatalf("agent %d: waiting for %q (have %q): %v", e.p.ID, line, e.buf, err)
		}
	}
	got, rest, _ := bytes.Cut(e.buf, []byte("\n"))
	if string(got) != line {
		t.Fatalf("agent %d answered %q, want %q", e.p.ID, got, line)
	}
	e.buf = append([]byte(nil), rest...)
}

// silent reports that no answer is ready now (a read that would block).
func (e *echoAgent) silent(t *testing.T) bool {
	t.Helper()
	if len(e.buf) > 0 {
		return false
	}
	e.resp.SetReadDeadline(time.Now())
	var b [256]byte
	n, err := e.resp.Read(b[:])
	e.buf = append(e.buf, b[:n]...)
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
}

func (e *echoAgent) ping(t *testing.T, line string) {
	t.Helper()
	e.send(t, line)
	e.expect(t, line, 10*time.Second)
}

func procState(t *testing.T, pid int) byte {
	t.Helper()
	st, err := readStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.state
}

func wantFrozen(t *testing.T, s *Supervisor, id kin.AgentID, self, effective bool) {
	t.Helper()
	gs, ge, err := s.Frozen(id)
	if err != nil || gs != self || ge != effective {
		t.Errorf("Frozen(%d) = %v, %v, %v; want %v, %v", id, gs, ge, err, self, effective)
	}
}

// TestFreezeSelfLeavesChildrenRunning: "suspend X" freezes X's own
// processes while its children keep running; "suspend X --cascade" freezes
// them all; one subtree Thaw undoes any mix of freezes.
func TestFreezeSelfLeavesChildrenRunning(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		ctx := testCtx(t)
		parent := startEcho(t, s, 1, 0)
		child := startEcho(t, s, 2, 1)
		parent.ping(t, "p0")
		child.ping(t, "c0")
		events := func(dir string) cgroup.Events {
			t.Helper()
			e, err := cgroup.ReadEvents(dir)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}

		// Freeze the parent alone.
		if err := s.Freeze(ctx, 1, false); err != nil {
			t.Fatal(err)
		}
		if s.cg {
			if e := events(parent.p.SelfCgroup()); !e.Frozen {
				t.Errorf("parent leaf %s not frozen: %+v", parent.p.SelfCgroup(), e)
			}
			for _, dir := range []string{parent.p.Cgroup, child.p.Cgroup, child.p.SelfCgroup()} {
				if e := events(dir); e.Frozen {
					t.Errorf("%s frozen by a freeze of the parent alone: %+v", dir, e)
				}
			}
		} else if c := procState(t, parent.p.Pid); c != 'T' {
			t.Errorf("parent state %c, want T", c)
		}
		wantFrozen(t, s, 1, true, true)
		wantFrozen(t, s, 2, false, false)
		if c := procState(t, child.p.Pid); c == 'T' || c == 't' {
			t.Errorf("child state %c while only its parent is frozen", c)
		}
		parent.send(t, "p1") // answered only once thawed
		child.ping(t, "c1")  // the child runs meanwhile
		if !parent.silent(t) {
			t.Error("the frozen parent answered")
		}

		// Freeze the whole subtree.
		if err := s.Freeze(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		if s.cg {
			for _, dir := range []string{parent.p.Cgroup, parent.p.SelfCgroup(), child.p.Cgroup, child.p.SelfCgroup()} {
				if e := events(dir); !e.Frozen {
					t.Errorf("%s not frozen by the subtree freeze: %+v", dir, e)
				}
			}
		} else {
			for _, e := range []*echoAgent{parent, child} {
				if c := procState(t, e.p.Pid); c != 'T' {
					t.Errorf("agent %d state %c after the subtree freeze", e.p.ID, c)
				}
			}
		}
		wantFrozen(t, s, 1, true, true)
		wantFrozen(t, s, 2, false, true)
		child.send(t, "c2")
		err := s.Thaw(ctx, 2, false)
		if !errors.Is(err, ErrInFrozenSubtree) || !strings.Contains(err.Error(), "agent 1") {
			t.Errorf("Thaw(child) inside the frozen subtree of its parent: %v; want ErrInFrozenSubtree naming agent 1", err)
		}
		wantFrozen(t, s, 2, false, true)
		if !child.silent(t) {
			t.Error("the child answered inside a frozen subtree")
		}

		if err := s.Thaw(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		parent.expect(t, "p1", 10*time.Second)
		child.expect(t, "c2", 10*time.Second)
		wantFrozen(t, s, 1, false, false)
		wantFrozen(t, s, 2, false, false)

		// A mix of single and subtree freezes ends fully thawed.
		for _, f := range []struct {
			id      kin.AgentID
			subtree bool
		}{{2, false}, {1, false}, {2, true}, {1, true}} {
			if err := s.Freeze(ctx, f.id, f.subtree); err != nil {
				t.Fatal(err)
			}
		}
		wantFrozen(t, s, 2, true, true)
		if err := s.Thaw(ctx, 2, true); !errors.Is(err, ErrInFrozenSubtree) {
			t.Errorf("Thaw(2, subtree) inside a frozen subtree: %v", err)
		}
		if err := s.Thaw(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		if s.cg {
			cgroup.Walk(parent.p.Cgroup, func(d string) error {
				if on, err := cgroup.FreezeSet(d); err != nil || on {
					t.Errorf("%s: cgroup.freeze %v (%v) after the subtree thaw", d, on, err)
				}
				if e := events(d); e.Frozen {
					t.Errorf("%s still frozen: %+v", d, e)
				}
				return nil
			})
		}
		wantFrozen(t, s, 1, false, false)
		wantFrozen(t, s, 2, false, false)
		parent.ping(t, "p3")
		child.ping(t, "c3")

		// A frozen agent cannot start a process, nor can an agent inside a
		// frozen subtree; an agent frozen alone can still get children.
		if err := s.Freeze(ctx, 1, false); err != nil {
			t.Fatal(err)
		}
		late := startEcho(t, s, 3, 1)
		late.ping(t, "l0")
		if err := s.Freeze(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		for _, sp := range []Spec{sleeper(4, 1), sleeper(5, 3)} {
			if _, err := s.Start(ctx, sp); !errors.Is(err, ErrFrozen) {
				t.Errorf("Start of agent %d inside a frozen subtree: %v, want ErrFrozen", sp.ID, err)
			}
		}
		if err := s.Thaw(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		if err := s.Freeze(ctx, 3, false); err != nil {
			t.Fatal(err)
		}
		late.send(t, "l1")
		if err := s.Kill(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Group(4); !errors.Is(err, ErrUnknownAgent) {
			t.Errorf("a refused Start left agent 4's record: %v", err)
		}
		if _, err := s.Start(ctx, sleeper(3, 1)); err != nil {
			t.Errorf("Start after the freeze's Stop: %v", err)
		}
	})
}

// TestPeerInCgroupSelf: an agent's own processes are those of its self
// leaf (and below it), not its children's nor any other directory in its
// group, whatever that directory is called.
func TestPeerInCgroupSelf(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		dir := t.TempDir()
		pids := filepath.Join(dir, "pids")
		env := []string{"PATH=/usr/bin:/bin", "PIDS=" + pids}
		p1 := start(t, s, Spec{ID: 1, Env: env, Argv: []string{"/bin/sh", "-c", `sleep 1000 & echo "bg $!" >> "$PIDS"; exec sleep 1000`}})
		p2 := start(t, s, sleeper(2, 1))
		var bg int
		waitFor(t, 10*time.Second, "the agent's background process", func() bool {
			bg = readLabels(pids)["bg"]
			return bg != 0
		})
		for _, c := range []struct {
			pid  int
			id   kin.AgentID
			want bool
		}{
			{p1.Pid, 1, true}, {bg, 1, true}, {bg, 2, false}, {p2.Pid, 2, true}, {p2.Pid, 1, false},
		} {
			if got := s.PeerInCgroup(c.pid, c.id); got != c.want {
				t.Errorf("PeerInCgroup(%d, %d) = %v, want %v", c.pid, c.id, got, c.want)
			}
		}
		if g, err := s.Group(1); err != nil || len(g.Pids) != 2 {
			t.Errorf("Group(1).Pids = %v (%v), want the agent's two processes", g.Pids, err)
		}
		if !s.cg {
			return
		}

		// Strays: processes placed (by someone with write access to the
		// group, as a test can) in directories kin did not make.
		a1 := p1.Cgroup
		strays := map[string]kin.AgentID{
			filepath.Join(a1, SelfLeaf, "sub"):       1, // a sub-cgroup of the leaf is still the agent's
			filepath.Join(a1, SelfLeaf, "a3"):        1, // named like a group, inside the leaf
			filepath.Join(a1, "a99", SelfLeaf):       0, // an unknown agent's group
			filepath.Join(a1, "x", SelfLeaf):         0, // any other directory
			a1:                                       0, // the group directory itself, outside its leaf
			filepath.Join(s.Root(), "a98", SelfLeaf): 0, // an unknown group at the root
		}
		var cmds []*exec.Cmd
		t.Cleanup(func() {
			// Before Close: kill and wait for them (the sweep may reap them
			// first, hence no error check).
			for _, c := range cmds {
				c.Process.Kill()
				c.Wait()
			}
		})
		for d, want := range strays {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			fd, err := cgroup.Open(d)
			if err != nil {
				t.Fatal(err)
			}
			c := exec.Command("/bin/sleep", "1000")
			c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			err = c.Start()
			syscall.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
			pid := c.Process.Pid
			got, ok := s.AgentOfPID(pid)
			if want == 0 && ok || want != 0 && (!ok || got != want) {
				t.Errorf("AgentOfPID(pid in %s) = %d, %v; want %d", d, got, ok, want)
			}
			for _, id := range []kin.AgentID{1, 2, 3, 98, 99} {
				if in := s.PeerInCgroup(pid, id); in != (id == want) {
					t.Errorf("PeerInCgroup(pid in %s, %d) = %v", d, id, in)
				}
			}
		}
		if g, err := s.Group(1); err != nil || len(g.Pids) != 4 {
			t.Errorf("Group(1).Pids = %v (%v), want its 2 processes and the 2 in its leaf's sub-cgroups", g.Pids, err)
		}
		groups, err := s.Discover()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			if filepath.Base(g.Path) == SelfLeaf || strings.Contains(g.Path, "/"+SelfLeaf+"/") {
				t.Errorf("Discover reported %s", g.Path)
			}
		}
		if _, err := s.Adopt(filepath.Join(a1, SelfLeaf, "a3")); err == nil {
			t.Error("Adopt accepted a directory inside a self leaf")
		}
		// A subtree Stop kills strays too and removes every directory.
		if err := s.Stop(testCtx(t), 1, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(a1); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Stop", a1)
		}
	})
}

// TestFreezeRacesStart: Starts racing with a subtree Freeze either fail
// with ErrFrozen or start a process that the freeze then holds; none hangs
// (a process cloned into a frozen group would freeze before its exec, and
// Start with it).
func TestFreezeRacesStart(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		ctx := testCtx(t)
		start(t, s, sleeper(1, 0))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var started []*Process
		first := make(chan struct{}, 4)
		// Four starters, each until it sees ErrFrozen; the freeze begins
		// once they are under way.
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 200 {
					p, err := s.Start(ctx, sleeper(kin.AgentID(100+1000*i+j), 1))
					if errors.Is(err, ErrFrozen) {
						return
					}
					if err != nil {
						t.Errorf("Start during Freeze: %v", err)
						return
					}
					mu.Lock()
					started = append(started, p)
					mu.Unlock()
					if j == 1 {
						first <- struct{}{}
					}
				}
				t.Error("Starts never saw the freeze")
			}()
		}
		for range 4 {
			<-first
		}
		if err := s.Freeze(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		t.Logf("%d Starts ran before the freeze", len(started))
		for _, p := range started {
			if _, eff, err := s.Frozen(p.ID); err != nil || !eff {
				t.Errorf("agent %d started before the subtree freeze is not frozen (%v)", p.ID, err)
			}
		}
		if err := s.Thaw(ctx, 1, true); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStopThawsWhatMayBeFrozen: agents that run as another uid than the
// daemon's cannot write their groups' cgroup.freeze, so until kin freezes
// a group (or adopts one, or starts a process as its own uid) a stop
// reads none (mayBeFrozen); once it has, a stop of the frozen tree with a
// grace thaws it, so that SIGTERM works.
func TestStopThawsWhatMayBeFrozen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agents run as another uid")
	}
	s := newCgroupSup(t, Config{})
	ctx := testCtx(t)
	nobody := func(id, parent kin.AgentID) Spec {
		sp := sleeper(id, parent)
		sp.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		sp.Dir = "/"
		return sp
	}
	p1, p2, p3 := start(t, s, nobody(1, 0)), start(t, s, nobody(2, 1)), start(t, s, nobody(3, 0))
	if s.mayBeFrozen.Load() {
		t.Fatal("may be frozen after starting agents as another uid only")
	}
	if err := s.Stop(ctx, 3, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if e, _ := p3.Exit(); e.Signal != syscall.SIGTERM {
		t.Errorf("agent 3 stopped with a grace: %v, want SIGTERM", e)
	}
	if err := s.Freeze(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if !s.mayBeFrozen.Load() {
		t.Fatal("not marked as may be frozen after a Freeze")
	}
	if err := s.Stop(ctx, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{p1, p2} {
		if e, _ := p.Exit(); e.Signal != syscall.SIGTERM {
			t.Errorf("agent %d stopped while frozen: %v, want SIGTERM", p.ID, e)
		}
	}
	// A process as the daemon's own uid may freeze its group itself.
	own := newCgroupSup(t, Config{})
	start(t, own, sleeper(1, 0))
	if !own.mayBeFrozen.Load() {
		t.Error("not marked as may be frozen after starting an agent as the daemon's own uid")
	}
}
