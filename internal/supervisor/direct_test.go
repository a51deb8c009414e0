package supervisor

import (
	"errors"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// directSpec is a start of argv without the shim, restricted to the system
// paths, with an open-files limit; its shim (Argv) would exit 99.
func directSpec(t testing.TB, id kin.AgentID, argv ...string) Spec {
	t.Helper()
	d, err := sandbox.PrepareDirect(sandbox.Spec{Restrict: true, ScopeSignals: true, RO: sandbox.DefaultSystemRO(),
		RW: sandbox.DefaultSystemRW(), OpenFiles: 64, Argv: argv}, nil, nil)
	if err != nil {
		t.Fatalf("PrepareDirect: %v", err)
	}
	return Spec{ID: id, Argv: []string{"/bin/sh", "-c", "exit 99"}, Direct: d}
}

// newDirectSup is a cgroup2 Supervisor that makes direct starts, or skips
// the test where this machine cannot.
func newDirectSup(t *testing.T) *Supervisor {
	t.Helper()
	if sandbox.ABI() < 7 {
		t.Skipf("Landlock ABI %d: direct starts with the signal scope need 7", sandbox.ABI())
	}
	s := newCgroupSup(t, Config{})
	if !s.DirectStarts() {
		t.Skip("this supervisor makes no direct starts")
	}
	return s
}

// TestDirectStartsRaceTheReapingSweeps: direct starts, each child stopped
// traced for a moment (which waitid reports to the whole daemon), made
// while children exit all the time and their orphans (re-parented to the
// daemon) are swept: every exit is reported with its status, none hangs,
// and every start was direct.
func TestDirectStartsRaceTheReapingSweeps(t *testing.T) {
	s := newDirectSup(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := kin.AgentID(1 + w*each + i)
				code := int(id % 50)
				// An orphan left behind (swept), and an exit status.
				p, err := s.Start(testCtx(t), directSpec(t, id, "/bin/sh", "-c", "/bin/true & exit "+strconv.Itoa(code)))
				if err != nil {
					errs <- err
					continue
				}
				e, err := p.Wait(testCtx(t))
				switch {
				case err != nil:
					errs <- err
				case e.Code != code:
					errs <- errors.New("agent " + strconv.Itoa(int(id)) + ": " + e.String() + ", want exit status " + strconv.Itoa(code))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.DirectStarted(); got != workers*each {
		t.Errorf("%d of %d starts were direct", got, workers*each)
	}
}

// TestDirectStartFallsBackToTheShim: a direct start that fails before its
// command ran (here a granted path that is a link, refused on the start's
// thread) leaves the start to Argv, the shim's command line.
func TestDirectStartFallsBackToTheShim(t *testing.T) {
	s := newCgroupSup(t, Config{})
	if !s.DirectStarts() || sandbox.ABI() == 0 {
		t.Skip("this supervisor makes no direct starts")
	}
	dir := t.TempDir()
	link := dir + "/link"
	if err := syscall.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	d, err := sandbox.PrepareDirect(sandbox.Spec{Restrict: true, RO: sandbox.DefaultSystemRO(), RW: []string{link},
		Argv: []string{"/bin/true"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", "-c", "exit 7"}, Direct: d})
	if e := waitExit(t, p); e.Code != 7 {
		t.Errorf("%v: want the shim's command's exit status 7", e)
	}
	if s.DirectStarted() != 0 {
		t.Errorf("%d direct starts, want 0", s.DirectStarted())
	}
}

// TestDirectStartsDoNotWalkEveryChild: a direct start stops its child
// twice and continues it once; none of that may wake the reaping loop,
// whose waitid(P_ALL) walks every child of the daemon (a spawn's cost
// would grow with the live agents), nor may the watch that follows kick it
// to find a process that is running. The process's SIGCHLD action has
// SA_NOCLDSTOP, and keeps it while Supervisors come and go.
func TestDirectStartsDoNotWalkEveryChild(t *testing.T) {
	s := newDirectSup(t)
	other := newCgroupSup(t, Config{}) // a second Supervisor's notification
	other.Close()
	if act, err := childAction(); err != nil || act.flags&saNoCldStop == 0 {
		t.Errorf("SIGCHLD's action: flags %#x (%v); want SA_NOCLDSTOP while a Supervisor runs", act.flags, err)
	}
	const starts = 20
	walks0 := walks.Load()
	for i := range starts {
		if _, err := s.Start(testCtx(t), directSpec(t, kin.AgentID(i+1), "/bin/sleep", "1000")); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.DirectStarted(); n != starts {
		t.Fatalf("%d of %d starts were direct", n, starts)
	}
	walked := walks.Load() - walks0
	if walked >= starts/2 {
		t.Errorf("%d direct starts made the reaping loop walk every child %d times", starts, walked)
	}
	// An exit is still reaped: its SIGCHLD comes.
	p, err := s.Start(testCtx(t), directSpec(t, starts+1, "/bin/sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := p.Wait(testCtx(t)); err != nil || e.Code != 3 {
		t.Errorf("the exiting agent: %+v, %v; want code 3", e, err)
	}
}
