package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/sandbox"
)

// openFilesPerAgent is what the daemon raises its limit for, per pid the
// host may have: room to spare, since issue 22 a live agent holds at most
// openFilesHeldPerAgent descriptors in the daemon: its socket's listener,
// and its log's pipe while it writes (or always, where io_uring is
// refused: agentlog's holder); no pidfd (BenchmarkDaemonMemory2000
// measures fds/agent: about 1 once the logs are parked). openFilesReserve is the daemon's own: the store, the
// operator's connections, the agents' connections (up to
// agentsock.MaxConns each, but few at once).
const (
	openFilesPerAgent     = 4
	openFilesHeldPerAgent = 2
	openFilesReserve      = 4096
)

// openFiles is what raiseOpenFiles did, once per process: a process may
// run several daemons (the tests do), and only the first sees the limit
// the process started with.
var openFiles struct {
	once sync.Once
	res  openFilesResult
}

type openFilesResult struct {
	// before is the limit as the process started, soft and hard; now is
	// the daemon's own after the raise.
	before, now syscall.Rlimit
	// child is the limit agents must get as if they inherited it (nil:
	// what they inherit is already that, unchanged or restored by Go).
	child *sandbox.OpenFilesLimit
	err   error // the raise failed: err names the limit
	want  uint64
}

// raiseOpenFiles raises the daemon's RLIMIT_NOFILE, soft and hard, so
// that its descriptors run out no sooner than the host's processes do
// (kernel.pid_max agents, openFilesPerAgent descriptors each), as far as
// fs.nr_open allows. Raising the hard limit needs CAP_SYS_RESOURCE: without
// it the daemon keeps the limit it has (Go's runtime already raised the
// soft limit to the hard one) and says how many agents that holds.
//
// Agents keep the limit the daemon started with: Go restores the soft
// limit it raised in every child, but not once the program set the limit
// itself, so the result says which limit the shim must give them
// (sandbox.Spec.InheritOpenFiles).
func raiseOpenFiles() openFilesResult {
	openFiles.once.Do(func() {
		openFiles.res = doRaiseOpenFiles(readUint("/proc/sys/kernel/pid_max"), readUint("/proc/sys/fs/nr_open"))
	})
	return openFiles.res
}

func doRaiseOpenFiles(pidMax, nrOpen uint64) openFilesResult {
	var r openFilesResult
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r.before); err != nil {
		r.err = fmt.Errorf("RLIMIT_NOFILE: %w", err)
		return r
	}
	r.now = r.before
	if pidMax == 0 {
		pidMax = 32768 // the kernel's default
	}
	r.want = pidMax*openFilesPerAgent + openFilesReserve
	if nrOpen > 0 && r.want > nrOpen {
		r.want = nrOpen // the most any process may have
	}
	if r.before.Max >= r.want {
		return r // Go's runtime raised the soft limit to (nearly) the hard one
	}
	// What the agents must get: the limit as the process started. Go
	// raised the soft limit to hard-1 at start if it was lower, and
	// remembers the original for its children only: ask a child.
	child := sandbox.OpenFilesLimit{Soft: r.before.Cur, Hard: r.before.Max}
	if r.before.Cur == r.before.Max-1 {
		soft, err := childSoftOpenFiles()
		if err != nil {
			soft = min(1024, r.before.Max) // the kernel's default soft limit
		}
		child.Soft = soft
	}
	// unix.Prlimit, not syscall.Setrlimit: only a raise that succeeds
	// turns off Go's restoring of the soft limit in children.
	raised := unix.Rlimit{Cur: r.want, Max: r.want}
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &raised, nil); err != nil {
		r.err = fmt.Errorf("cannot raise RLIMIT_NOFILE from %d (hard) to %d: %w", r.before.Max, r.want, err)
		return r
	}
	r.now, r.child = syscall.Rlimit{Cur: r.want, Max: r.want}, &child
	return r
}

// childSoftOpenFiles is the soft RLIMIT_NOFILE a child of this process
// starts with (Go restores the one the process started with).
func childSoftOpenFiles() (uint64, error) {
	out, err := exec.Command("/bin/sh", "-c", "ulimit -Sn").Output()
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
}

func readUint(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// logOpenFiles says what the daemon's RLIMIT_NOFILE holds.
func logOpenFiles(log *slog.Logger, r openFilesResult) {
	agents := (r.now.Cur - min(r.now.Cur, openFilesReserve)) / openFilesHeldPerAgent
	switch {
	case r.err != nil && errors.Is(r.err, syscall.EPERM):
		log.Warn("open files limit", "err", r.err, "rlimit_nofile", r.now.Cur, "agents_about", agents,
			"fix", "raise the hard limit of kin serve's open files (ulimit -Hn, systemd LimitNOFILE=) or run it with CAP_SYS_RESOURCE")
	case r.err != nil:
		log.Warn("open files limit", "err", r.err, "rlimit_nofile", r.now.Cur, "agents_about", agents)
	default:
		attrs := []any{"rlimit_nofile", r.now.Cur, "agents_about", agents}
		if r.child != nil {
			attrs = append(attrs, "raised_from", r.before.Max, "agents_get", fmt.Sprintf("%d:%d", r.child.Soft, r.child.Hard))
		}
		log.Info("open files limit", attrs...)
	}
}
