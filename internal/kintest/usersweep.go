package kintest

import (
	"bufio"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// userPrefix starts the names of the users NewUser makes: kint<pid>-<n>,
// pid the test binary's.
const userPrefix = "kint"

// userComment is the GECOS field of the users NewUser makes: the sweep
// removes no user without it, whatever its name.
const userComment = "kin test user (kintest.NewUser)"

// delegatedPrefix starts the names of DelegatedCgroup's directories, each
// followed by its user's name.
const delegatedPrefix = "kintest-delegated-"

var sweepOnce sync.Once

// sweepStaleUsers removes what test binaries that died before their
// cleanups ran (kill -9, SIGTERM, go test's -timeout) left of NewUser and
// DelegatedCgroup: each user kint<pid>-<n> whose pid is no longer a live
// process, its processes, and its delegated cgroup; and a delegated cgroup
// whose user is already gone. A pid that lives again (reused) keeps its
// users: never a live test's. ownPID says whether this binary's pid counts
// as gone too: true before this binary has made a user (its first
// NewUser), when any kint<self>-<n> is an earlier process's of the same
// pid.
func sweepStaleUsers(ownPID bool) {
	self := os.Getpid()
	stale := func(pid int) bool {
		if pid == self {
			return ownPID
		}
		return !proctest.Alive(pid)
	}
	root := "" // the cgroup v2 mount, where DelegatedCgroup made the users' groups
	if m, err := cgroup.FindMount(); err == nil && m.Writable {
		root = m.Dir
	}
	for _, name := range staleUsers(stale) {
		pid, _ := userPID(name)
		if !stale(pid) { // checked again: its pid may live again by now
			continue
		}
		removeStaleUser(name, root)
	}
	if root == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(root, delegatedPrefix+userPrefix+"*"))
	for _, dir := range dirs {
		name := strings.TrimPrefix(filepath.Base(dir), delegatedPrefix)
		if pid, ok := userPID(name); ok && stale(pid) {
			if _, err := user.Lookup(name); err != nil { // its user's sweep above left it
				removeCgroup(dir)
			}
		}
	}
}

// staleUsers lists /etc/passwd's users that NewUser made (their name and
// comment say so) for a test binary that stale says is gone.
func staleUsers(stale func(pid int) bool) []string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 5 || fields[4] != userComment {
			continue
		}
		if pid, ok := userPID(fields[0]); ok && stale(pid) {
			names = append(names, fields[0])
		}
	}
	return names
}

// userPID is the test binary's pid in a name NewUser made.
func userPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, userPrefix)
	if !ok {
		return 0, false
	}
	pidStr, n, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := strconv.Atoi(n); err != nil {
		return 0, false
	}
	return pid, true
}

// removeStaleUser kills name's processes, removes its delegated cgroup
// under the cgroup v2 mount root ("": none) with what runs in it, and
// deletes the user once both are gone. What it cannot remove yet stays for
// the next sweep: the user too, so that its cgroup is found again.
func removeStaleUser(name, root string) {
	exec.Command("pkill", "-9", "-u", name).Run()
	if root != "" {
		dir := filepath.Join(root, delegatedPrefix+name)
		if removeCgroup(dir) != nil {
			return
		}
	}
	// pkill returns before its processes have ended; userdel refuses a
	// user that still has one (not a zombie).
	if u, err := user.Lookup(name); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		deadline := time.Now().Add(10 * time.Second)
		for delay := time.Millisecond; runsAs(uid) && time.Now().Before(deadline); delay = min(delay*2, 50*time.Millisecond) {
			time.Sleep(delay)
		}
	}
	exec.Command("userdel", name).Run()
}

// runsAs reports whether a process that has not exited runs as uid (the
// owner of its /proc directory: its effective uid, which pkill -u matches).
func runsAs(uid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid && proctest.Alive(pid) {
			return true
		}
	}
	return false
}
