package daemon_test

// Benchmarks of issue 21's shutdown and restart, each against a floor
// measured in the same run (STYLE.md convention 12); docs/PERFORMANCE.md,
// section "Shutdown and restart", has the commands, targets and numbers.
// Like the supervisor's, each iteration is a batch (a daemon with 2,000
// agents): run them with -benchtime=1x and -count for the spread. They
// clean up after themselves even when they fail: daemons stopped or killed,
// processes killed and reaped, groups removed.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

const (
	shutdownRoots = 100 // independent subtrees, each with one TERM-ignoring process
	shutdownGrace = 3 * time.Second
)

// deafArgv ignores SIGTERM: the shell sets the disposition and execs sleep,
// which keeps it; once /proc/<pid>/comm says sleep, it ignores SIGTERM.
var deafArgv = []string{"/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 3600"}

// BenchmarkShutdown2000 stops a daemon (SIGTERM, a process of its own) that
// runs 2,000 agents across 100 roots, each root a process that ignores
// SIGTERM and the rest sleeping children that do not, every one with a grace
// of 3 s: shutdown-ms is from the SIGTERM until the daemon exited, having
// killed, reaped and recorded every agent. The floor is the same work done
// raw, at once for the 100 groups: SIGTERM every process of each group,
// wait until it is empty or the grace has passed, cgroup.kill, wait until
// empty, reap (raw-ms). over-grace-ms is shutdown-ms minus the grace (the
// target: under 2 s); x-raw is shutdown-ms ÷ raw-ms. cpu-ms is the
// daemon's CPU time from the SIGTERM until it exited, which a busy machine
// moves much less than the wall time.
func BenchmarkShutdown2000(b *testing.B) {
	g := newGroupCheck(b)
	profile := unlimitedProfile(b)
	var spent, raw, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		pids := newPidCheck(b)
		p := startDaemonProc(b, g, pids, profile)
		roots := make([]kin.SpawnRequest, shutdownRoots)
		for i := range roots {
			roots[i] = graceRequest(fmt.Sprintf("deaf%d", i), 0, deafArgv)
		}
		deaf, err := spawnAll(p.client, roots, memoryClients)
		pids.add(deaf...)
		if err != nil {
			b.Fatal(err)
		}
		kids := make([]kin.SpawnRequest, memoryAgents-shutdownRoots)
		for i := range kids {
			kids[i] = graceRequest(fmt.Sprintf("k%d", i), deaf[i%len(deaf)].ID, sleepArgv)
		}
		agents, err := spawnAll(p.client, kids, memoryClients)
		pids.add(agents...)
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.client.Status(ctx); err != nil || st.Running != memoryAgents {
			b.Fatalf("daemon status after the spawns: %+v, %v", st, err)
		}
		if err := waitDeaf(deaf); err != nil {
			b.Fatal(err)
		}

		cpu0, err := procCPU(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		took, err := p.stop(60 * time.Second)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		spent += took
		end, err := os.ReadFile(p.cpuFile)
		if err != nil {
			b.Fatalf("the daemon's CPU time at its exit: %v", err)
		}
		total, err := strconv.ParseInt(string(end), 10, 64)
		if err != nil {
			b.Fatalf("the daemon's CPU time at its exit: %v", err)
		}
		cpu += time.Duration(total) - cpu0
		if left := pids.leftover(); len(left) > 0 {
			b.Fatalf("processes left after the daemon's shutdown: %v", left)
		}
		if _, err := os.Stat(p.cgroupRoot); !errors.Is(err, os.ErrNotExist) {
			b.Fatalf("the daemon's cgroup %s is left after its shutdown (%v)", p.cgroupRoot, err)
		}
		if err := checkShutdownRecorded(b, g, pids, profile, p.home); err != nil {
			b.Fatal(err)
		}

		r, err := rawShutdown(b, g)
		if err != nil {
			b.Fatal(err)
		}
		raw += r
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(ms(spent)/n, "shutdown-ms")
	b.ReportMetric(ms(shutdownGrace), "grace-ms")
	b.ReportMetric(ms(spent)/n-ms(shutdownGrace), "over-grace-ms")
	b.ReportMetric(ms(raw)/n, "raw-ms")
	b.ReportMetric(float64(spent)/float64(raw), "x-raw")
	b.ReportMetric(ms(cpu)/n, "cpu-ms")
}

// procCPU is process pid's own CPU time so far (user and system, from
// /proc/<pid>/stat, in clock ticks of 10 ms; not its reaped children's).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command (which may hold spaces) from its ")":
	// state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// graceRequest spawns argv with shutdownGrace.
func graceRequest(name string, parent kin.AgentID, argv []string) kin.SpawnRequest {
	req := sleepRequest(name, parent)
	grace := kin.Duration(shutdownGrace)
	req.Command, req.Grace = argv, &grace
	return req
}

// waitDeaf waits until every one of the agents runs sleep (deafArgv
// exec'd it, after ignoring SIGTERM).
func waitDeaf(agents []*kin.Agent) error {
	return poll(30*time.Second, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		for _, a := range agents {
			if !execd(a.PID) {
				return false, nil
			}
		}
		return true, nil
	})
}

func execd(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(comm)) == "sleep"
}

// checkShutdownRecorded starts a daemon on the stopped one's home (untimed)
// and checks that every agent is recorded cancelled for the shutdown.
func checkShutdownRecorded(b *testing.B, g *groupCheck, pids *pidCheck, profile, home string) error {
	p, _ := execDaemonProc(b, g, pids, profile, home)
	defer p.stop(60 * time.Second)
	as, err := p.client.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		return err
	}
	n := 0
	for _, a := range as {
		if a.State != kin.StateCancelled || a.EndReason != "shutdown" || a.EndedAt.IsZero() {
			return fmt.Errorf("agent %d (%s) after the shutdown: %s, %s", a.ID, a.Name, a.State, a.EndReason)
		}
		n++
	}
	if n != memoryAgents {
		return fmt.Errorf("%d agents recorded, want %d", n, memoryAgents)
	}
	return nil
}

// rawShutdown is the floor: 100 groups of 20 processes, one ignoring
// SIGTERM, each group stopped as kin's cancellation stops a subtree, all at
// once, timed until every group is empty and every process reaped.
func rawShutdown(b *testing.B, g *groupCheck) (time.Duration, error) {
	b.Helper()
	rg := newRawGroup(b, g, "shutdown")
	per := memoryAgents / shutdownRoots
	var deaf []int
	for r := range shutdownRoots {
		sub := "r" + strconv.Itoa(r) + "x"
		if err := os.Mkdir(filepath.Join(rg.dir, sub), 0o755); err != nil {
			return 0, err
		}
		if _, _, err := rg.startArgv(filepath.Join(sub, "self"), deafArgv); err != nil {
			return 0, err
		}
		rg.mu.Lock()
		deaf = append(deaf, rg.procs[len(rg.procs)-1].Pid)
		rg.mu.Unlock()
		for k := 1; k < per; k++ {
			if _, _, err := rg.start(filepath.Join(sub, "c"+strconv.Itoa(k))); err != nil {
				return 0, err
			}
		}
	}
	if err := poll(30*time.Second, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		for _, pid := range deaf {
			if !execd(pid) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return 0, err
	}

	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, shutdownRoots)
	for r := range shutdownRoots {
		wg.Go(func() { errs[r] = stopRawGroup(filepath.Join(rg.dir, "r"+strconv.Itoa(r)+"x")) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	rg.mu.Lock()
	procs := rg.procs
	rg.procs = nil
	rg.mu.Unlock()
	for _, p := range procs {
		p.Wait()
	}
	return time.Since(t0), nil
}

// stopRawGroup is kin's stop of one subtree, raw: SIGTERM to every process
// in dir's groups, up to the grace for them to go, cgroup.kill, until empty.
func stopRawGroup(dir string) error {
	cgroup.Walk(dir, func(d string) error {
		pids, _ := cgroup.Procs(d)
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGTERM)
		}
		return nil
	})
	gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	ev, _ := cgroup.WaitEvents(gctx, dir, func(e cgroup.Events) bool { return !e.Populated })
	cancel()
	if !ev.Populated {
		return nil
	}
	if err := cgroup.Kill(dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cgroup.WaitEmpty(ctx, dir)
}

// BenchmarkRestart2000 kills a daemon that runs 2,000 agents (4 roots and
// their children, as BenchmarkDaemonMemory2000) with SIGKILL, and starts
// another on the same home: first-answer-ms is from just before its exec
// until it first answers a request (Status over the socket), reconciled-ms
// until it says it has checked every agent (Status.Reconciling 0, every one
// re-adopted). The floor, in the same run, is the same daemon started on a
// fresh, empty home (empty-first-answer-ms); x-empty is first-answer-ms ÷
// that. The target: an answer within 1 s.
func BenchmarkRestart2000(b *testing.B) {
	g := newGroupCheck(b)
	profile := unlimitedProfile(b)
	var first, reconciled, empty time.Duration
	for b.Loop() {
		b.StopTimer()
		pids := newPidCheck(b)
		p := startDaemonProc(b, g, pids, profile)
		parents := spawnRoots(b, p.client, pids, "rp")
		reqs := make([]kin.SpawnRequest, memoryAgents-len(parents))
		for i := range reqs {
			reqs[i] = sleepRequest(fmt.Sprintf("r%d", i), parents[i%len(parents)].ID)
		}
		agents, err := spawnAll(p.client, reqs, memoryClients)
		pids.add(agents...)
		if err != nil {
			b.Fatal(err)
		}
		p.client.Close()
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited

		b.StartTimer()
		q, answered := execDaemonProc(b, g, pids, profile, p.home)
		var st *kin.DaemonStatus
		err = poll(120*time.Second, time.Millisecond, 10*time.Millisecond, func() (bool, error) {
			var err error
			st, err = q.client.Status(ctx)
			return err == nil && st.Reconciling == 0, err
		})
		done := time.Since(q.started)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if st.Running != memoryAgents {
			b.Fatalf("after the restart %d agents run, want %d", st.Running, memoryAgents)
		}
		first += answered
		reconciled += done
		if _, err := q.stop(60 * time.Second); err != nil {
			b.Fatal(err)
		}
		if left := pids.leftover(); len(left) > 0 {
			b.Fatalf("processes left after the daemon's shutdown: %v", left)
		}

		e, t := execDaemonProc(b, g, pids, profile, "")
		empty += t
		if _, err := e.stop(60 * time.Second); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(ms(first)/n, "first-answer-ms")
	b.ReportMetric(ms(reconciled)/n, "reconciled-ms")
	b.ReportMetric(ms(empty)/n, "empty-first-answer-ms")
	b.ReportMetric(float64(first)/float64(empty), "x-empty")
}
