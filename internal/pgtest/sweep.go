package pgtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/proctest"
)

// Sweep removes what test binaries that died before their cleanup left
// (see sweepStale); every start of a cluster does it first. A harness that
// sweeps its own leftovers (fleettest) calls it too.
func Sweep() { sweepStale() }

// sweepStale removes what test binaries that died before their Main (kill
// -9, a crash) left: their clusters' directories (kinpg-PID-* whose PID is
// gone), the server of each if it still runs (it should not: PDEATHSIG
// killed it), its SysV shared memory segment once nothing is attached, and
// the users pgtest made for them (named kinpg-PID, with userComment).
func sweepStale() {
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		dirs, _ := filepath.Glob(filepath.Join(parent, "kinpg-*-*"))
		for _, dir := range dirs {
			pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), "kinpg-"), "-")
			if pid, err := strconv.Atoi(pidStr); err == nil && pid != os.Getpid() && !proctest.Alive(pid) {
				removeStale(dir)
			}
		}
		if parent == "/tmp" {
			break
		}
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 5 || fields[4] != userComment {
			continue // not one pgtest made, whatever its name
		}
		name := fields[0]
		if pid, err := strconv.Atoi(strings.TrimPrefix(name, userPrefix)); err == nil && strings.HasPrefix(name, userPrefix) && pid != os.Getpid() && !proctest.Alive(pid) {
			exec.Command("userdel", name).Run()
		}
	}
}

// removeStale removes a dead test binary's cluster directory, first
// killing its server if it still runs.
func removeStale(dir string) {
	data := filepath.Join(dir, "data")
	if pid := postmasterPID(data); pid > 0 && proctest.Alive(pid) && isServerOf(pid, data) {
		syscall.Kill(pid, syscall.SIGKILL) // the server pgtest started, by its pid
		deadline := time.Now().Add(10 * time.Second)
		for delay := time.Millisecond; proctest.Alive(pid) && time.Now().Before(deadline); delay = min(delay*2, 50*time.Millisecond) {
			time.Sleep(delay)
		}
	}
	// The server's other processes notice its death and exit on their
	// own, detaching from the segment.
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; !removeShm(data) && time.Now().Before(deadline); delay = min(delay*2, 50*time.Millisecond) {
		time.Sleep(delay)
	}
	os.RemoveAll(dir)
}

// postmasterPID is the server's pid from data/postmaster.pid, or 0.
func postmasterPID(data string) int {
	b, _ := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	first, _, _ := bytes.Cut(b, []byte("\n"))
	pid, _ := strconv.Atoi(string(bytes.TrimSpace(first)))
	return pid
}

// isServerOf says whether pid is a postgres serving data (its arguments
// name the data directory): a pid from a stale file may have been reused.
func isServerOf(pid int, data string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte("\x00"+data+"\x00"))
}

// removeShm removes the SysV shared memory segment a server of data made
// (postmaster.pid's seventh line: key and id), if nothing is attached: a
// fast shutdown removes it, a SIGKILL to the server leaves it. It says
// false only while the segment is still attached.
func removeShm(data string) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return true
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return true
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return true
	}
	key, err1 := strconv.ParseInt(f[0], 10, 64)
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return true
	}
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err != nil || int64(uint32(desc.Perm.Key)) != key {
		return true // gone, or someone else's since
	}
	if desc.Nattch != 0 {
		return false
	}
	unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	return true
}
