package leanshim_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/leanshim"
	"github.com/kin-agents/kin/internal/sandbox"
)

// BenchmarkShimDefaultView starts /bin/true through the lean shim under the
// default view hiding a directory in the system's temporary directory (as
// a daemon whose home is there: the benchmarks' and tests'), alternating
// a shim that walks the view itself with one given the daemon's ruleset
// (sandbox.View), and /bin/true alone as the floor. It reports the CPU the
// children used per start (user + system, from getrusage) and the time the
// View took to make each ruleset in this process.
//
//	go test -run='^$' -bench=ShimDefaultView -benchtime=200x ./internal/leanshim/
func BenchmarkShimDefaultView(b *testing.B) {
	if sandbox.ABI() == 0 {
		b.Fatal("Landlock is not available on this kernel")
	}
	shim, err := leanshim.Install(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	hidden, err := os.MkdirTemp("", "kin-bench-view-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(hidden)
	entries, _ := os.ReadDir(filepath.Dir(hidden))
	spec := sandbox.Spec{Restrict: true, All: true, Hidden: []string{hidden}, ScopeSignals: true, Argv: []string{"/bin/true"}}
	walkArgs, err := sandbox.Args(spec)
	if err != nil {
		b.Fatal(err)
	}
	spec.ViewFD = 3
	viewArgs, err := sandbox.Args(spec)
	if err != nil {
		b.Fatal(err)
	}
	view := sandbox.NewView(spec.Hidden, nil)
	defer view.Close()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(argv []string, files ...*os.File) time.Duration {
		c0 := cpu()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = files
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v: %s", argv, err, out)
		}
		return cpu() - c0
	}
	var raw, walk, viewed, build time.Duration
	n := 0
	for b.Loop() {
		raw += run([]string{"/bin/true"})
		walk += run(append([]string{shim, sandbox.Subcommand}, walkArgs...))
		t0 := time.Now()
		fd, err := view.Ruleset(sandbox.ABI(), true, 65534, []int{65534})
		build += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "view")
		viewed += run(append([]string{shim, sandbox.Subcommand}, viewArgs...), f)
		f.Close()
		n++
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) / 1000 }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(entries)), "tmp-entries")
	b.ReportMetric(per(raw), "true-cpu-ms")
	b.ReportMetric(per(walk), "walk-cpu-ms")
	b.ReportMetric(per(viewed), "view-cpu-ms")
	b.ReportMetric(per(build), "ruleset-ms")
	b.ReportMetric(float64(walk)/float64(viewed+build), "x-walk")
}

// BenchmarkDirectVersusShim starts /bin/true with the default view (the
// daemon's ruleset) and an open-files limit three ways, in turn: alone (the
// floor), through the lean shim, and without it (sandbox.Direct, as the
// supervisor does: a restricted thread of this process forks it, traced,
// and sets the limit at its first stop). Each start is timed until the
// process was reaped; cpu is this process's and its children's.
//
//	go test -run='^$' -bench=DirectVersusShim -benchtime=300x ./internal/leanshim/
func BenchmarkDirectVersusShim(b *testing.B) {
	if sandbox.ABI() < 7 {
		b.Skip("direct starts with the signal scope need Landlock ABI 7")
	}
	shim, err := leanshim.Install(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	hidden, err := os.MkdirTemp("", "kin-bench-direct-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(hidden)
	spec := sandbox.Spec{Restrict: true, All: true, Hidden: []string{hidden}, ScopeSignals: true, ViewFD: 3,
		InheritOpenFiles: &sandbox.OpenFilesLimit{Soft: 1024, Hard: 4096}, Argv: []string{"/bin/true"}}
	args, err := sandbox.Args(spec)
	if err != nil {
		b.Fatal(err)
	}
	view := sandbox.NewView(spec.Hidden, nil)
	defer view.Close()
	cpu := func() time.Duration {
		var self, kids syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
		return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
	}
	ruleset := func() *os.File {
		fd, err := view.Ruleset(sandbox.ABI(), true, 65534, []int{65534})
		if err != nil {
			b.Fatal(err)
		}
		return os.NewFile(uintptr(fd), "view")
	}
	wait := func(pid int) {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if ws.ExitStatus() != 0 {
			b.Fatalf("pid %d: %v", pid, ws)
		}
	}
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true}}
	var wall, cpus [3]time.Duration
	n := 0
	for b.Loop() {
		// the floor
		t0, c0 := time.Now(), cpu()
		pid, err := syscall.ForkExec("/bin/true", []string{"/bin/true"}, attr)
		if err != nil {
			b.Fatal(err)
		}
		wait(pid)
		wall[0], cpus[0] = wall[0]+time.Since(t0), cpus[0]+cpu()-c0
		// the shim
		f := ruleset()
		t0, c0 = time.Now(), cpu()
		sattr := *attr
		sattr.Files = []uintptr{0, 1, 2, f.Fd()}
		argv := append([]string{shim, sandbox.Subcommand}, args...)
		pid, err = syscall.ForkExec(shim, argv, &sattr)
		if err != nil {
			b.Fatal(err)
		}
		wait(pid)
		wall[1], cpus[1] = wall[1]+time.Since(t0), cpus[1]+cpu()-c0
		f.Close()
		// direct
		f = ruleset()
		t0, c0 = time.Now(), cpu()
		d, err := sandbox.PrepareDirect(spec, []*os.File{f}, nil)
		if err != nil {
			b.Fatal(err)
		}
		dsys := *attr.Sys
		dsys.Ptrace = true
		dattr := &syscall.ProcAttr{Files: attr.Files, Sys: &dsys}
		pid, err = d.Start(carryFiles(dattr), func(fds []int) (int, error) {
			a := *dattr
			a.Files = nil
			for _, fd := range fds {
				a.Files = append(a.Files, uintptr(fd))
			}
			return syscall.ForkExec("/bin/true", []string{"/bin/true"}, &a)
		})
		if err != nil {
			b.Fatal(err)
		}
		wait(pid)
		wall[2], cpus[2] = wall[2]+time.Since(t0), cpus[2]+cpu()-c0
		f.Close()
		n++
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) / 1000 }
	b.ReportMetric(0, "ns/op")
	for i, name := range []string{"true", "shim", "direct"} {
		b.ReportMetric(per(wall[i]), name+"-ms")
		b.ReportMetric(per(cpus[i]), name+"-cpu-ms")
	}
	b.ReportMetric(float64(wall[2])/float64(wall[1]), "direct/shim")
	b.ReportMetric(float64(cpus[2])/float64(cpus[1]), "direct/shim-cpu")
}

// carryFiles is attr's Files, as Direct.Start's carry.
func carryFiles(attr *syscall.ProcAttr) []int {
	carry := make([]int, len(attr.Files))
	for i, f := range attr.Files {
		carry[i] = int(f)
	}
	return carry
}
