package daemon_test

// kin against supervisord (issue 22): the same 1,000 sleeping processes
// started and stopped under each, in alternating phases of one run on the
// same machine, reported as ratios. docs/PERFORMANCE.md has the command and
// the numbers.
//
// It needs supervisord (Debian: apt-get install -y supervisor; 4.2.5 was
// measured) and skips, naming it, when it is not on PATH. Run it alone, two
// iterations (one with each side going first):
//
//	go test -c -o /tmp/daemon.test ./internal/daemon/
//	cd internal/daemon && /tmp/daemon.test -test.run='^$' \
//	    -test.bench=AgainstSupervisord -test.benchtime=2x

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// versusProcs is how many processes each side starts and stops.
const versusProcs = 1000

// BenchmarkAgainstSupervisord starts versusProcs processes of /bin/sleep
// 3600 under supervisord and under kin, then stops them, and reports the
// seconds of each phase and the ratios supervisord/kin (x-start, x-stop:
// above 1 means kin is faster). Each iteration runs both sides, each on a
// fresh instance (a new supervisord, a new in-process kin daemon), and
// alternates which goes first.
//
// What each phase means, the same on both sides:
//
//   - start: from the first request until the manager has answered that
//     every process runs and every one of them has exec'd /bin/sleep (read
//     from /proc/<pid>/comm: kin answers once its shim runs, supervisord
//     once it forked). supervisord: one supervisor.startAllProcesses
//     (wait=true) over its XML-RPC Unix socket (every program
//     autostart=false, startsecs=0, so RUNNING is not held back a second);
//     the pids are read from its cgroup, which costs it nothing, and
//     checked afterwards, untimed, against supervisor.getAllProcessInfo
//     (all RUNNING; the log line says how long that call took). kin:
//     client.Spawn of each from throughputClients goroutines on one SDK
//     client, children of spawnParents roots started beforehand (untimed);
//     each Spawn returns once the process runs and is recorded, with its
//     pid.
//   - stop: from the first request until every process has been reaped by
//     its manager (and, for kin, recorded cancelled) and none runs.
//     supervisord: supervisor.stopAllProcesses(wait=true), which returns
//     once every process is STOPPED, that is reaped (stopsignal=KILL, as
//     kin's grace 0 kills at once). kin: kin.StopAll of the roots with
//     grace 0, what "kin stop" of the four does: their Stops side by side
//     (each root's owned children are cancelled with it; until session 17
//     one after the other); kin also stops its 4 roots, so it stops 1,004
//     processes.
//
// The sub-benchmarks say what supervisord does with the programs' output:
// logs=file gives each program one log file (stdout_logfile in a directory
// of the run, stderr redirected into it), as kin gives each agent one log
// file in its home; logs=none is stdout_logfile=NONE (supervisord still
// pipes and drains the output, and writes no file). supervisord logs to its
// own log file at its default level (info). Its minfds is left at its
// default (1024): its children close every descriptor below minfds, one
// call each, before they exec, so a larger minfds slows every start.
//
// Before the loop, one double-forking program runs under each (a shell
// that starts a sleep in a new session, setsid, and exits, so the sleep
// re-parents), stopped the same way, supervisord with stopasgroup and
// killasgroup; grandchild-left-supd and grandchild-left-kin are 1 when the
// grandchild still ran after its program was stopped.
func BenchmarkAgainstSupervisord(b *testing.B) {
	if _, err := exec.LookPath("supervisord"); err != nil {
		b.Skip("supervisord is not installed (Debian: apt-get install -y supervisor): it is what kin is compared with here")
	}
	for _, logs := range []string{"file", "none"} {
		b.Run("logs="+logs, func(b *testing.B) { benchAgainstSupervisord(b, logs == "file") })
	}
}

func benchAgainstSupervisord(b *testing.B, logs bool) {
	g := newGroupCheck(b)
	kinLeft := grandchildLeftKin(b, g)
	supdLeft := grandchildLeftSupervisord(b, g)

	var supd supdTimes
	var kinT phases
	for iter := 0; b.Loop(); iter++ {
		var st supdTimes
		var kt phases
		runSupd := func() { st = supervisordStartStop(b, g, logs) }
		runKin := func() { kt = kinStartStop(b, g, iter) }
		if iter%2 == 0 {
			runSupd()
			runKin()
		} else {
			runKin()
			runSupd()
		}
		b.Logf("iteration %d (%s first): supervisord start %.2fs (rpc returned %.2fs, cpu %.2fs) stop %.2fs (rpc returned %.2fs, cpu %.2fs), getAllProcessInfo %.2fs; kin start %.2fs (cpu %.2fs) stop %.2fs (cpu %.2fs); x-start %.2f x-stop %.2f x-start-cpu %.2f x-stop-cpu %.2f",
			iter, map[bool]string{true: "supervisord", false: "kin"}[iter%2 == 0],
			st.start.Seconds(), st.startRPC.Seconds(), st.startCPU.Seconds(), st.stop.Seconds(), st.stopRPC.Seconds(), st.stopCPU.Seconds(), st.info.Seconds(),
			kt.start.Seconds(), kt.startCPU.Seconds(), kt.stop.Seconds(), kt.stopCPU.Seconds(),
			ratio(st.start, kt.start), ratio(st.stop, kt.stop), ratio(st.startCPU, kt.startCPU), ratio(st.stopCPU, kt.stopCPU))
		supd = supd.add(st)
		kinT = kinT.add(kt)
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op") // an iteration is two batches: the phases say it
	b.ReportMetric(supd.start.Seconds()/n, "supd-start-s")
	b.ReportMetric(supd.startRPC.Seconds()/n, "supd-start-rpc-s")
	b.ReportMetric(kinT.start.Seconds()/n, "kin-start-s")
	b.ReportMetric(supd.stop.Seconds()/n, "supd-stop-s")
	b.ReportMetric(kinT.stop.Seconds()/n, "kin-stop-s")
	b.ReportMetric(ratio(supd.start, kinT.start), "x-start")
	b.ReportMetric(ratio(supd.stop, kinT.stop), "x-stop")
	b.ReportMetric(supd.startCPU.Seconds()/n, "supd-start-cpu-s")
	b.ReportMetric(kinT.startCPU.Seconds()/n, "kin-start-cpu-s")
	b.ReportMetric(supd.stopCPU.Seconds()/n, "supd-stop-cpu-s")
	b.ReportMetric(kinT.stopCPU.Seconds()/n, "kin-stop-cpu-s")
	b.ReportMetric(ratio(supd.startCPU, kinT.startCPU), "x-start-cpu")
	b.ReportMetric(ratio(supd.stopCPU, kinT.stopCPU), "x-stop-cpu")
	b.ReportMetric(boolMetric(supdLeft), "grandchild-left-supd")
	b.ReportMetric(boolMetric(kinLeft), "grandchild-left-kin")
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// phases is what one side of an iteration measured: the wall time of its
// start and stop phases, and the CPU time spent in each by the manager and
// the processes it started (cpuMeter).
type phases struct{ start, stop, startCPU, stopCPU time.Duration }

func (p phases) add(o phases) phases {
	return phases{p.start + o.start, p.stop + o.stop, p.startCPU + o.startCPU, p.stopCPU + o.stopCPU}
}

// cpuMeter reads a side's CPU time so far. On a machine shared with other
// work, CPU time says what each side costs even when the wall time says
// mostly how busy the machine was.
//
//   - supervisord: usage_usec of its group's cpu.stat (cgroup v2 keeps it
//     without the cpu controller): supervisord, its children from their
//     fork on (their pre-exec work too), and what they cost to exit.
//   - kin: this process's own CPU time (getrusage: the in-process daemon,
//     and also its 16 clients and the benchmark's polling, which overstate
//     kin) plus usage_usec of the daemon's cgroup root: the agents' processes
//     from their fork on, the shim included.
type cpuMeter func() (time.Duration, error)

func groupCPU(dir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat has no usage_usec", dir)
}

func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// since is the CPU time spent since from, read with m.
func (m cpuMeter) since(b *testing.B, from time.Duration) time.Duration {
	b.Helper()
	now, err := m()
	if err != nil {
		b.Fatal(err)
	}
	return now - from
}

func (m cpuMeter) now(b *testing.B) time.Duration { return m.since(b, 0) }

func boolMetric(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// kinStartStop is kin's side of an iteration, on a daemon of its own that
// it closes before returning.
func kinStartStop(b *testing.B, g *groupCheck, iter int) (t phases) {
	b.Helper()
	pids := newPidCheck(b)
	d := startBenchDaemon(b, g)
	parents := spawnRoots(b, d.Client, pids, fmt.Sprintf("vs%d", iter))
	reqs := make([]kin.SpawnRequest, versusProcs)
	for i := range reqs {
		reqs[i] = sleepRequest(fmt.Sprintf("vs%d-c%d", iter, i), parents[i%len(parents)].ID)
	}

	cpu := cpuMeter(func() (time.Duration, error) {
		self, err := selfCPU()
		if err != nil {
			return 0, err
		}
		agents, err := groupCPU(d.cgroupRoot)
		return self + agents, err
	})

	c0, t0 := cpu.now(b), time.Now()
	agents, err := spawnAll(d.Client, reqs, throughputClients)
	pids.add(agents...)
	if err != nil {
		b.Fatal(err)
	}
	all := agentPids(agents)
	if err := waitProcsExeced(all, "sleep"); err != nil {
		b.Fatalf("kin: %v", err)
	}
	t.start, t.startCPU = time.Since(t0), cpu.since(b, c0)

	all = append(all, agentPids(parents)...)
	ids := make([]kin.AgentID, len(parents))
	for i, p := range parents {
		ids[i] = p.ID
	}
	zero := kin.Duration(0)
	c0, t0 = cpu.now(b), time.Now()
	if _, err := kin.StopAll(ctx, d.Client, ids, kin.StopRequest{Grace: &zero}); err != nil {
		b.Fatalf("kin: stop the roots: %v", err)
	}
	if err := waitProcsGone(all); err != nil {
		b.Fatalf("kin: %v", err)
	}
	t.stop, t.stopCPU = time.Since(t0), cpu.since(b, c0)
	pids.forgetSeen() // checked: their pids may be reused by the time the benchmark ends

	d.Client.Close()
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	return t
}

// supdTimes is what supervisord's side of an iteration measured: the
// phases (start, stop), within them when startAllProcesses and
// stopAllProcesses returned, and, outside them, how long
// getAllProcessInfo took.
type supdTimes struct {
	phases
	startRPC, info, stopRPC time.Duration
}

func (t supdTimes) add(o supdTimes) supdTimes {
	return supdTimes{t.phases.add(o.phases), t.startRPC + o.startRPC, t.info + o.info, t.stopRPC + o.stopRPC}
}

// samePids reports whether a and b hold the same pids.
func samePids(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[int]bool, len(a))
	for _, p := range a {
		in[p] = true
	}
	for _, p := range b {
		if !in[p] {
			return false
		}
	}
	return true
}

// supervisordStartStop is supervisord's side of an iteration, on a
// supervisord of its own that it shuts down before returning.
func supervisordStartStop(b *testing.B, g *groupCheck, logs bool) (t supdTimes) {
	b.Helper()
	progs := make([]supdProgram, versusProcs)
	for i := range progs {
		progs[i] = supdProgram{name: fmt.Sprintf("s%04d", i), command: strings.Join(sleepArgv, " ")}
	}
	s := startSupervisord(b, g, progs, logs)

	cpu := cpuMeter(func() (time.Duration, error) { return groupCPU(s.group) })
	c0, t0 := cpu.now(b), time.Now()
	res, err := s.call("supervisor.startAllProcesses", true)
	if err == nil {
		err = allSucceeded(res, versusProcs)
	}
	if err != nil {
		b.Fatalf("supervisord: startAllProcesses: %v", err)
	}
	t.startRPC = time.Since(t0)
	// The pids from supervisord's group: reading them costs supervisord
	// nothing, where asking it (getAllProcessInfo, below) would count its
	// XML-RPC encoding of 1,000 structs against it.
	pids, err := s.children()
	if err == nil && len(pids) != versusProcs {
		err = fmt.Errorf("%d processes in its group, want %d", len(pids), versusProcs)
	}
	if err != nil {
		b.Fatalf("supervisord: %v", err)
	}
	if err := waitProcsExeced(pids, "sleep"); err != nil {
		b.Fatalf("supervisord: %v", err)
	}
	t.start, t.startCPU = time.Since(t0), cpu.since(b, c0)

	// Untimed: supervisord's own account agrees.
	t1 := time.Now()
	info, err := s.runningPids(versusProcs)
	t.info = time.Since(t1)
	if err == nil && !samePids(pids, info) {
		err = fmt.Errorf("getAllProcessInfo's pids are not the processes in its group")
	}
	if err != nil {
		b.Fatalf("supervisord: %v", err)
	}

	c0, t0 = cpu.now(b), time.Now()
	res, err = s.call("supervisor.stopAllProcesses", true)
	if err == nil {
		err = allSucceeded(res, versusProcs)
	}
	if err != nil {
		b.Fatalf("supervisord: stopAllProcesses: %v", err)
	}
	t.stopRPC = time.Since(t0)
	if err := waitProcsGone(pids); err != nil {
		b.Fatalf("supervisord: %v", err)
	}
	t.stop, t.stopCPU = time.Since(t0), cpu.since(b, c0)

	if err := s.close(); err != nil {
		b.Fatal(err)
	}
	return t
}

// doubleForkScript is the program of the escape check: it starts a sleep
// in a new session through a subshell that exits at once, so the sleep
// re-parents (to the nearest subreaper, or init), writes the sleep's pid
// to the file named by its argument, and then sleeps itself.
const doubleForkScript = `#!/bin/sh
(setsid /bin/sh -c 'echo $$ > "$1"; exec /bin/sleep 3600' sh "$1" </dev/null >/dev/null 2>&1 &)
exec /bin/sleep 3600
`

// doubleFork writes the escape check's script and an empty pid file, both
// usable by any uid (kin runs agents as their own uids).
func doubleFork(b *testing.B) (argv []string, pidFile string) {
	b.Helper()
	dir := kintest.SharedDir(b)
	script, pidFile := filepath.Join(dir, "double-fork.sh"), filepath.Join(dir, "grandchild.pid")
	if err := os.WriteFile(script, []byte(doubleForkScript), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(pidFile, nil, 0o666); err != nil {
		b.Fatal(err)
	}
	if err := errors.Join(os.Chmod(script, 0o755), os.Chmod(pidFile, 0o666)); err != nil { // past the umask
		b.Fatal(err)
	}
	return []string{"/bin/sh", script, pidFile}, pidFile
}

// grandchildPid waits until the script wrote its grandchild's pid and the
// grandchild runs sleep.
func grandchildPid(pidFile string) (int, error) {
	var pid int
	err := poll(20*time.Second, 100*time.Microsecond, 10*time.Millisecond, func() (bool, error) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false, err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return false, nil // not written yet
		}
		return procComm(pid) == "sleep", nil
	})
	if err != nil {
		return 0, fmt.Errorf("the double-forked grandchild: %w", err)
	}
	return pid, nil
}

// grandchildLeftKin runs the script as a child of a root under a kin
// daemon of its own, stops the root (grace 0), and says whether the
// grandchild still runs. A grandchild left behind is killed.
func grandchildLeftKin(b *testing.B, g *groupCheck) bool {
	b.Helper()
	argv, pidFile := doubleFork(b)
	pids := newPidCheck(b)
	d := startBenchDaemon(b, g)
	parents := spawnRoots(b, d.Client, pids, "dfork")
	req := sleepRequest("dfork-child", parents[0].ID)
	req.Command = argv
	a, err := d.Client.Spawn(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	pids.add(a)
	pid, err := grandchildPid(pidFile)
	if err != nil {
		b.Fatalf("kin: %v", err)
	}
	stopRoots(b, d.Client, parents)
	left := alive(pid)
	if left {
		b.Logf("kin: the double-forked grandchild %d survived the stop", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := waitProcsGone(append([]int{a.PID}, agentPids(parents)...)); err != nil {
		b.Fatalf("kin: %v", err)
	}
	pids.forgetSeen()
	d.Client.Close()
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	return left
}

// grandchildLeftSupervisord runs the script as a supervisord program with
// stopasgroup and killasgroup, stops it (SIGKILL), and says whether the
// grandchild still runs. Shutting supervisord's group down kills it.
func grandchildLeftSupervisord(b *testing.B, g *groupCheck) bool {
	b.Helper()
	argv, pidFile := doubleFork(b)
	s := startSupervisord(b, g, []supdProgram{{name: "dfork", command: strings.Join(argv, " "), asGroup: true}}, true)
	res, err := s.call("supervisor.startAllProcesses", true)
	if err == nil {
		err = allSucceeded(res, 1)
	}
	if err != nil {
		b.Fatalf("supervisord: startAllProcesses: %v", err)
	}
	pid, err := grandchildPid(pidFile)
	if err != nil {
		b.Fatalf("supervisord: %v", err)
	}
	res, err = s.call("supervisor.stopAllProcesses", true)
	if err == nil {
		err = allSucceeded(res, 1)
	}
	if err != nil {
		b.Fatalf("supervisord: stopAllProcesses: %v", err)
	}
	left := alive(pid)
	if err := s.close(); err != nil { // kills the group, the grandchild with it
		b.Fatal(err)
	}
	if alive(pid) {
		b.Fatalf("the grandchild %d survived supervisord's group", pid)
	}
	return left
}

// waitProcsExeced waits until every pid runs the program named name (its
// comm).
func waitProcsExeced(pids []int, name string) error {
	left := pids
	err := poll(60*time.Second, 50*time.Microsecond, time.Millisecond, func() (bool, error) {
		var still []int
		for _, pid := range left {
			if procComm(pid) != name {
				still = append(still, pid)
			}
		}
		left = still
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d processes do not run %s (e.g. pid %d: %q): %w", len(left), len(pids), name, left[0], procComm(left[0]), err)
	}
	return nil
}

// waitProcsGone waits until none of pids runs sleep or is a zombie child of
// this process (procLeft).
func waitProcsGone(pids []int) error {
	left := pids
	err := poll(60*time.Second, 50*time.Microsecond, time.Millisecond, func() (bool, error) {
		var still []int
		for _, pid := range left {
			if procLeft(pid) != "" {
				still = append(still, pid)
			}
		}
		left = still
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d processes are left (e.g. pid %d: %s): %w", len(left), len(pids), left[0], procLeft(left[0]), err)
	}
	return nil
}

// forgetSeen drops the pids checked so far: once a benchmark has seen them
// gone, the check at its end would only catch other runs' sleeps on reused
// pids (pid_max is 32768 here).
func (pc *pidCheck) forgetSeen() {
	pc.mu.Lock()
	pc.procs = nil
	pc.mu.Unlock()
}

func agentPids(agents []*kin.Agent) []int {
	out := make([]int, 0, len(agents))
	for _, a := range agents {
		out = append(out, a.PID)
	}
	return out
}

// procComm is the command name of pid, or "" when it is gone.
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// supdProgram is one [program:x] of supervisord's configuration.
type supdProgram struct {
	name, command string
	asGroup       bool // stopasgroup and killasgroup
}

// supervisord is a supervisord process run by the benchmark, with its
// configuration, socket and logs in a temporary directory, in a kin-named
// cgroup of its own: everything it starts stays in that group (whatever
// re-parents too), so killing the group cleans up after it.
type supervisord struct {
	dir, group string
	cmd        *exec.Cmd
	exited     chan struct{}
	waitErr    error
	client     *http.Client
	closeOnce  sync.Once
	closeErr   error
}

// startSupervisord writes the configuration, starts `supervisord -n -c`
// into its group and waits until it answers on its socket.
func startSupervisord(b *testing.B, g *groupCheck, progs []supdProgram, logs bool) *supervisord {
	b.Helper()
	root, err := os.MkdirTemp("", "kinsupd")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	s := &supervisord{
		dir:    root,
		group:  filepath.Join(g.mount, fmt.Sprintf("kin-bench-%d-supd-%d", os.Getpid(), rawSeq.Add(1))),
		exited: make(chan struct{}),
	}
	if err := os.Mkdir(filepath.Join(root, "logs"), 0o755); err != nil {
		b.Fatal(err)
	}
	conf := filepath.Join(root, "supervisord.conf")
	if err := os.WriteFile(conf, supervisordConf(root, progs, logs), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(s.group, 0o755); err != nil {
		b.Skipf("cgroup2 not writable: %v", err)
	}
	g.own(s.group)
	b.Cleanup(func() {
		if err := s.close(); err != nil {
			b.Error(err)
		}
	})
	out, err := os.Create(filepath.Join(root, "supervisord.out"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	fd, err := cgroup.Open(s.group)
	if err != nil {
		b.Fatal(err)
	}
	s.cmd = exec.Command("supervisord", "-n", "-c", conf)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	err = s.cmd.Start()
	syscall.Close(fd)
	if err != nil {
		close(s.exited)
		b.Fatal(err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	sock := filepath.Join(root, "supervisor.sock")
	s.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	err = poll(60*time.Second, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-s.exited:
			return false, fmt.Errorf("supervisord exited: %v; %s", s.waitErr, s.tail())
		default:
		}
		st, err := s.call("supervisor.getState")
		if err != nil {
			return false, nil
		}
		m, _ := st.(map[string]any)
		return m["statename"] == "RUNNING", nil
	})
	if err != nil {
		b.Fatalf("supervisord did not answer: %v", err)
	}
	// Each program holds about 3 descriptors in supervisord (its stdin and
	// stdout pipes, its log): the limit supervisord inherited must allow it
	// (minfds only raises a lower one to 1024).
	if soft, err := openFilesLimit(s.cmd.Process.Pid); err != nil {
		b.Fatal(err)
	} else if need := 3*len(progs) + 64; soft < need {
		b.Skipf("supervisord may open %d files (ulimit -n), %d programs need about %d", soft, len(progs), need)
	}
	return s
}

// supervisordConf is the configuration: the Unix socket and every file in
// dir, every program started only when asked (autostart=false), RUNNING
// once forked (startsecs=0), never restarted, killed at once when stopped.
func supervisordConf(dir string, progs []supdProgram, logs bool) []byte {
	var c bytes.Buffer
	fmt.Fprintf(&c, `[unix_http_server]
file=%[1]s/supervisor.sock
chmod=0700

[supervisord]
nodaemon=true
silent=true
logfile=%[1]s/supervisord.log
pidfile=%[1]s/supervisord.pid
childlogdir=%[1]s/logs

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
`, dir)
	for _, p := range progs {
		logfile := "NONE"
		if logs {
			logfile = filepath.Join(dir, "logs", p.name+".log")
		}
		fmt.Fprintf(&c, `
[program:%s]
command=%s
autostart=false
autorestart=false
startsecs=0
startretries=0
stopsignal=KILL
stopasgroup=%t
killasgroup=%t
redirect_stderr=true
stdout_logfile=%s
`, p.name, p.command, p.asGroup, p.asGroup, logfile)
	}
	return c.Bytes()
}

// openFilesLimit is pid's soft RLIMIT_NOFILE, from /proc/<pid>/limits.
func openFilesLimit(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if f[0] == "unlimited" {
					return 1 << 30, nil
				}
				return strconv.Atoi(f[0])
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/limits has no Max open files", pid)
}

// tail is the end of supervisord's own log and output, for errors.
func (s *supervisord) tail() string {
	var parts []string
	for _, name := range []string{"supervisord.out", "supervisord.log"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, name))
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		parts = append(parts, name+": "+string(b))
	}
	return strings.Join(parts, "\n")
}

// children lists the processes in supervisord's group but itself.
func (s *supervisord) children() ([]int, error) {
	procs, err := cgroup.Procs(s.group)
	if err != nil {
		return nil, err
	}
	out := procs[:0]
	for _, p := range procs {
		if p != s.cmd.Process.Pid {
			out = append(out, p)
		}
	}
	return out, nil
}

// runningPids asks supervisord for every process's state and pid, and
// checks that there are n, each RUNNING with a pid.
func (s *supervisord) runningPids(n int) ([]int, error) {
	v, err := s.call("supervisor.getAllProcessInfo")
	if err != nil {
		return nil, fmt.Errorf("getAllProcessInfo: %w", err)
	}
	infos, _ := v.([]any)
	if len(infos) != n {
		return nil, fmt.Errorf("getAllProcessInfo lists %d processes, want %d", len(infos), n)
	}
	pids := make([]int, 0, n)
	for _, i := range infos {
		m, _ := i.(map[string]any)
		pid, _ := m["pid"].(int)
		if m["statename"] != "RUNNING" || pid <= 0 {
			return nil, fmt.Errorf("process %v is %v with pid %v", m["name"], m["statename"], m["pid"])
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// allSucceeded checks the result of a start or stop of all: n entries,
// each with status SUCCESS (80).
func allSucceeded(v any, n int) error {
	res, _ := v.([]any)
	if len(res) != n {
		return fmt.Errorf("%d results, want %d", len(res), n)
	}
	for _, r := range res {
		m, _ := r.(map[string]any)
		if m["status"] != 80 {
			return fmt.Errorf("%v: status %v (%v)", m["name"], m["status"], m["description"])
		}
	}
	return nil
}

// close asks supervisord to shut down and waits for it, then kills what
// is left in its group (everything when it did not shut down), reaps the
// processes that re-parented to this process (the benchmark is a child
// subreaper once a kin daemon ran in it) and removes the group.
func (s *supervisord) close() error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown() })
	return s.closeErr
}

func (s *supervisord) shutdown() error {
	var errs []error
	started := s.cmd != nil && s.cmd.Process != nil
	if started && s.client != nil {
		select {
		case <-s.exited:
		default:
			if _, err := s.call("supervisor.shutdown"); err == nil {
				select {
				case <-s.exited:
				case <-time.After(30 * time.Second):
				}
			}
		}
	}
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	if _, err := os.Stat(s.group); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	listed, _ := cgroup.Procs(s.group)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cgroup.Kill(s.group); err != nil {
		errs = append(errs, err)
	} else if err := cgroup.WaitEmpty(ctx, s.group); err != nil {
		errs = append(errs, fmt.Errorf("supervisord's group %s: %w", s.group, err))
	}
	if started {
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("supervisord (pid %d) did not exit", s.cmd.Process.Pid))
		}
	}
	rel := "/" + filepath.Base(s.group)
	for _, pid := range listed {
		if started && pid == s.cmd.Process.Pid {
			continue // cmd.Wait reaps it
		}
		// Only a zombie child of this process that was in the group: a
		// pid reaped elsewhere may be in use by someone else already.
		if p, err := cgroup.PathOfPID(pid); err == nil && p == rel && procLeft(pid) == "not reaped" {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
	if err := cgroup.RemoveTree(s.group); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// call makes one XML-RPC call on supervisord's socket and returns its
// result: an int, bool, string or float64, a []any or a map[string]any.
func (s *supervisord) call(method string, args ...any) (any, error) {
	body, err := xmlrpcRequest(method, args...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://supervisord/RPC2", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return nil, fmt.Errorf("%s: HTTP %s: %s", method, resp.Status, b)
	}
	return xmlrpcResponse(resp.Body)
}

// xmlrpcRequest encodes a methodCall with bool, int and string parameters.
func xmlrpcRequest(method string, args ...any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`<?xml version="1.0"?><methodCall><methodName>`)
	xml.EscapeText(&buf, []byte(method))
	buf.WriteString(`</methodName><params>`)
	for _, a := range args {
		buf.WriteString("<param><value>")
		switch v := a.(type) {
		case bool:
			fmt.Fprintf(&buf, "<boolean>%d</boolean>", map[bool]int{false: 0, true: 1}[v])
		case int:
			fmt.Fprintf(&buf, "<int>%d</int>", v)
		case string:
			buf.WriteString("<string>")
			xml.EscapeText(&buf, []byte(v))
			buf.WriteString("</string>")
		default:
			return nil, fmt.Errorf("xmlrpc: cannot encode a %T", a)
		}
		buf.WriteString("</value></param>")
	}
	buf.WriteString("</params></methodCall>")
	return buf.Bytes(), nil
}

// xmlrpcResponse decodes a methodResponse: its one value, or its fault as
// an error.
func xmlrpcResponse(r io.Reader) (any, error) {
	d := xml.NewDecoder(r)
	fault := false
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("xmlrpc response: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "fault":
			fault = true
		case "value":
			v, err := xmlrpcValue(d)
			if err != nil {
				return nil, err
			}
			if fault {
				m, _ := v.(map[string]any)
				return nil, fmt.Errorf("xmlrpc fault %v: %v", m["faultCode"], m["faultString"])
			}
			return v, nil
		}
	}
}

// xmlrpcValue decodes the content of a <value> whose start was read, up to
// and with its end.
func xmlrpcValue(d *xml.Decoder) (any, error) {
	var text strings.Builder
	var out any
	typed := false
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("xmlrpc value: %w", err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			text.Write(t)
		case xml.EndElement: // </value>
			if !typed {
				return text.String(), nil // no type: a string
			}
			return out, nil
		case xml.StartElement:
			typed = true
			switch t.Name.Local {
			case "struct":
				out, err = xmlrpcStruct(d)
			case "array":
				out, err = xmlrpcArray(d)
			default:
				var s string
				if err = d.DecodeElement(&s, &t); err == nil {
					out, err = xmlrpcScalar(t.Name.Local, s)
				}
			}
			if err != nil {
				return nil, err
			}
		}
	}
}

func xmlrpcStruct(d *xml.Decoder) (map[string]any, error) {
	m := map[string]any{}
	var name string
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("xmlrpc struct: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "member":
			case "name":
				if err := d.DecodeElement(&name, &t); err != nil {
					return nil, err
				}
			case "value":
				v, err := xmlrpcValue(d)
				if err != nil {
					return nil, err
				}
				m[name] = v
			default:
				return nil, fmt.Errorf("xmlrpc struct: unexpected <%s>", t.Name.Local)
			}
		case xml.EndElement:
			if t.Name.Local == "struct" {
				return m, nil
			}
		}
	}
}

func xmlrpcArray(d *xml.Decoder) ([]any, error) {
	out := []any{}
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("xmlrpc array: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "data":
			case "value":
				v, err := xmlrpcValue(d)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			default:
				return nil, fmt.Errorf("xmlrpc array: unexpected <%s>", t.Name.Local)
			}
		case xml.EndElement:
			if t.Name.Local == "array" {
				return out, nil
			}
		}
	}
}

func xmlrpcScalar(typ, s string) (any, error) {
	switch typ {
	case "int", "i4", "i8":
		return strconv.Atoi(strings.TrimSpace(s))
	case "boolean":
		return strings.TrimSpace(s) == "1", nil
	case "double":
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	case "nil":
		return nil, nil
	}
	return s, nil // string, dateTime.iso8601, base64: as text
}

// TestXMLRPCDecodesSupervisordAnswers checks the benchmark's XML-RPC
// decoder on answers as Python's xmlrpc.client.dumps (which supervisord
// uses) writes them, and that bad answers are errors.
func TestXMLRPCDecodesSupervisordAnswers(t *testing.T) {
	const head = "<?xml version='1.0'?>\n<methodResponse>\n"
	for _, c := range []struct {
		name, body string
		want       any
		err        string
	}{
		{"array of structs", head + `<params>
<param>
<value><array><data>
<value><struct>
<member>
<name>name</name>
<value><string>s0000</string></value>
</member>
<member>
<name>status</name>
<value><int>80</int></value>
</member>
</struct></value>
</data></array></value>
</param>
</params>
</methodResponse>`, []any{map[string]any{"name": "s0000", "status": 80}}, ""},
		{"scalars", head + `<params><param><value><struct>
<member><name>pid</name><value><int>42</int></value></member>
<member><name>ok</name><value><boolean>1</boolean></value></member>
<member><name>y</name><value><double>1.5</double></value></member>
<member><name>z</name><value><string></string></value></member>
<member><name>untyped</name><value>a &amp; b</value></member>
</struct></value></param></params></methodResponse>`, map[string]any{"pid": 42, "ok": true, "y": 1.5, "z": "", "untyped": "a & b"}, ""},
		{"empty array", head + `<params><param><value><array><data>
</data></array></value></param></params></methodResponse>`, []any{}, ""},
		{"fault", head + `<fault>
<value><struct>
<member>
<name>faultCode</name>
<value><int>70</int></value>
</member>
<member>
<name>faultString</name>
<value><string>NOT_RUNNING: s0001</string></value>
</member>
</struct></value>
</fault>
</methodResponse>`, nil, "xmlrpc fault 70: NOT_RUNNING: s0001"},
		{"truncated", head + `<params><param><value><struct><member><name>pid</name>`, nil, "unexpected EOF"},
		{"no value", head + `<params></params></methodResponse>`, nil, "EOF"},
		{"bad int", head + `<params><param><value><int>x</int></value></param></params></methodResponse>`, nil, "invalid syntax"},
		{"stray element", head + `<params><param><value><struct><oops/></struct></value></param></params></methodResponse>`, nil, "unexpected <oops>"},
	} {
		got, err := xmlrpcResponse(strings.NewReader(c.body))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, %v; want an error with %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %#v, %v; want %#v", c.name, got, err, c.want)
		}
	}
	req, err := xmlrpcRequest("supervisor.startAllProcesses", true, 3, "a<b")
	want := `<?xml version="1.0"?><methodCall><methodName>supervisor.startAllProcesses</methodName><params>` +
		`<param><value><boolean>1</boolean></value></param><param><value><int>3</int></value></param>` +
		`<param><value><string>a&lt;b</string></value></param></params></methodCall>`
	if err != nil || string(req) != want {
		t.Errorf("request = %s, %v; want %s", req, err, want)
	}
	if _, err := xmlrpcRequest("m", 1.5); err == nil {
		t.Error("a float parameter was encoded")
	}
}
