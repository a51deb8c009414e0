package supervisor

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// initArgv wraps argv in kin's init (the sandbox shim with Init), as the
// daemon does with PID namespaces.
func initArgv(t *testing.T, argv ...string) []string {
	t.Helper()
	args, err := sandbox.Args(sandbox.Spec{Init: true, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{exe, sandbox.Subcommand}, args...)
}

func TestStatusFDEnvIsTheShimsVariable(t *testing.T) {
	if StatusFDEnv != sandbox.StatusFDEnv {
		t.Fatalf("supervisor.StatusFDEnv %q != sandbox.StatusFDEnv %q", StatusFDEnv, sandbox.StatusFDEnv)
	}
}

// TestPIDNamespacesContainWhatEscapesProcessGroups: with PID namespaces a
// grandchild that called setsid, cleared its environment and ignores
// SIGTERM is found as its agent's (AgentOfPID, Contained) and dies with its
// agent's subtree; the agent's exit status is its command's own, through
// the init.
func TestPIDNamespacesContainWhatEscapesProcessGroups(t *testing.T) {
	s := newSup(t, Config{Containment: ContainmentPIDNamespaces})
	ctx := testCtx(t)
	// The escaper is found by a unique argument: inside, $$ is a pid of
	// the agent's namespace, not the daemon's.
	mark := "1000." + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	escaper := `trap "" TERM; exec sleep ` + mark
	parent, err := s.Start(ctx, Spec{ID: 1, Argv: initArgv(t, "/bin/sleep", "1000")})
	if err != nil {
		t.Fatal(err)
	}
	child, err := s.Start(ctx, Spec{ID: 2, ParentID: 1, Argv: initArgv(t, "/bin/sh", "-c",
		`setsid env -i /bin/sh -c '`+escaper+`' </dev/null >/dev/null 2>&1 & exec sleep 1000`)})
	if err != nil {
		t.Fatal(err)
	}
	var esc int
	var seen []int
	defer func() {
		if esc == 0 { // what the wait last saw, if it failed
			for _, pid := range seen {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				t.Logf("process %d with the mark: %q", pid, b)
			}
		}
	}()
	// 30 s: five execs in a new PID namespace, on a machine whose other
	// core may run the rest of the suite (CI once timed out at 10 s).
	waitFor(t, 30*time.Second, "the escaper (sleep "+mark+")", func() bool {
		seen = proctest.WithArg(mark)
		if len(seen) == 1 {
			esc = seen[0]
		}
		return len(seen) == 1
	})
	if id, ok := s.AgentOfPID(esc); !ok || id != 2 {
		t.Fatalf("AgentOfPID(escaper %d) = %v, %v; want 2", esc, id, ok)
	}
	if id, in := s.Contained(esc); !in || id != 2 {
		t.Fatalf("Contained(escaper) = %v, %v; want 2, true", id, in)
	}
	if id, in := s.Contained(os.Getpid()); in {
		t.Fatalf("Contained(the test itself) = %v, %v; want not contained", id, in)
	}
	if !s.PeerInCgroup(parent.Pid, 1) || s.PeerInCgroup(esc, 1) {
		t.Fatal("PeerInCgroup mixes the parent's and the child's processes")
	}
	if err := s.Stop(ctx, 1, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{parent, child} {
		if _, done := p.Exit(); !done {
			t.Fatalf("agent %d's init not reaped after Stop", p.ID)
		}
	}
	if err := syscall.Kill(esc, 0); err != syscall.ESRCH {
		t.Fatalf("the setsid, env -i, TERM-ignoring escaper %d outlived its agent's stop (kill 0: %v)", esc, err)
	}
}

func TestPIDNamespacesReportTheCommandsOwnStatus(t *testing.T) {
	s := newSup(t, Config{Containment: ContainmentPIDNamespaces})
	ctx := testCtx(t)
	for i, c := range []struct {
		script string
		code   int
		sig    syscall.Signal
	}{
		{"exit 7", 7, 0},
		{"exit 0", 0, 0},
		{"kill -KILL $$", -1, syscall.SIGKILL},
	} {
		p, err := s.Start(ctx, Spec{ID: kin.AgentID(10 + i), Argv: initArgv(t, "/bin/sh", "-c", c.script)})
		if err != nil {
			t.Fatal(err)
		}
		e, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Code != c.code || e.Signal != c.sig {
			t.Errorf("%q: exit code %d signal %v; want %d %v", c.script, e.Code, e.Signal, c.code, c.sig)
		}
	}
}
