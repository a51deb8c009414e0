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

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// TestSweepRemovesUsersOfDeadTestBinaries: a test binary killed before its
// cleanups ran (kill -9, go test's -timeout) left its user, a process of
// that user and the user's delegated cgroup; the next binary's NewUser
// removes all three, and keeps the user of a binary that still runs and a
// user of that name that NewUser did not make.
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
	for _, u := range []struct{ name, comment string }{{stale, userComment}, {kept, userComment}, {foreign, "someone"}} {
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
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeStaleCgroup(cg) })
	if err := os.Mkdir(filepath.Join(cg, "agents"), 0o755); err != nil { // a subtree, as kin makes
		t.Fatal(err)
	}
	cgfd, err := syscall.Open(filepath.Join(cg, "agents"), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "60")
	left.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		UseCgroupFD: true, CgroupFD: cgfd,
	}
	err = left.Start()
	syscall.Close(cgfd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { left.Process.Kill(); left.Wait() })

	sweepStaleUsers()

	if _, err := user.Lookup(stale); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("user %s of a dead test binary is still there (lookup: %v)", stale, err)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its delegated cgroup %s is still there (stat: %v)", cg, err)
	}
	WaitFor(t, 10*time.Second, "the process of the dead binary's user to end", func() bool { return !alive(left.Process.Pid) })
	err = left.Wait()
	if ws, ok := left.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("its process ended with %v, want killed", err)
	}
	if _, err := user.Lookup(kept); err != nil {
		t.Errorf("user %s of a running test binary was removed: %v", kept, err)
	}
	if _, err := user.Lookup(foreign); err != nil {
		t.Errorf("user %s, which NewUser did not make, was removed: %v", foreign, err)
	}
}
