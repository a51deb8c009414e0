package sandbox

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDirectStartBesideHeldFDs starts /bin/true directly (as the
// supervisor does: stdio carried, Landlock, traced, detached) while the
// process holds 0, 2,000 or 8,000 other descriptors (a daemon holds two or
// so per live agent). cpu-us/op is this process's and its children's CPU
// per start (getrusage of both: the agent's execve closing a copied table
// counts as the child's); x-fds0 is each row's CPU over the first row's,
// which the start's own descriptor table keeps near 1.
func BenchmarkDirectStartBesideHeldFDs(b *testing.B) {
	requireLandlock(b)
	var first float64
	for _, n := range []int{0, 2000, 8000} {
		b.Run(fmt.Sprintf("fds=%d", n), func(b *testing.B) {
			holdNull(b, n, unix.O_CLOEXEC)
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			fd := devnull.Fd()
			attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Ptrace: true}}
			spec := Spec{Restrict: true, RO: DefaultSystemRO(), RW: DefaultSystemRW(), Argv: []string{"/bin/true"}}
			c0 := cpuWithChildren()
			for b.Loop() {
				d, err := PrepareDirect(spec, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				pid, err := d.Start(forkExec(spec.Argv, attr))
				if err != nil {
					b.Fatal(err)
				}
				var ws syscall.WaitStatus
				if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
					b.Fatalf("wait %d: %v %v", pid, ws, err)
				}
			}
			us := float64(cpuWithChildren()-c0) / float64(time.Microsecond) / float64(b.N)
			b.ReportMetric(us, "cpu-us/op")
			if n == 0 {
				first = us
			} else if first > 0 {
				b.ReportMetric(us/first, "x-fds0")
			}
		})
	}
}

// cpuWithChildren is this process's CPU time and its reaped children's.
func cpuWithChildren() time.Duration {
	var self, kids unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &self)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	t := func(r unix.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return t(self) + t(kids)
}
