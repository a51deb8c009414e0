package daemon_test

// Benchmarks for the supervisor (issue 3), each measured against a raw
// floor in the same run (STYLE.md convention 12). docs/PERFORMANCE.md,
// section "Supervisor", has the commands, the targets and the numbers.
//
// Every iteration is a batch (200 timed spawns, 1,000 spawns, one cascade
// of 1,111 agents, one daemon with 2,000 agents), so that one -benchtime
// suits them all: run them with -benchtime=3x. They start real processes
// (/bin/sleep 3600) in real cgroups and clean up after themselves even when
// they fail: daemons closed, processes killed and reaped, groups removed.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/runner"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

const (
	spawnParents      = 4    // the spawned agents are children of a few roots
	latencyBatch      = 200  // sequential spawns timed per iteration
	throughputBatch   = 1000 // spawns per iteration
	throughputClients = 16
	cascadeFanout     = 10 // a root, then 10 x 10 x 10 below it: 1,110 descendants
	memoryAgents      = 2000
	memoryClients     = 16
)

// sleepArgv is every benchmark agent's process: long-running, so exits add
// no work while it is measured.
var sleepArgv = []string{"/bin/sleep", "3600"}

// BenchmarkSpawnLatency times client.Spawn over the Unix socket (it returns
// once the process runs and its pid is recorded), one call at a time, for
// children of spawnParents roots, and, interleaved with it, the floors: a
// plain os/exec Start of the same program into a fresh cgroup (mkdir and
// open untimed, as the floor; raw-full-p50 includes them), and issue 22's
// composite floor (floor-p50-ms: that Start with its mkdir and open, one
// durable SQLite commit of one row, one HTTP round trip on a Unix socket,
// summed per spawn; x-floor-p50 is the target's ratio). It also times,
// in the same loop, what the home's file system charges for the two files
// every spawn creates there, the agent's socket and its log (home-inodes).
func BenchmarkSpawnLatency(b *testing.B) {
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	d := startBenchDaemon(b, g)
	cf, rt := newCommitFloor(b), newRoundTripFloor(b)
	var lat, raw, rawFull, inodes, composite []time.Duration
	for iter := 0; b.Loop(); iter++ {
		parents := spawnRoots(b, d.Client, pids, fmt.Sprintf("lp%d", iter))
		rg := newRawGroup(b, g, "lat")
		for i := range latencyBatch {
			req := sleepRequest(fmt.Sprintf("l%d-%d", iter, i), parents[i%len(parents)].ID)
			t0 := time.Now()
			a, err := d.Client.Spawn(ctx, req)
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatalf("spawn %s: %v", req.Name, err)
			}
			pids.add(a)
			full, start, err := rg.start("r" + strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			raw, rawFull = append(raw, start), append(rawFull, full)
			commit, err := cf.commit()
			if err != nil {
				b.Fatal(err)
			}
			trip, err := rt.roundTrip()
			if err != nil {
				b.Fatal(err)
			}
			composite = append(composite, full+commit+trip)
			took, err := homeInodes(d.Home, fmt.Sprintf("bench-%d-%d", iter, i))
			if err != nil {
				b.Fatal(err)
			}
			inodes = append(inodes, took)
		}
		stopRoots(b, d.Client, parents)
		if err := rg.close(); err != nil {
			b.Fatal(err)
		}
	}
	p50, rawP50 := percentile(lat, 0.5), percentile(raw, 0.5)
	b.ReportMetric(0, "ns/op") // an iteration is a batch: the percentiles say it
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.9)), "p90-ms")
	b.ReportMetric(ms(rawP50), "raw-p50-ms")
	b.ReportMetric(ms(percentile(raw, 0.9)), "raw-p90-ms")
	b.ReportMetric(ms(percentile(rawFull, 0.5)), "raw-full-p50-ms")
	b.ReportMetric(ms(percentile(inodes, 0.5)), "home-inodes-p50-ms")
	b.ReportMetric(float64(p50)/float64(rawP50), "x-raw-p50")
	// Issue 22's floor: what a recorded spawn cannot avoid, each once: a
	// Start into a fresh cgroup (its mkdir and open included), one durable
	// commit of one row, one HTTP round trip on a Unix socket.
	floorP50 := percentile(composite, 0.5)
	b.ReportMetric(ms(floorP50), "floor-p50-ms")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor-p50")
}

// homeInodes times what the home's file system charges for an agent's two
// files: creating a log file in <home>/logs and binding a Unix socket in
// <home>/ctx/agent, both named name. It removes them, untimed.
func homeInodes(home, name string) (time.Duration, error) {
	logPath := filepath.Join(home, "logs", name+".log")
	sockPath := filepath.Join(home, "ctx", "agent", name+".sock")
	t0 := time.Now()
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	ln, err := net.Listen("unix", sockPath)
	took := time.Since(t0)
	f.Close()
	os.Remove(logPath)
	if err != nil {
		return 0, err
	}
	ln.Close() // unlinks the socket
	return took, nil
}

// BenchmarkSpawnThroughput spawns throughputBatch agents per iteration from
// throughputClients goroutines sharing one client on the Unix socket, then,
// as the floor, starts as many processes from as many goroutines with
// os/exec, each into a fresh cgroup (mkdir, open, clone3 into it: timed).
func BenchmarkSpawnThroughput(b *testing.B) { benchSpawnThroughput(b) }

// benchSpawnThroughput is BenchmarkSpawnThroughput on a daemon started
// with opts.
func benchSpawnThroughput(b *testing.B, opts ...kintest.Option) {
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	d := startBenchDaemon(b, g, opts...)
	var spent, rawSpent, cpu, agentsCPU, rawCPU, rawAgentsCPU time.Duration
	n := 0
	inodes, inodesErr := proctest.CountInodes()
	if inodesErr == nil {
		defer inodes.Close()
	}
	var spawnNew, spawnFreed, lifeNew, lifeFreed int64
	for iter := 0; b.Loop(); iter++ {
		parents := spawnRoots(b, d.Client, pids, fmt.Sprintf("tp%d", iter))
		reqs := make([]kin.SpawnRequest, throughputBatch)
		for i := range reqs {
			reqs[i] = sleepRequest(fmt.Sprintf("t%d-%d", iter, i), parents[i%len(parents)].ID)
		}
		stopProfile := benchProfile(b, "KIN_TEST_SPAWN_CPUPROFILE", "KIN_TEST_SPAWN_TRACE", iter)
		var new0, freed0 int64
		if inodes != nil {
			new0, freed0 = inodes.Read()
		}
		t0, cpu0, acpu0 := time.Now(), proctest.CPU(), cgroupCPU(d.cgroupRoot)
		agents, err := spawnAll(d.Client, reqs, throughputClients)
		spent += time.Since(t0)
		cpu += proctest.CPU() - cpu0
		agentsCPU += cgroupCPU(d.cgroupRoot) - acpu0
		if inodes != nil {
			new1, freed1 := inodes.Read()
			spawnNew, spawnFreed = spawnNew+new1-new0, spawnFreed+freed1-freed0
		}
		stopProfile()
		pids.add(agents...)
		if err != nil {
			b.Fatal(err)
		}
		n += len(reqs)

		took, startsCPU, procsCPU := rawStarts(b, g, throughputBatch)
		rawSpent, rawCPU, rawAgentsCPU = rawSpent+took, rawCPU+startsCPU, rawAgentsCPU+procsCPU
		stopRoots(b, d.Client, parents)
		// The agents' whole life, until the tree holds their end: the
		// next iteration's spawns must not share the cores with the tree's
		// writer recording this stop (the raw floor has nothing to record).
		awaitRecorded(b, d.Client, parents)
		if inodes != nil {
			new1, freed1 := inodes.Read()
			lifeNew, lifeFreed = lifeNew+new1-new0, lifeFreed+freed1-freed0
		}
	}
	rate, rawRate := float64(n)/spent.Seconds(), float64(n)/rawSpent.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rate, "agents/s")
	b.ReportMetric(rawRate, "raw-agents/s")
	b.ReportMetric(rate/rawRate, "x-raw")
	// This process's CPU (the daemon and its 16 clients) over the spawns,
	// per agent: on a shared machine it moves much less than the rate.
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(n), "cpu-ms/agent")
	// The agents' own CPU over the same spawns (their groups' cpu.stat,
	// which cgroup2 keeps without the cpu controller): a shim's start
	// (its exec and Go runtime), or the agent's execve alone.
	b.ReportMetric(float64(agentsCPU)/float64(time.Millisecond)/float64(n), "agents-cpu-ms/agent")
	// The raw floor's the same way: this process's CPU over its starts,
	// and its processes' own. The processes' are level with the agents',
	// so the gap between the rates is cpu-ms/agent against raw-cpu-ms/agent.
	b.ReportMetric(float64(rawCPU)/float64(time.Millisecond)/float64(n), "raw-cpu-ms/agent")
	b.ReportMetric(float64(rawAgentsCPU)/float64(time.Millisecond)/float64(n), "raw-agents-cpu-ms/agent")
	// The ext4 inodes this process (daemon, clients, agents) allocated and
	// freed per agent: over the spawns, and over the whole life (spawn,
	// stop, the tree's record of the end; the raw floor's groups are on
	// cgroupfs and not counted). Each allocation on this journal-less ext4
	// scans the block group's recently freed inodes.
	if inodes != nil {
		b.ReportMetric(float64(spawnNew)/float64(n), "spawn-inodes-new/agent")
		b.ReportMetric(float64(spawnFreed)/float64(n), "spawn-inodes-freed/agent")
		b.ReportMetric(float64(lifeNew)/float64(n), "life-inodes-new/agent")
		b.ReportMetric(float64(lifeFreed)/float64(n), "life-inodes-freed/agent")
	} else {
		b.Logf("no inode figures: %v", inodesErr)
	}
}

// awaitRecorded waits until each of roots has ended and the agent
// filesystem holds every event up to its end (client.Wait).
func awaitRecorded(b *testing.B, svc kin.Service, roots []*kin.Agent) {
	b.Helper()
	for _, r := range roots {
		if _, err := svc.Wait(ctx, kin.WaitRequest{ID: r.ID, Timeout: kin.Duration(time.Minute)}); err != nil {
			b.Fatalf("wait %s: %v", r.Name, err)
		}
	}
}

// cgroupCPU is usage_usec of dir's cpu.stat (0 where unreadable).
func cgroupCPU(dir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond
		}
	}
	return 0
}

// BenchmarkCascade1000 builds a root agent with 10 x 10 x 10 owned
// descendants (1,111 agents, grace 0), SIGKILLs the root's process and times
// until every process of the tree is reaped (no /proc entry left: neither
// running nor a zombie) and every descendant is recorded cancelled (ms;
// seen on the event log, the rows read back after the clock stops:
// awaitCascade);
// groups-ms is until the daemon has also removed the tree's groups (the
// root's is removed last). The floor, in the same iteration: 1,110 nested
// cgroups each with one sleeping process, one cgroup.kill at the top, until
// cgroup.events says populated 0 and every process is reaped (raw-ms;
// x-raw is ms ÷ raw-ms); raw+rmdir-ms adds removing the groups (x-raw+rmdir
// is groups-ms ÷ raw+rmdir-ms). cpu-ms and raw-cpu-ms are this
// process's CPU time over each (the daemon runs in it), which a busy
// machine moves much less than wall time. Each iteration runs its own daemon,
// closed before the floor runs, so that its SIGCHLD handler does not weigh
// on the floor; building the trees is not timed.
func BenchmarkCascade1000(b *testing.B) {
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	var spent, groups, raw, rawRm, cpu, rawCPU time.Duration
	for iter := 0; b.Loop(); iter++ {
		b.StopTimer()
		d := startBenchDaemon(b, g)
		root, tree := spawnTree(b, d.Client, pids, fmt.Sprintf("c%d", iter))
		treePids := newPidfdCheck(b, append([]*kin.Agent{root}, tree...)...) // this tree's, for the timed check
		rootGroup := filepath.Join(d.cgroupRoot, "a"+root.ID.String())
		if _, err := os.Stat(rootGroup); err != nil {
			b.Fatalf("the root's group: %v", err)
		}

		stopProfile := cascadeProfile(b, iter)
		b.StartTimer()
		cpu0 := proctest.CPU()
		t0 := time.Now()
		if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		var took, tookCPU time.Duration
		err := awaitCascade(d.Daemon, root, tree, treePids, 60*time.Second, func() {
			took, tookCPU = time.Since(t0), proctest.CPU()-cpu0
		})
		cpu += tookCPU
		b.StopTimer()
		stopProfile()
		treePids.close()
		if err != nil {
			b.Fatalf("cascade: %v", err)
		}
		spent += took
		// The groups, removed in the background once their processes are
		// reaped: timed from the kill too, but apart.
		if err := poll(60*time.Second, 50*time.Microsecond, time.Millisecond, func() (bool, error) {
			_, err := os.Stat(rootGroup)
			return errors.Is(err, fs.ErrNotExist), nil
		}); err != nil {
			b.Fatalf("the root's group %s after the cascade: %v", rootGroup, err)
		}
		groups += time.Since(t0)
		if left := pids.leftover(); len(left) > 0 {
			b.Fatalf("processes left after the cascade: %v", left)
		}
		d.Client.Close()
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}

		kill, rm, killCPU, err := rawCascade(b, g)
		if err != nil {
			b.Fatal(err)
		}
		rawCPU += killCPU
		raw += kill
		rawRm += kill + rm
		b.StartTimer()
	}
	b.ReportMetric(ms(spent)/float64(b.N), "ms")
	b.ReportMetric(ms(raw)/float64(b.N), "raw-ms")
	b.ReportMetric(ms(rawRm)/float64(b.N), "raw+rmdir-ms")
	b.ReportMetric(float64(spent)/float64(raw), "x-raw")
	b.ReportMetric(ms(groups)/float64(b.N), "groups-ms")
	b.ReportMetric(float64(groups)/float64(rawRm), "x-raw+rmdir")
	// CPU time of this process (the daemon, and the poll) over the same
	// window, and the floor's: on a busy machine the wall-clock ratio
	// follows the load, the CPU one much less.
	b.ReportMetric(ms(cpu)/float64(b.N), "cpu-ms")
	b.ReportMetric(ms(rawCPU)/float64(b.N), "raw-cpu-ms")
}

// cascadeProfile starts a CPU profile of this process (the daemon runs
// in it) for the timed part of BenchmarkCascade1000's iteration iter when
// $KIN_TEST_CASCADE_CPUPROFILE is set (written to that path and .<iter>):
// where the daemon's CPU of a cascade goes, without the tree's building.
// With $KIN_TEST_CASCADE_TRACE it writes an execution trace likewise
// (go tool trace): where its wall time goes, kill, reap, record and
// commit apart. It returns what stops it.
func cascadeProfile(b *testing.B, iter int) (stop func()) {
	return benchProfile(b, "KIN_TEST_CASCADE_CPUPROFILE", "KIN_TEST_CASCADE_TRACE", iter)
}

// benchProfile starts a CPU profile of this process when $cpuEnv names a
// path (written to that path and .<iter>), and an execution trace when
// $traceEnv does, for the timed part of a benchmark's iteration iter:
// cascadeProfile's, and BenchmarkSpawnThroughput's spawns
// ($KIN_TEST_SPAWN_CPUPROFILE, $KIN_TEST_SPAWN_TRACE). It returns what
// stops them.
func benchProfile(b *testing.B, cpuEnv, traceEnv string, iter int) (stop func()) {
	var stops []func()
	if path := os.Getenv(cpuEnv); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, iter))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			b.Fatal(err)
		}
		stops = append(stops, func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	if path := os.Getenv(traceEnv); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, iter))
		if err != nil {
			b.Fatal(err)
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			b.Fatal(err)
		}
		stops = append(stops, func() {
			trace.Stop()
			f.Close()
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// BenchmarkDaemonMemory2000 runs the daemon as a process of its own (the
// test binary, see TestMain), spawns 2,000 sleeping agents into it over its
// socket, and reads its VmRSS, VmHWM, Threads and open descriptors from
// /proc before and after. It then stops the daemon with SIGTERM (a clean
// shutdown stops every agent) and checks that no process and no group is
// left. The figures are the largest over the iterations; KiB/agent is
// (rss - base-rss) / agents, and fds/agent likewise.
func BenchmarkDaemonMemory2000(b *testing.B) { benchDaemonMemory(b, memoryAgents) }

// BenchmarkDaemonMemory4000 and BenchmarkDaemonMemory10000 are
// BenchmarkDaemonMemory2000 with more agents. A quiet agent holds one
// descriptor in the daemon (fds/agent, fdsPerAgent): 10,000 fit in the
// 20,000 a container commonly allows; where the limit is lower and the
// daemon may not raise it (raiseOpenFiles), the benchmark says so and
// skips.
func BenchmarkDaemonMemory4000(b *testing.B)  { benchDaemonMemory(b, 4000) }
func BenchmarkDaemonMemory10000(b *testing.B) { benchDaemonMemory(b, 10000) }

// fdsPerAgent is what BenchmarkDaemonMemory2000 measures (fds/agent) of a
// quiet agent: its socket (issue 22: no pidfd; its log's pipe held without
// a descriptor once parked, its log file open only while output is copied).
// fdsUnparked bounds the agents whose log pipe is not parked yet (those
// that wrote within the last sweep or two of agentlog's poller, a few
// seconds of spawns), which hold their pipe's read end too; where io_uring
// is refused every agent does.
const (
	fdsPerAgent = 1
	fdsUnparked = 3000
)

func benchDaemonMemory(b *testing.B, agents int) {
	g := newGroupCheck(b)
	profile := unlimitedProfile(b)
	var base, loaded procStatus
	var shutdown time.Duration
	for iter := 0; b.Loop(); iter++ {
		pids := newPidCheck(b)
		p := startDaemonProc(b, g, pids, profile)
		before, err := readProcStatus(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		saveSmaps(b, p.pid, "before")
		if need := before.fds + agents*fdsPerAgent + min(agents, fdsUnparked); before.nofile < need {
			b.Skipf("the daemon may open %d descriptors (RLIMIT_NOFILE), and %d agents need about %d (%d each, and one more for each of up to %d agents whose log is not parked yet): that holds about %d agents; it could not raise its limit (its log says why: without CAP_SYS_RESOURCE the hard limit stays)", before.nofile, agents, need, fdsPerAgent, fdsUnparked, (before.nofile-before.fds-fdsUnparked)/fdsPerAgent)
		}
		parents := spawnRoots(b, p.client, pids, "mp")
		reqs := make([]kin.SpawnRequest, agents-len(parents))
		for i := range reqs {
			reqs[i] = sleepRequest(fmt.Sprintf("m%d", i), parents[i%len(parents)].ID)
		}
		spawned, err := spawnAll(p.client, reqs, memoryClients)
		pids.add(spawned...)
		if err != nil {
			b.Fatal(err)
		}
		st, err := p.client.Status(ctx)
		if err != nil || st.Running != agents {
			b.Fatalf("daemon status after the spawns: %+v, %v", st, err)
		}
		after, err := readProcStatus(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		saveSmaps(b, p.pid, "loaded")
		base, loaded = base.max(before), loaded.max(after)

		took, err := p.stop(120 * time.Second)
		if err != nil {
			b.Fatal(err)
		}
		shutdown = max(shutdown, took)
		if left := pids.leftover(); len(left) > 0 {
			b.Fatalf("processes left after the daemon's shutdown: %v", left)
		}
		if _, err := os.Stat(p.cgroupRoot); !errors.Is(err, fs.ErrNotExist) {
			b.Fatalf("the daemon's cgroup %s is left after its shutdown (%v)", p.cgroupRoot, err)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(loaded.rssKB)/1024, "rss-MiB")
	b.ReportMetric(float64(loaded.hwmKB)/1024, "hwm-MiB")
	b.ReportMetric(float64(loaded.threads), "threads")
	b.ReportMetric(float64(base.rssKB)/1024, "base-rss-MiB")
	b.ReportMetric(float64(base.threads), "base-threads")
	b.ReportMetric(float64(loaded.rssKB-base.rssKB)/float64(agents), "KiB/agent")
	b.ReportMetric(float64(loaded.fds-base.fds)/float64(agents), "fds/agent")
	b.ReportMetric(float64(loaded.anonKB)/1024, "anon-MiB")
	b.ReportMetric(float64(base.anonKB)/1024, "base-anon-MiB")
	b.ReportMetric(ms(shutdown), "shutdown-ms")
}

// saveSmaps copies the daemon's /proc/<pid>/smaps to
// $KIN_TEST_MEMORY_SMAPS.<when>.<pid> when that is set: where its memory
// is (the binary's pages, the heap, the stacks, SQLite's), before any agent
// and with them all.
func saveSmaps(b *testing.B, pid int, when string) {
	prefix := os.Getenv("KIN_TEST_MEMORY_SMAPS")
	if prefix == "" {
		return
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(fmt.Sprintf("%s.%s.%d", prefix, when, pid), data, 0o600); err != nil {
		b.Fatal(err)
	}
}

// TestStopClosesManySockets stops a root with 150 children: enough for the
// cancellation to close their sockets several at a time (closeSockets),
// which otherwise only the benchmarks' trees reach (run it with -race).
// Every socket file is gone and every process ended.
func TestStopClosesManySockets(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "many.json")
	if err := os.WriteFile(prof, []byte(`{"name":"many","max_generation_depth":3,"max_children":0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	root, err := d.Client.Spawn(ctx, sleepRequest("many", 0))
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]kin.SpawnRequest, 150)
	for i := range reqs {
		reqs[i] = sleepRequest(fmt.Sprintf("many-%d", i), root.ID)
	}
	kids, err := spawnAll(d.Client, reqs, 8)
	t.Cleanup(func() {
		for _, k := range kids {
			if k != nil && procLeft(k.PID) != "" {
				t.Errorf("process %d of %s left behind", k.PID, k.Name)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sockets := filepath.Join(d.Home, "ctx", "agent", "*.sock")
	if ents, _ := filepath.Glob(sockets); len(ents) != len(kids)+1 {
		t.Fatalf("%d agent sockets, want %d", len(ents), len(kids)+1)
	}
	stopped, err := d.Client.Stop(ctx, kin.StopRequest{ID: root.ID})
	if err != nil || len(stopped) != len(kids)+1 {
		t.Fatalf("stop = %d agents, %v", len(stopped), err)
	}
	if ents, _ := filepath.Glob(sockets); len(ents) != 0 {
		t.Fatalf("%d agent sockets left after the stop, e.g. %s", len(ents), ents[0])
	}
	for _, k := range append(kids, root) {
		if procLeft(k.PID) != "" {
			t.Fatalf("%s (pid %d) survived the stop", k.Name, k.PID)
		}
	}
}

// sleepRequest is a spawn of sleepArgv, killed at once when stopped.
func sleepRequest(name string, parent kin.AgentID) kin.SpawnRequest {
	grace := kin.Duration(0)
	req := kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent},
		Command:         sleepArgv,
		Grace:           &grace,
	}
	if parent == 0 {
		req.Responsible = "bench@example.org"
	}
	return req
}

// spawnAll spawns reqs through svc from clients goroutines. It returns the
// agents in the order of reqs (nil where a spawn failed or did not run) and
// the first error.
func spawnAll(svc kin.Service, reqs []kin.SpawnRequest, clients int) ([]*kin.Agent, error) {
	out := make([]*kin.Agent, len(reqs))
	err := fanOut(len(reqs), clients, func(i int) error {
		a, err := svc.Spawn(ctx, reqs[i])
		if err != nil {
			return fmt.Errorf("spawn %s: %w", reqs[i].Name, err)
		}
		out[i] = a
		return nil
	})
	return out, err
}

// fanOut calls op for i in [0, n) from clients goroutines, each taking
// the next i, until all are done or one fails, and returns the first
// error (with its i).
func fanOut(n, clients int, op func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && first.Load() == nil; i = int(next.Add(1) - 1) {
				if err := op(i); err != nil {
					err = fmt.Errorf("agent %d: %w", i, err)
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// spawnRoots spawns spawnParents sleeping roots named prefix-<k>.
func spawnRoots(b *testing.B, svc kin.Service, pids *pidCheck, prefix string) []*kin.Agent {
	b.Helper()
	var out []*kin.Agent
	for k := range spawnParents {
		a, err := svc.Spawn(ctx, sleepRequest(fmt.Sprintf("%s-%d", prefix, k), 0))
		if err != nil {
			b.Fatal(err)
		}
		pids.add(a)
		out = append(out, a)
	}
	return out
}

// stopRoots stops the roots and with them their owned subtrees.
func stopRoots(b *testing.B, svc kin.Service, roots []*kin.Agent) {
	b.Helper()
	zero := kin.Duration(0)
	for _, r := range roots {
		if _, err := svc.Stop(ctx, kin.StopRequest{ID: r.ID, Grace: &zero}); err != nil {
			b.Fatalf("stop %s: %v", r.Name, err)
		}
	}
}

// spawnTree spawns a sleeping root and 10 x 10 x 10 owned descendants below
// it, level by level, from 8 clients. tree is the descendants, the leaves last.
func spawnTree(b *testing.B, svc kin.Service, pids *pidCheck, name string) (root *kin.Agent, tree []*kin.Agent) {
	b.Helper()
	root, err := svc.Spawn(ctx, sleepRequest(name, 0))
	if err != nil {
		b.Fatal(err)
	}
	pids.add(root)
	level := []*kin.Agent{root}
	for range 3 {
		var reqs []kin.SpawnRequest
		for _, p := range level {
			for k := range cascadeFanout {
				reqs = append(reqs, sleepRequest(fmt.Sprintf("%s-%d", p.Name, k), p.ID))
			}
		}
		level, err = spawnAll(svc, reqs, 8)
		pids.add(level...)
		if err != nil {
			b.Fatal(err)
		}
		tree = append(tree, level...)
	}
	return root, tree
}

// awaitCascade waits, within, until the root's end and every descendant's
// cancellation are recorded (cascadeRecorded) and every process of pids is
// gone, and calls seen at that moment (the benchmark's clock stops there),
// at a small cost in CPU beside the cascade it times: it follows the event
// log for the root's agent.exited and each descendant's agent.child.cancel,
// each appended in the transaction that records that agent's end (a wait
// woken by the store's commits, a read of the new events of those two
// types each), checks that no process is left (a look in /proc each), and
// calls seen. Only then does it read the agents' rows back
// (cascadeRecorded), out of the time. Should that check fail, or a process
// be left, it polls, as the benchmark did before (a read of every
// cancelled agent and every process, every millisecond at most), and
// calls seen again when that holds.
func awaitCascade(svc kin.Service, root *kin.Agent, tree []*kin.Agent, pids leftoverCheck, within time.Duration, seen func()) error {
	deadline := time.Now().Add(within)
	fctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	want := make(map[kin.AgentID]bool, len(tree))
	for _, a := range tree {
		want[a.ID] = true
	}
	rootEnded := false
	f := kin.EventFilter{Types: []string{kin.EventAgentExited, kin.EventChildCancel}}
	errAll := errors.New("all recorded")
	err := svc.FollowEvents(fctx, f, func(e kin.Event) error {
		switch {
		case e.Type == kin.EventAgentExited && e.Agent == root.ID:
			rootEnded = true
		case e.Type == kin.EventChildCancel:
			delete(want, e.Agent)
		}
		if rootEnded && len(want) == 0 {
			return errAll
		}
		return nil
	})
	if !errors.Is(err, errAll) {
		return fmt.Errorf("following the cascade's record (%d agents' left): %w", len(want), err)
	}
	if len(pids.leftover()) == 0 {
		seen()
		ok, err := cascadeRecorded(svc, root, tree)
		if ok || err != nil {
			return err
		}
	}
	err = poll(time.Until(deadline), 50*time.Microsecond, time.Millisecond, func() (bool, error) {
		if ok, err := cascadeRecorded(svc, root, tree); !ok || err != nil {
			return false, err
		}
		return len(pids.leftover()) == 0, nil
	})
	if err == nil {
		seen()
	}
	return err
}

// cascadeRecorded reports whether the root's end and every descendant's
// cancellation are recorded.
func cascadeRecorded(svc kin.Service, root *kin.Agent, tree []*kin.Agent) (bool, error) {
	r, err := svc.Agent(ctx, root.ID)
	if err != nil || r.EndedAt.IsZero() {
		return false, err
	}
	cancelled, err := svc.Agents(ctx, kin.AgentFilter{State: kin.StateCancelled})
	if err != nil {
		return false, err
	}
	ended := make(map[kin.AgentID]bool, len(cancelled))
	for _, a := range cancelled {
		if !a.EndedAt.IsZero() {
			ended[a.ID] = true
		}
	}
	for _, a := range tree {
		if !ended[a.ID] {
			return false, nil
		}
	}
	return true, nil
}

// poll calls cond with a backoff from minWait to maxWait until it is true,
// fails, or within has passed.
func poll(within, minWait, maxWait time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for wait := minWait; ; wait = min(2*wait, maxWait) {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", within)
		}
		time.Sleep(wait)
	}
}

// rawCascade builds the floor's tree, 1,110 nested groups each with a
// sleeping process, in a group of its own, then times one cgroup.kill at
// the top until populated 0 and every process reaped (kill), and removing
// the groups (rm).
func rawCascade(b *testing.B, g *groupCheck) (kill, rm, killCPU time.Duration, err error) {
	b.Helper()
	rg := newRawGroup(b, g, "cascade")
	var build func(dir string, depth int) error
	build = func(dir string, depth int) error {
		if depth == 3 {
			return nil
		}
		for k := range cascadeFanout {
			sub := filepath.Join(dir, "g"+strconv.Itoa(k))
			if _, _, err := rg.start(sub); err != nil {
				return err
			}
			if err := build(sub, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := build("", 0); err != nil {
		return 0, 0, 0, err
	}
	if n := len(rg.procs); n != cascadeFanout*(1+cascadeFanout*(1+cascadeFanout)) {
		return 0, 0, 0, fmt.Errorf("raw tree has %d processes", n)
	}
	cpu0 := proctest.CPU()
	t0 := time.Now()
	if err := rg.killAndReap(); err != nil {
		return 0, 0, 0, err
	}
	kill = time.Since(t0)
	killCPU = proctest.CPU() - cpu0
	t0 = time.Now()
	if err := rg.close(); err != nil {
		return 0, 0, 0, err
	}
	return kill, time.Since(t0), killCPU, nil
}

// rawGroup is a kin-named cgroup of the benchmark's own, outside every
// daemon's root, holding the floors' processes.
type rawGroup struct {
	dir    string
	mu     sync.Mutex
	procs  []*os.Process
	closed bool
}

var rawSeq atomic.Int64

func newRawGroup(b *testing.B, g *groupCheck, tag string) *rawGroup {
	b.Helper()
	dir := filepath.Join(g.mount, fmt.Sprintf("kin-bench-%d-%s-%d", os.Getpid(), tag, rawSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Skipf("cgroup2 not writable: %v", err)
	}
	g.own(dir)
	rg := &rawGroup{dir: dir}
	b.Cleanup(func() {
		if err := rg.close(); err != nil {
			b.Error(err)
		}
	})
	return rg
}

// start makes the group sub (a path below the raw group), opens it, and
// starts sleepArgv into it (clone3 CLONE_INTO_CGROUP), its stdio
// /dev/null. full is the whole, start the fork and exec alone.
func (rg *rawGroup) start(sub string) (full, start time.Duration, err error) {
	return rg.startArgv(sub, sleepArgv)
}

// startArgv is start with another program.
func (rg *rawGroup) startArgv(sub string, argv []string) (full, start time.Duration, err error) {
	t0 := time.Now()
	dir := filepath.Join(rg.dir, sub)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, 0, err
	}
	fd, err := cgroup.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	// A fork from a descriptor table of its own, as kin's (the benchmark's
	// process holds the daemon's descriptors, a few per live agent, which a
	// fork from the shared table would copy: a floor that grew with the
	// live agents). Not os/exec: it would keep a pidfd in that table.
	t1 := time.Now()
	pid, err := sandbox.ForkFromOwnTable([]int{fd, int(rawNull().Fd())}, func(fds []int) (int, error) {
		null := uintptr(fds[1])
		return syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: rawEnv(), Files: []uintptr{null, null, null},
			Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fds[0]}})
	})
	start = time.Since(t1)
	syscall.Close(fd)
	full = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		return 0, 0, err
	}
	rg.mu.Lock()
	rg.procs = append(rg.procs, p)
	rg.mu.Unlock()
	return full, start, nil
}

// rawEnv is the floors' processes' environment: what kin's agents get
// from the daemon's own (runner.InheritedEnv) and a PATH, so that a floor's
// process does the work kin's does (a sleep with LANG set maps 13 locale
// files, and its exit takes about half as long again: session 13 of issue 22).
var rawEnv = sync.OnceValue(func() []string {
	return append(runner.InheritedEnv(), "PATH="+os.Getenv("PATH"))
})

// rawNull is /dev/null, the floors' processes' stdio, opened at its first
// use: the test binary is also the attack tests' agent, whose descriptors
// those tests list (an init's open would be taken for one inherited).
var rawNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		panic(err)
	}
	return f
})

// killAndReap kills everything in the group with one cgroup.kill, waits
// until cgroup.events says populated 0, and reaps every process.
func (rg *rawGroup) killAndReap() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cgroup.Kill(rg.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := cgroup.WaitEmpty(ctx, rg.dir); err != nil {
		return fmt.Errorf("raw group %s: %w", rg.dir, err)
	}
	rg.mu.Lock()
	procs := rg.procs
	rg.procs = nil
	rg.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if _, err := p.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close kills and reaps what runs in the group and removes it; calling it
// again does nothing.
func (rg *rawGroup) close() error {
	rg.mu.Lock()
	closed := rg.closed
	rg.closed = true
	rg.mu.Unlock()
	if closed {
		return nil
	}
	err := rg.killAndReap()
	return errors.Join(err, cgroup.RemoveTree(rg.dir))
}

// benchDaemon is an in-process daemon with the children limit lifted.
type benchDaemon struct {
	*kintest.Daemon
	cgroupRoot string
}

// startBenchDaemon starts a benchDaemon with opts besides.
func startBenchDaemon(b *testing.B, g *groupCheck, opts ...kintest.Option) *benchDaemon {
	b.Helper()
	d := kintest.StartDaemon(b, append([]kintest.Option{kintest.WithProfile(unlimitedProfile(b))}, opts...)...)
	st, err := d.Daemon.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st.Containment != "cgroup2" {
		b.Skipf("the daemon runs with %s containment (%s): these benchmarks need cgroup2", st.Containment, st.ContainmentReason)
	}
	g.own(st.CgroupRoot)
	return &benchDaemon{Daemon: d, cgroupRoot: st.CgroupRoot}
}

// daemonProc is a daemon running as a process of its own.
type daemonProc struct {
	cmd        *exec.Cmd
	pid        int
	home       string
	client     *client.Client
	cgroupRoot string
	started    time.Time     // just before the exec
	exited     chan struct{} // closed once cmd.Wait returned
	waitErr    error
	cpuFile    string // where it writes its own CPU time as it exits (KIN_TEST_DAEMON_CPU)
}

// startDaemonProc runs the test binary as a daemon (see TestMain) on a
// fresh home with the given profile, and waits until it answers.
func startDaemonProc(b *testing.B, g *groupCheck, pids *pidCheck, profile string) *daemonProc {
	b.Helper()
	p, _ := execDaemonProc(b, g, pids, profile, kintest.TempHome(b))
	return p
}

// execDaemonProc runs the test binary as a daemon on home with the given
// profile, waits until it answers, and says how long that took from just
// before the exec.
func execDaemonProc(b *testing.B, g *groupCheck, pids *pidCheck, profile, home string) (*daemonProc, time.Duration) {
	b.Helper()
	if home == "" {
		home = kintest.TempHome(b)
	}
	t0 := time.Now()
	cpuFile := filepath.Join(b.TempDir(), "cpu")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = daemonProcessEnv(b, home, "KIN_TEST_DAEMON_PROFILE="+profile, "KIN_TEST_DAEMON_CPU="+cpuFile)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, pid: cmd.Process.Pid, home: home, exited: make(chan struct{}), started: t0, cpuFile: cpuFile}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	// Its group is where defaultCgroupName puts it; Status confirms it
	// below, but a daemon that never answers must be cleaned up too.
	if m, err := cgroup.FindMount(); err == nil {
		abs, _ := filepath.Abs(home)
		sum := sha256.Sum256([]byte(abs))
		p.cgroupRoot = filepath.Join(m.Dir, "kin-"+hex.EncodeToString(sum[:6]))
	}
	b.Cleanup(func() { p.cleanup(b, pids) })
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		b.Fatal(err)
	}
	p.client = c
	var st *kin.DaemonStatus
	err = poll(20*time.Second, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("the daemon process exited: %v", p.waitErr)
		default:
		}
		var serr error
		st, serr = c.Status(ctx)
		return serr == nil, nil
	})
	answered := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if st.Containment != "cgroup2" {
		b.Skipf("the daemon runs with %s containment (%s): this benchmark needs cgroup2", st.Containment, st.ContainmentReason)
	}
	p.cgroupRoot = st.CgroupRoot
	g.own(st.CgroupRoot)
	return p, answered
}

// stop sends SIGTERM and waits for the daemon to exit, and returns how long
// the shutdown took.
func (p *daemonProc) stop(within time.Duration) (time.Duration, error) {
	p.client.Close()
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-p.exited:
	case <-time.After(within):
		return 0, fmt.Errorf("the daemon did not exit within %s of SIGTERM", within)
	}
	took := time.Since(t0)
	if p.waitErr != nil {
		return took, fmt.Errorf("daemon process: %v", p.waitErr)
	}
	return took, nil
}

// cleanup ends the daemon process if it still runs (SIGTERM, then SIGKILL)
// and kills, reaps and removes whatever it left in its group.
func (p *daemonProc) cleanup(b *testing.B, pids *pidCheck) {
	if p.client != nil {
		p.client.Close()
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Signal(sig)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
			}
		}
	}
	if p.cgroupRoot == "" {
		return
	}
	if _, err := os.Stat(p.cgroupRoot); errors.Is(err, fs.ErrNotExist) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cgroup.Kill(p.cgroupRoot)
	if err == nil {
		err = cgroup.WaitEmpty(ctx, p.cgroupRoot)
	}
	pids.reapOrphans() // re-parented to this process when it is a subreaper
	if err = errors.Join(err, cgroup.RemoveTree(p.cgroupRoot)); err != nil {
		b.Errorf("cleaning up after the daemon process: %v", err)
	}
}

// procStatus is what /proc/<pid>/status says of a process's memory and
// threads.
type procStatus struct {
	rssKB, hwmKB, threads int
	anonKB                int // of rssKB, what is not the binary's or a file's pages
	fds                   int // open descriptors
	nofile                int // RLIMIT_NOFILE, soft
}

func (s procStatus) max(o procStatus) procStatus {
	return procStatus{max(s.rssKB, o.rssKB), max(s.hwmKB, o.hwmKB), max(s.threads, o.threads), max(s.anonKB, o.anonKB), max(s.fds, o.fds), max(s.nofile, o.nofile)}
}

func readProcStatus(pid int) (procStatus, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, err
	}
	defer f.Close()
	var s procStatus
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.Atoi(fields[0])
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			s.rssKB, found = n, found+1
		case "VmHWM":
			s.hwmKB, found = n, found+1
		case "Threads":
			s.threads, found = n, found+1
		case "RssAnon":
			s.anonKB = n
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if found != 3 {
		return s, fmt.Errorf("/proc/%d/status lacks VmRSS, VmHWM or Threads", pid)
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	// Not prlimit(2): BenchmarkCascadeRootAndUser's user daemons are
	// another user's processes (procNofile).
	soft, _, err := procNofile(pid)
	if err != nil {
		return s, err
	}
	s.nofile = int(min(soft, math.MaxInt32))
	return s, nil
}

// pidCheck remembers the agents' processes, each by a pidfd opened when it
// is added (a recycled pid, such as another test run's sleep on a shared
// machine, is never mistaken for an agent), and fails the benchmark at its
// end if any of them still runs or is an unreaped child of this process.
type pidCheck struct {
	mu    sync.Mutex
	procs []trackedPid
}

// trackedPid is a process by its pid and start time (/proc/<pid>/stat):
// a recycled pid has another start time. No pidfd each: at 10,000 agents
// an in-process daemon and this check together would pass RLIMIT_NOFILE.
type trackedPid struct {
	pid   int
	start string
}

// leftoverCheck lists the processes of a set that still run or are not
// yet reaped.
type leftoverCheck interface{ leftover() []string }

// pidfdCheck is the leftoverCheck of a cascade's timed window: a pidfd of
// each of the tree's processes, opened before the kill, says whether the
// process is reaped (proctest.Pidfd), one system call each. pidCheck's
// reads of /proc/<pid>/stat took 34-59 ms for 1,111 processes inside the
// window, beside the daemon's cleanup after its record (three cascades,
// session 14): the benchmark's own cost, which the floor does not pay.
type pidfdCheck struct{ fds []proctest.Pidfd }

// newPidfdCheck opens a pidfd of each agent's process; close them with
// close (registered as a cleanup too).
func newPidfdCheck(b *testing.B, agents ...*kin.Agent) *pidfdCheck {
	b.Helper()
	pc := &pidfdCheck{}
	b.Cleanup(pc.close)
	for _, a := range agents {
		if a == nil || a.PID <= 0 {
			continue
		}
		fd, err := proctest.OpenPidfd(a.PID)
		if err != nil {
			b.Fatalf("pidfd of agent %d's process %d: %v", a.ID, a.PID, err)
		}
		pc.fds = append(pc.fds, fd)
	}
	return pc
}

func (pc *pidfdCheck) leftover() []string {
	var out []string
	for _, fd := range pc.fds {
		if reaped, err := fd.Reaped(); !reaped {
			out = append(out, fmt.Sprintf("%d (not reaped: %v)", fd.Pid, err))
		}
	}
	return out
}

func (pc *pidfdCheck) close() {
	for _, fd := range pc.fds {
		fd.Close()
	}
	pc.fds = nil
}

func newPidCheck(b *testing.B) *pidCheck {
	pc := &pidCheck{}
	// Registered before the daemons' cleanups, so it runs after them.
	b.Cleanup(func() {
		if left := pc.leftover(); len(left) > 0 {
			b.Errorf("processes left behind: %v", left)
		}
		pc.mu.Lock()
		pc.procs = nil
		pc.mu.Unlock()
	})
	return pc
}

func (pc *pidCheck) add(agents ...*kin.Agent) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, a := range agents {
		if a == nil || a.PID <= 0 {
			continue
		}
		st, ok := readStat(a.PID)
		if !ok {
			continue // gone already
		}
		pc.procs = append(pc.procs, trackedPid{a.PID, st.start})
	}
}

// leftover lists the agents' processes that still run, or are zombies this
// process has not reaped.
func (pc *pidCheck) leftover() []string {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var out []string
	for _, p := range pc.procs {
		if why := trackedLeft(p); why != "" {
			out = append(out, fmt.Sprintf("%d (%s)", p.pid, why))
		}
	}
	return out
}

// trackedLeft says why a tracked process counts as left behind: it has not
// exited, or it is an exited child of this process not yet reaped.
func trackedLeft(p trackedPid) string {
	st, ok := readStat(p.pid)
	switch {
	case !ok || st.start != p.start:
		return "" // gone (and its pid maybe reused)
	case st.state == "Z" || st.state == "X":
		if st.ppid == strconv.Itoa(os.Getpid()) {
			return "not reaped"
		}
		return ""
	}
	return "running"
}

// reapOrphans reaps those of the processes that are exited children of
// this process.
func (pc *pidCheck) reapOrphans() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	self := strconv.Itoa(os.Getpid())
	for _, p := range pc.procs {
		// A zombie child of this process with the start time tracked is
		// that process: its pid cannot be reused before it is reaped.
		if st, ok := readStat(p.pid); ok && st.start == p.start && st.state == "Z" && st.ppid == self {
			var si unix.Siginfo
			unix.Waitid(unix.P_PID, p.pid, &si, unix.WEXITED|unix.WNOHANG, nil)
		}
	}
}

// procLeft says why pid counts as left behind: it runs sleep (a recycled
// pid runs something else), or it is a zombie child of this process.
func procLeft(pid int) string {
	st, ok := readStat(pid)
	switch {
	case !ok:
		return ""
	case st.state == "Z" && st.ppid == strconv.Itoa(os.Getpid()):
		return "not reaped"
	case st.state != "Z" && st.state != "X" && st.comm == "sleep":
		return "running"
	}
	return ""
}

// procStat is what procLeft and pidCheck read of /proc/<pid>/stat.
type procStat struct {
	comm, state, ppid, start string
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...
	open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	rest := strings.Fields(string(b[end+1:]))
	if len(rest) < 20 {
		return procStat{}, false
	}
	return procStat{comm: string(b[open+1 : end]), state: rest[0], ppid: rest[1], start: rest[19]}, true
}

// groupCheck remembers the cgroups a benchmark creates (its raw groups and
// its daemons' roots, all kin-named) and fails the benchmark at its end if
// any is left. It also lists the kin-named groups at the top of the cgroup2
// mount that appeared meanwhile and are not the benchmark's: other test
// runs on a shared machine make those, so they are logged, not failed.
type groupCheck struct {
	mount  string
	before map[string]bool
	mu     sync.Mutex
	ours   []string
}

func newGroupCheck(b *testing.B) *groupCheck {
	b.Helper()
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		b.Skipf("no writable cgroup v2 here (%v)", err)
	}
	g := &groupCheck{mount: m.Dir, before: kinGroups(m.Dir)}
	// Registered first, so it runs after every other cleanup.
	b.Cleanup(func() { g.check(b) })
	return g
}

func (g *groupCheck) own(dir string) {
	g.mu.Lock()
	g.ours = append(g.ours, dir)
	g.mu.Unlock()
}

func (g *groupCheck) check(b *testing.B) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, dir := range g.ours {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			b.Errorf("cgroup %s is left behind (%v)", dir, err)
		}
	}
	for name := range kinGroups(g.mount) {
		dir := filepath.Join(g.mount, name)
		if !g.before[name] && !slices.Contains(g.ours, dir) {
			b.Logf("kin-named cgroup %s appeared during the benchmark and is not its own", dir)
		}
	}
}

// kinGroups lists the groups at the top of the mount whose name contains "kin".
func kinGroups(mount string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(mount)
	for _, e := range ents {
		if e.IsDir() && strings.Contains(e.Name(), "kin") {
			out[e.Name()] = true
		}
	}
	return out
}

// percentile is the nearest-rank p-quantile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
