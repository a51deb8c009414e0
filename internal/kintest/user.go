package kintest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// User is an ordinary user a test made to run kin as (issue 18: kin must
// contain as an ordinary user as it does as root).
type User struct {
	Name     string
	UID, GID int
}

var users atomic.Int64

// NewUser makes an ordinary user with useradd (no home, no shell) and
// removes it, and every process it still has, when the test ends. It skips
// where the test does not run as root. Its first call in a test binary
// removes the users (and their delegated cgroups) of test binaries that
// died before their cleanups ran.
func NewUser(t testing.TB) User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a test user needs root (useradd)")
	}
	// What a killed test binary left; this binary has made no user yet, so
	// a kint<self>-<n> is an earlier process's of the same pid.
	sweepOnce.Do(func() { sweepStaleUsers(true) })
	name := fmt.Sprintf("%s%d-%d", userPrefix, os.Getpid(), users.Add(1))
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", userComment, name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		exec.Command("userdel", name).Run()
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	t.Cleanup(func() {
		exec.Command("pkill", "-9", "-u", name).Run()
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	return User{Name: name, UID: uid, GID: gid}
}

// Credential runs a process as u.
func (u User) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}
}

// DelegatedCgroup gives u a cgroup v2 subtree the way systemd's
// Delegate=yes does: the directory and its cgroup.procs,
// cgroup.subtree_control and cgroup.threads are u's. It is killed and
// removed when the test ends. It skips where no writable cgroup2 exists.
func DelegatedCgroup(t testing.TB, u User) string {
	t.Helper()
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		t.Skipf("no writable cgroup v2 mount (%v)", err)
	}
	dir := filepath.Join(m.Dir, delegatedPrefix+u.Name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
		if err := os.Chown(p, u.UID, u.GID); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// removeCgroupTree kills what runs in dir and removes it, children first.
func removeCgroupTree(t testing.TB, dir string) {
	if err := removeCgroup(dir); err != nil {
		t.Errorf("remove the delegated cgroup %s: %v", dir, err)
	}
}

// removeCgroup kills what runs in dir, waits until it is empty (at most
// 10 s), and removes it, children first. A dir that is not there is
// removed already.
func removeCgroup(dir string) error {
	if err := cgroup.Kill(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cgroup.WaitEmpty(ctx, dir)
	return errors.Join(err, cgroup.RemoveTree(dir))
}
