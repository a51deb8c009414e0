package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// The benchmarks time the supervisor against the floor in the same run
// (STYLE.md 12) and report the ratio: absolute figures drift 20-50 %
// between runs on these machines. The kill benchmarks start 2 x 1110
// processes per iteration; run them with -benchtime=3x.

// BenchmarkSpawn starts /bin/true as an agent in a fresh cgroup, waits for
// its exit and removes the group; each iteration also times a raw os/exec
// fork+exec+Wait and the same into a fresh cgroup (timer stopped).
func BenchmarkSpawn(b *testing.B) {
	s := newCgroupSup(b, Config{})
	ctx := context.Background()
	rawRoot := rawGroup(b)
	var raw, rawCG time.Duration
	for i := range b.N {
		id := kin.AgentID(i + 1)
		p, err := s.Start(ctx, Spec{ID: id, Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e, _ := p.Wait(ctx); !e.Success() {
			b.Fatalf("true: %v", e)
		}
		if err := s.Stop(ctx, id, 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		t0 := time.Now()
		rawForkExec(b)
		t1 := time.Now()
		rawForkExecIntoCgroup(b, rawRoot, i)
		raw += t1.Sub(t0)
		rawCG += time.Since(t1)
		b.StartTimer()
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(rawCG.Nanoseconds())/float64(b.N), "rawcg-ns/op")
	b.ReportMetric(float64(b.Elapsed())/float64(raw), "x-raw")
	b.ReportMetric(float64(b.Elapsed())/float64(rawCG), "x-rawcg")
}

func BenchmarkRawForkExec(b *testing.B) {
	for range b.N {
		rawForkExec(b)
	}
}

func BenchmarkRawForkExecIntoCgroup(b *testing.B) {
	root := rawGroup(b)
	for i := range b.N {
		rawForkExecIntoCgroup(b, root, i)
	}
}

func rawForkExec(b *testing.B) {
	if err := exec.Command("/bin/true").Run(); err != nil {
		b.Fatal(err)
	}
}

func rawForkExecIntoCgroup(b *testing.B, root string, i int) {
	dir := filepath.Join(root, "r"+strconv.Itoa(i))
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	fd, err := cgroup.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	err = cmd.Run()
	syscall.Close(fd)
	if err != nil {
		b.Fatal(err)
	}
	if err := syscall.Rmdir(dir); err != nil {
		b.Fatal(err)
	}
}

// rawGroup is a test-named group for raw children, outside any
// supervisor's root (so no sweep ever looks at them), removed at the end.
func rawGroup(b *testing.B) string {
	b.Helper()
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		b.Skipf("no writable cgroup v2 here (%v)", err)
	}
	dir := filepath.Join(m.Dir, uniqueName()+"-raw")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Skipf("cgroup2 not writable: %v", err)
	}
	b.Cleanup(func() {
		cgroup.Kill(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cgroup.WaitEmpty(ctx, dir)
		if err := cgroup.RemoveTree(dir); err != nil {
			b.Error(err)
		}
	})
	return dir
}

const fanout = 10 // a fanout x fanout x fanout tree: 1110 groups, one sleeping process each

// BenchmarkCascadeKill1000 builds a 10x10x10 tree of agents (1110 groups,
// each with a sleeping process) under one root group, then times Stop with
// grace 0 at the root until every process is reaped and every group
// removed. Each iteration also times the raw floor on the same tree shape
// (cgroup.kill + populated 0 + reaping, then also the rmdir of the 1111
// groups, which Stop does too), timer stopped.
func BenchmarkCascadeKill1000(b *testing.B) {
	ctx := context.Background()
	var raw, rawRm time.Duration
	for range b.N {
		b.StopTimer()
		s := newCgroupSup(b, Config{})
		buildTree(b, s)
		b.StartTimer()
		if err := s.Stop(ctx, 1, 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		kill, rm := rawTreeKill(b)
		raw += kill
		rawRm += kill + rm
		b.StartTimer()
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(rawRm.Nanoseconds())/float64(b.N), "raw+rmdir-ns/op")
	b.ReportMetric(float64(b.Elapsed())/float64(raw), "x-raw")
	b.ReportMetric(float64(b.Elapsed())/float64(rawRm), "x-raw+rmdir")
}

// BenchmarkRawCgroupKill1000 is the floor alone: ns/op is the kill, wait
// and reaping only (the setup is excluded by hand).
func BenchmarkRawCgroupKill1000(b *testing.B) {
	var raw time.Duration
	for range b.N {
		kill, _ := rawTreeKill(b)
		raw += kill
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "ns/op")
}

// buildTree starts agents 2.. under root group 1 (an empty group: its
// parent is not supervised), two forks at a time per level.
func buildTree(b *testing.B, s *Supervisor) {
	b.Helper()
	ctx := context.Background()
	next := kin.AgentID(2)
	level := []kin.AgentID{1}
	for range 3 {
		var specs []Spec
		for _, parent := range level {
			for range fanout {
				specs = append(specs, Spec{ID: next, ParentID: parent, Argv: []string{"/bin/sleep", "1000"}})
				next++
			}
		}
		if len(level) == 1 && level[0] == 1 {
			// Level 1's parent is unknown: Start makes the root group.
			for i := range specs {
				specs[i].ParentID = 1
			}
		}
		startAll(b, s, ctx, specs)
		level = level[:0]
		for _, sp := range specs {
			level = append(level, sp.ID)
		}
	}
}

func startAll(b *testing.B, s *Supervisor, ctx context.Context, specs []Spec) {
	b.Helper()
	var wg sync.WaitGroup
	ch := make(chan Spec)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sp := range ch {
				if _, err := s.Start(ctx, sp); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for _, sp := range specs {
		ch <- sp
	}
	close(ch)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// rawTreeKill builds the same tree with os/exec (UseCgroupFD), then times
// one cgroup.kill at its root, the wait for populated 0 and reaping every
// process, and separately the removal of the groups.
func rawTreeKill(b *testing.B) (kill, rmdir time.Duration) {
	b.Helper()
	root := rawGroup(b)
	var procs []*os.Process
	var build func(dir string, depth int)
	build = func(dir string, depth int) {
		if depth == 3 {
			return
		}
		for i := range fanout {
			d := filepath.Join(dir, "g"+strconv.Itoa(i))
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			fd, err := cgroup.Open(d)
			if err != nil {
				b.Fatal(err)
			}
			p, err := os.StartProcess("/bin/sleep", []string{"sleep", "1000"}, &os.ProcAttr{
				Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd},
			})
			syscall.Close(fd)
			if err != nil {
				b.Fatal(err)
			}
			procs = append(procs, p)
			build(d, depth+1)
		}
	}
	build(root, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t0 := time.Now()
	if err := cgroup.Kill(root); err != nil {
		b.Fatal(err)
	}
	if err := cgroup.WaitEmpty(ctx, root); err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	kill = time.Since(t0)
	t0 = time.Now()
	if err := cgroup.RemoveTree(root); err != nil {
		b.Fatal(err)
	}
	return kill, time.Since(t0)
}
