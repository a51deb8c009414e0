package daemon_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// Issue 22's scale rows: the spawn, cascade and tree benchmarks on a daemon
// that already holds N live agents, N = 100, 1,000 and 10,000, so that a
// cost per agent that grows with N shows side by side; and once more after
// the daemon has run a churn of 20,000 spawned-and-ended agents (the steady
// state of a long-running daemon: a store and a home full of ended agents,
// and file system churn in the home).
//
//	go test -run='^$' -bench='^BenchmarkScale$' -benchtime=1x -timeout=60m ./internal/daemon/
//	go test -run='^$' -bench='^BenchmarkScaleAfterChurn$' -benchtime=1x -timeout=60m ./internal/daemon/
//
// Per iteration: scaleLatency spawns one at a time (p50, beside the raw
// Start into a fresh cgroup and issue 22's composite floor), a burst of
// 1,000 spawns from 16 clients (agents/s, beside as many raw starts into
// fresh cgroups from 16 goroutines), a 10 x 10 x 10
// owned tree built and its root SIGKILLed (until every process is reaped
// and every descendant recorded cancelled; the raw cgroup.kill of the same
// shape after it, with the daemon still running, which the daemon's own
// SIGCHLD handling weighs on a little), and the whole forest through the
// API (GET /v1/tree: what `kin tree` fetches), once the machine is quiet
// after the burst (waitQuiet), whose cost per agent is reported, and then
// read again (tree-warm-ms: unchanged since the first read), and then
// more times, to treeReads in all (tree-p50-ms: the median of them all).
// kdamond-cpu-% is the share of one core the kernel's DAMON threads took
// over the timed loop (0 where the kernel runs none): on a machine that
// runs DAMON on physical memory it grows with the live processes, and it
// takes that CPU from the daemon and the floors alike.
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run("live="+strconv.Itoa(n), func(b *testing.B) { benchAtScale(b, n, 0) })
	}
}

// BenchmarkScaleAfterChurn is BenchmarkScale's 1,000-agent row after a
// churn of 20,000 agents.
func BenchmarkScaleAfterChurn(b *testing.B) {
	b.Run("live=1000/churn=20000", func(b *testing.B) { benchAtScale(b, 1000, scaleChurn) })
}

const (
	scaleLatency = 100    // sequential spawns timed per iteration
	scaleRoots   = 10     // the live agents are children of a few roots
	scaleChurn   = 20_000 // agents spawned and ended before BenchmarkScaleAfterChurn measures
	treeReads    = 10     // reads of the forest an iteration, the first two included
)

func benchAtScale(b *testing.B, live, churn int) {
	// A quiet live agent holds one of the daemon's descriptors (its
	// socket: issue 22), one that wrote lately its log's pipe too (up to
	// fdsUnparked of them), an ended one none; the batches add 1,000 more
	// at a time, the raw floors their groups.
	raiseOpenFiles(b, live*fdsPerAgent+3*throughputBatch+fdsUnparked+512)
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	d := startBenchDaemon(b, g)
	var lastFill time.Duration // the last fill's spawns, roots aside
	fill := func(prefix string, n int) []*kin.Agent {
		roots := make([]*kin.Agent, 0, scaleRoots)
		for k := range scaleRoots {
			a, err := d.Client.Spawn(ctx, sleepRequest(fmt.Sprintf("%s-root-%d", prefix, k), 0))
			if err != nil {
				b.Fatal(err)
			}
			pids.add(a)
			roots = append(roots, a)
		}
		reqs := make([]kin.SpawnRequest, max(n-scaleRoots, 0))
		for i := range reqs {
			reqs[i] = sleepRequest(fmt.Sprintf("%s-%d", prefix, i), roots[i%len(roots)].ID)
		}
		t0 := time.Now()
		agents, err := spawnAll(d.Client, reqs, throughputClients)
		lastFill = time.Since(t0)
		pids.add(agents...)
		if err != nil {
			b.Fatal(err)
		}
		return roots
	}
	t0 := time.Now()
	for c := 0; c < churn; c += 1000 {
		stopRoots(b, d.Client, fill(fmt.Sprintf("churn%d", c), min(1000, churn-c)))
		// Checked now and forgotten: the check holds a pidfd per agent,
		// which 20,000 agents would not leave the daemon (this process).
		if left := pids.leftover(); len(left) > 0 {
			b.Fatalf("processes left after a churn round: %v", left)
		}
		pids.forgetSeen()
	}
	churned := time.Since(t0)
	t0 = time.Now()
	fill("live", live)
	filled := time.Since(t0)
	b.Logf("%d agents churned in %v, %d live agents spawned in %v (%.0f/s)", churn, churned.Round(time.Millisecond),
		live, filled.Round(time.Millisecond), float64(live)/filled.Seconds())

	cf, rt := newCommitFloor(b), newRoundTripFloor(b)
	var lat, raw, composite []time.Duration
	var cascade, rawCascadeTook, tree, treeWarm, spentBurst, rawBurst time.Duration
	// This process's CPU (the daemon and its clients) over the bursts and
	// the cascades: what a busy machine moves least, per agent.
	var burstCPU, cascadeCPU time.Duration
	treeAgents, bursts := 0, 0
	var treeAll []time.Duration // every read of the forest
	damon0, wall0 := kernelThreadsCPU("kdamond"), time.Now()
	for iter := 0; b.Loop(); iter++ {
		parent := fill(fmt.Sprintf("lat%d", iter), scaleRoots)[0]
		rg := newRawGroup(b, g, "scale")
		for i := range scaleLatency {
			req := sleepRequest(fmt.Sprintf("s%d-%d", iter, i), parent.ID)
			t0 := time.Now()
			a, err := d.Client.Spawn(ctx, req)
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			pids.add(a)
			full, start, err := rg.start("r" + strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			commit, err := cf.commit()
			if err != nil {
				b.Fatal(err)
			}
			trip, err := rt.roundTrip()
			if err != nil {
				b.Fatal(err)
			}
			raw, composite = append(raw, start), append(composite, full+commit+trip)
		}
		if err := rg.close(); err != nil {
			b.Fatal(err)
		}

		// Throughput: a burst of throughputBatch spawns from
		// throughputClients clients, then as many raw starts.
		cpu0 := proctest.CPU()
		burst := fill(fmt.Sprintf("burst%d", iter), throughputBatch)
		burstCPU += proctest.CPU() - cpu0
		spentBurst += lastFill
		rawTook, _, _ := rawStarts(b, g, throughputBatch)
		rawBurst += rawTook
		stopRoots(b, d.Client, burst)
		bursts++

		// The burst's aftermath (its groups removed, the spares made
		// again: seconds of CPU on both cores) is let pass first, so that
		// the row times the tree rather than what else the machine does.
		if settled, err := waitQuiet(30 * time.Second); err != nil {
			b.Logf("the forest read on a busy machine: %v", err)
		} else {
			b.Logf("the machine quiet %v after the burst", settled.Round(time.Millisecond))
		}
		t0 := time.Now()
		forest, err := d.Client.Tree(ctx, 0)
		took1 := time.Since(t0)
		tree += took1
		if err != nil {
			b.Fatal(err)
		}
		treeAgents = countTree(forest)
		// Again, unchanged since: what `kin tree` run twice, or a view
		// that polls the forest, reads (the store's row cache warm).
		t0 = time.Now()
		again, err := d.Client.Tree(ctx, 0)
		treeWarm += time.Since(t0)
		if err != nil || countTree(again) != treeAgents {
			b.Fatalf("the forest read again: %d agents, %v; first %d", countTree(again), err, treeAgents)
		}
		reads := []time.Duration{took1, time.Since(t0)}
		for len(reads) < treeReads {
			t0 := time.Now()
			if _, err := d.Client.Tree(ctx, 0); err != nil {
				b.Fatal(err)
			}
			reads = append(reads, time.Since(t0))
		}
		treeAll = append(treeAll, reads...)
		b.Logf("the forest's %d reads: %v", len(reads), roundAll(reads, 100*time.Microsecond))

		root, desc := spawnTree(b, d.Client, pids, fmt.Sprintf("casc%d", iter))
		treePids := newPidfdCheck(b, append([]*kin.Agent{root}, desc...)...) // this tree's, for the timed check
		rootGroup := filepath.Join(d.cgroupRoot, "a"+root.ID.String())
		// Timed as BenchmarkCascade1000 times it: to every agent recorded
		// and every process gone, followed on the event log (a read of
		// every cancelled agent, as this row did before, grew with the
		// churn's 20,000 ended agents: a quarter of the cascade's CPU).
		stopProfile := cascadeProfile(b, iter)
		t0, cpu0 = time.Now(), proctest.CPU()
		if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		var took, tookCPU time.Duration
		err = awaitCascade(d.Daemon, root, desc, treePids, 120*time.Second, func() {
			took, tookCPU = time.Since(t0), proctest.CPU()-cpu0
		})
		cascade += took
		cascadeCPU += tookCPU
		stopProfile()
		treePids.close()
		if err != nil {
			b.Fatalf("cascade: %v", err)
		}
		// The groups, removed in the background once their processes are
		// reaped: waited for before the floor's cascade, not timed.
		if err := poll(120*time.Second, 50*time.Microsecond, time.Millisecond, func() (bool, error) {
			_, err := os.Stat(rootGroup)
			return errors.Is(err, fs.ErrNotExist), nil
		}); err != nil {
			b.Fatalf("the root's group %s after the cascade: %v", rootGroup, err)
		}
		kill, _, _, err := rawCascade(b, g)
		if err != nil {
			b.Fatal(err)
		}
		rawCascadeTook += kill
	}
	// The machine's DAMON (a kernel thread, kdamond, that samples which
	// pages are in use to page out the cold ones) walks every mapping of
	// each page it samples: the live agents' shared libraries, mapped once
	// a process, cost it more with every agent, on the same two cores.
	damonShare := float64(kernelThreadsCPU("kdamond")-damon0) / float64(time.Since(wall0))
	n := float64(b.N)
	p50, floor := percentile(lat, 0.5), percentile(composite, 0.5)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(p50), "spawn-p50-ms")
	b.ReportMetric(float64(p50)/float64(percentile(raw, 0.5)), "spawn-x-raw")
	b.ReportMetric(float64(p50)/float64(floor), "spawn-x-floor")
	burstN := float64(bursts * (throughputBatch - scaleRoots))
	b.ReportMetric(burstN/spentBurst.Seconds(), "agents/s")
	b.ReportMetric((burstN/spentBurst.Seconds())/(float64(bursts*throughputBatch)/rawBurst.Seconds()), "agents/s-x-raw")
	b.ReportMetric(ms(burstCPU)/float64(bursts*throughputBatch), "spawn-cpu-ms/agent")
	b.ReportMetric(ms(cascadeCPU)/n, "cascade-cpu-ms")
	b.ReportMetric(ms(cascade)/n, "cascade-ms")
	b.ReportMetric(float64(cascade)/float64(rawCascadeTook), "cascade-x-raw")
	b.ReportMetric(ms(tree)/n, "tree-ms")
	b.ReportMetric(float64(tree.Microseconds())/n/float64(max(treeAgents, 1)), "tree-us/agent")
	b.ReportMetric(float64(treeAgents), "tree-agents")
	b.ReportMetric(ms(treeWarm)/n, "tree-warm-ms")
	b.ReportMetric(ms(percentile(treeAll, 0.5)), "tree-p50-ms")
	b.ReportMetric(100*damonShare, "kdamond-cpu-%")
}

func roundAll(ds []time.Duration, to time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(to)
	}
	return out
}

// kernelThreadsCPU is the CPU time the kernel threads whose names begin
// with prefix have spent (0 where there are none).
func kernelThreadsCPU(prefix string) time.Duration {
	ents, _ := os.ReadDir("/proc")
	var sum time.Duration
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && strings.HasPrefix(st.comm, prefix) {
			if cpu, err := procCPU(pid); err == nil {
				sum += cpu
			}
		}
	}
	return sum
}

// rawStarts starts n processes into fresh cgroups from throughputClients
// goroutines (BenchmarkSpawnThroughput's floor) and returns the time taken,
// this process's CPU over it (the starts: mkdir, open, fork) and the
// processes' own (their groups' cpu.stat: the execve of each, which kin's
// agents pay as well).
func rawStarts(b *testing.B, g *groupCheck, n int) (took, cpu, procsCPU time.Duration) {
	b.Helper()
	rg := newRawGroup(b, g, "burst")
	t0, cpu0 := time.Now(), proctest.CPU()
	err := fanOut(n, throughputClients, func(i int) error {
		_, _, err := rg.start("r" + strconv.Itoa(i))
		return err
	})
	took, cpu = time.Since(t0), proctest.CPU()-cpu0
	if err != nil {
		b.Fatal(err)
	}
	procsCPU = cgroupCPU(rg.dir)
	if err := rg.close(); err != nil {
		b.Fatal(err)
	}
	return took, cpu, procsCPU
}

// countTree counts the nodes of a forest.
func countTree(nodes []*kin.TreeNode) int {
	n := 0
	for _, t := range nodes {
		n += 1 + countTree(t.Children)
	}
	return n
}

// raiseOpenFiles raises this process's RLIMIT_NOFILE to at least n (an
// in-process daemon holds a few descriptors per live agent).
func raiseOpenFiles(b *testing.B, n int) {
	b.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= uint64(n) {
		return
	}
	want := lim
	want.Cur = uint64(n)
	if want.Max < want.Cur {
		want.Max = want.Cur
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		b.Skipf("RLIMIT_NOFILE is %d (hard %d) and cannot be raised to %d (%v): raising the hard limit needs CAP_SYS_RESOURCE, which this process lacks; a quiet live agent holds %d of the daemon's descriptors, one whose log is not parked yet %d more (up to %d such), so this limit holds about %d live agents", lim.Cur, lim.Max, n, err, fdsPerAgent, 1, fdsUnparked, (int(lim.Max)-3*throughputBatch-fdsUnparked-512)/fdsPerAgent)
	}
	b.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
}

// waitQuiet waits, at most within, until the machine's CPUs together were
// busy less than a tenth of a 100 ms window (/proc/stat's sum over every
// CPU: every process, the kernel's workers too), and returns how long that
// took.
func waitQuiet(within time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		busy0, total0, err := cpuJiffies()
		if err != nil {
			return 0, err
		}
		time.Sleep(100 * time.Millisecond) // the window measured
		busy1, total1, err := cpuJiffies()
		if err != nil {
			return 0, err
		}
		if total1 > total0 && 10*(busy1-busy0) < total1-total0 {
			return time.Since(t0), nil
		}
		if time.Since(t0) > within {
			return 0, fmt.Errorf("still busy after %v (%d%% in the last 100 ms)", within, 100*(busy1-busy0)/max(total1-total0, 1))
		}
	}
}

// cpuJiffies is /proc/stat's first line: every CPU's time busy (all but
// idle and iowait) and in all, in clock ticks.
func cpuJiffies() (busy, total int64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal: guest and guest_nice
	// are counted in user and nice already.
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %v", line, err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}
