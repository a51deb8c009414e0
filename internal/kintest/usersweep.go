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
	for _, name := range staleUsers(stale) {
		pid, _ := userPID(name)
		if !stale(pid) { // checked again: its pid may live again by now
			continue
		}
		removeStaleUser(name)
	}
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(m.Dir, delegatedPrefix+userPrefix+"*"))
	for _, dir := range dirs {
		name := strings.TrimPrefix(filepath.Base(dir), delegatedPrefix)
		if pid, ok := userPID(name); ok && stale(pid) {
			if _, err := user.Lookup(name); err != nil { // its user's sweep above left it
				removeStaleCgroup(dir)
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
// (what runs in it killed first) and deletes the user once both are gone.
// What it cannot remove yet stays for the next sweep: the user too, so
// that its cgroup is found again.
func removeStaleUser(name string) {
	exec.Command("pkill", "-9", "-u", name).Run()
	if m, err := cgroup.FindMount(); err == nil && m.Writable {
		dir := filepath.Join(m.Dir, delegatedPrefix+name)
		removeStaleCgroup(dir)
		if _, err := os.Stat(dir); err == nil {
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

// runsAs reports whether a process that has not exited runs as uid (its
// real uid).
func runsAs(uid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state string
		real := -1
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			} else if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real, _ = strconv.Atoi(f[0])
				}
			}
		}
		if real == uid && !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X") {
			return true
		}
	}
	return false
}

// removeStaleCgroup is removeCgroup as far as it goes: a sweep reports
// nothing, and the next one tries again.
func removeStaleCgroup(dir string) { removeCgroup(dir) }
