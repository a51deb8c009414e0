package kintest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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
// process, its processes, and its delegated cgroup. A pid that lives again
// (reused) keeps its users: never a live test's.
func sweepStaleUsers() {
	for _, name := range staleUsers(os.Getpid()) {
		removeStaleUser(name)
	}
}

// staleUsers lists /etc/passwd's users that NewUser made (their name and
// comment say so) for a test binary other than self that is gone.
func staleUsers(self int) []string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return nil
	}
	defer f.Close()
	var stale []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 5 || fields[4] != userComment {
			continue
		}
		pid, ok := userPID(fields[0])
		if ok && pid != self && !alive(pid) {
			stale = append(stale, fields[0])
		}
	}
	return stale
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
// (what runs in it killed first) and deletes the user.
func removeStaleUser(name string) {
	exec.Command("pkill", "-9", "-u", name).Run()
	if m, err := cgroup.FindMount(); err == nil && m.Writable {
		removeStaleCgroup(filepath.Join(m.Dir, delegatedPrefix+name))
	}
	exec.Command("userdel", name).Run()
}

// removeStaleCgroup kills what runs in dir and removes it, children first,
// as far as it can (a sweep reports nothing: the next one tries again).
func removeStaleCgroup(dir string) {
	if _, err := os.Stat(dir); err != nil {
		return
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; time.Now().Before(deadline); delay = min(delay*2, 50*time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if !bytes.Contains(b, []byte("populated 1")) {
			break
		}
		time.Sleep(delay)
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		syscall.Rmdir(dirs[i])
	}
}

// alive reports whether pid is a process that has not exited.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndex(b, []byte(") ")) // after the command, which may hold ") "
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
