// Package proctest finds processes for tests that must show none is left:
// the cascade, PID namespace and sandbox tests mark the processes they start
// with an argument no other process has, and look for it in /proc. It also
// tells benchmarks this process's CPU time (CPU) and the ext4 inodes it
// allocates and frees (CountInodes), and tests whether a process has
// exited (Alive), is reaped (Pidfd) or ignores a signal (SignalIgnored).
// It uses only the standard library, so any package's own tests may
// import it.
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// WithArg lists the live processes (zombies left out: they have ended) one
// of whose arguments after the program contains mark, other than the caller.
func WithArg(mark string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if _, args, ok := bytes.Cut(b, []byte{0}); !ok || !bytes.Contains(args, []byte(mark)) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z ")) {
			out = append(out, pid)
		}
	}
	return out
}

// CPU is this process's CPU time so far (user and system), for
// benchmarks that report CPU per operation beside wall time.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Alive reports whether pid is a process that has not exited (neither a
// zombie nor gone). The main thread of a Go program stays until its process
// ends, so a Go program is alive until it has exited.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndex(b, []byte(") ")) // after the command, which may hold ") "
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
