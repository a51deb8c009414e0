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
