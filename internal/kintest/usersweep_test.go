package kintest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// TestSweepRemovesUsersOfDeadTestBinaries: a test binary killed before its
// cleanups ran (kill -9, go test's -timeout) left its user, two processes
// of that user (one in the user's delegated cgroup, one outside it), the
// cgroup, and another delegated cgroup whose user is already gone; the
// sweep removes them all. It keeps the user of a binary that still runs, a
// user of that form of name that NewUser did not make, and this binary's
// own users unless told that none is (NewUser's first call).
func TestSweepRemovesUsersOfDeadTestBinaries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making test users needs root (useradd)")
	}
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		t.Skipf("no writable cgroup v2 mount (%v)", err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	running := exec.Command("sleep", "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })

	stale := fmt.Sprintf("%s%d-1", userPrefix, gone.Process.Pid)
	kept := fmt.Sprintf("%s%d-1", userPrefix, running.Process.Pid)
	// Named as NewUser names them, but not made by it (no comment): a
	// machine's own account is never swept for its name alone.
	foreign := fmt.Sprintf("%s%d-2", userPrefix, gone.Process.Pid)
	// This binary's pid: an earlier process's of the same pid, or this
	// binary's own.
	own := fmt.Sprintf("%s%d-999999", userPrefix, os.Getpid())
	for _, u := range []struct{ name, comment string }{{stale, userComment}, {kept, userComment}, {foreign, "someone"}, {own, userComment}} {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", u.comment, u.name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", u.name, err, out)
		}
		t.Cleanup(func() { exec.Command("pkill", "-9", "-u", u.name).Run(); exec.Command("userdel", u.name).Run() })
	}
	u, err := user.Lookup(stale)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cg := filepath.Join(m.Dir, delegatedPrefix+stale)
	orphan := filepath.Join(m.Dir, fmt.Sprintf("%s%s%d-3", delegatedPrefix, userPrefix, gone.Process.Pid))   // its user gone
	for _, dir := range []string{cg, filepath.Join(cg, "agents"), orphan, filepath.Join(orphan, "agents")} { // subtrees, as kin makes
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { removeCgroup(cg); removeCgroup(orphan) })
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	inside := startIn(t, filepath.Join(cg, "agents"), cred)
	outside := startIn(t, "", cred) // only pkill finds it
	inOrphan := startIn(t, filepath.Join(orphan, "agents"), nil)

	sweepStaleUsers(false)

	if _, err := user.Lookup(stale); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("user %s of a dead test binary is still there (lookup: %v)", stale, err)
	}
	for _, dir := range []string{cg, orphan} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("delegated cgroup %s is still there (stat: %v)", dir, err)
		}
	}
	for _, p := range []*exec.Cmd{inside, outside, inOrphan} {
		WaitFor(t, 10*time.Second, fmt.Sprintf("process %d of the dead binary to end", p.Process.Pid), func() bool { return !proctest.Alive(p.Process.Pid) })
		err := p.Wait()
		if ws, ok := p.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("process %d ended with %v, want killed", p.Process.Pid, err)
		}
	}
	for _, name := range []string{kept, foreign, own} {
		if _, err := user.Lookup(name); err != nil {
			t.Errorf("user %s was removed: %v", name, err)
		}
	}

	sweepStaleUsers(true) // as NewUser's first call: no user of this binary's pid is its own yet
	if _, err := user.Lookup(own); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("user %s of this binary's pid, from an earlier process, is still there (lookup: %v)", own, err)
	}
}

// startIn starts a sleep in the cgroup dir ("": this process's), as cred
// (nil: root), killed when the test ends.
func startIn(t *testing.T, dir string, cred *syscall.Credential) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if dir != "" {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}
