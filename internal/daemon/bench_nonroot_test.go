package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkSpawnRootAndUser is issue 18's comparison: the supervisor's
// spawn benchmarks (latency, one spawn at a time; throughput, from 16
// clients) against three daemons in the same run: root (in process,
// cgroup2, agents as their own uids), an ordinary user in a cgroup subtree
// delegated to it (cgroup2), and the same user with no writable cgroup
// (pid-namespaces: each agent's init cloned into its own user and PID
// namespace). Each iteration also times the raw floor, a Start into a fresh
// cgroup. Every agent of every daemon starts through the sandbox shim.
//
// Metrics: <mode>-p50-ms and <mode>-agents/s for root, user-cgroup2 and
// user-pidns; raw-p50-ms; and <mode>-x-root, a user daemon's p50 over the
// root daemon's.
func BenchmarkSpawnRootAndUser(b *testing.B) {
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	u := kintest.NewUser(b)
	root := startBenchDaemon(b, g)
	userCG, _ := startUserDaemon(b, u, kintest.DelegatedCgroup(b, u), "cgroup2")
	userNS, _ := startUserDaemon(b, u, "", "pid-namespaces")
	modes := []struct {
		name string
		svc  kin.Service
		lat  []time.Duration
		n    int
		took time.Duration
	}{{name: "root", svc: root.Client}, {name: "user-cgroup2", svc: userCG}, {name: "user-pidns", svc: userNS}}
	var raw []time.Duration
	for iter := 0; b.Loop(); iter++ {
		rg := newRawGroup(b, g, "nr")
		for i := range latencyBatch {
			_, start, err := rg.start(fmt.Sprintf("r%d", i))
			if err != nil {
				b.Fatal(err)
			}
			raw = append(raw, start)
		}
		if err := rg.close(); err != nil {
			b.Fatal(err)
		}
		for k := range modes {
			m := &modes[k]
			parents := spawnRoots(b, m.svc, pids, fmt.Sprintf("%s-p%d", m.name, iter))
			for i := range latencyBatch {
				req := sleepRequest(fmt.Sprintf("%s-l%d-%d", m.name, iter, i), parents[i%len(parents)].ID)
				t0 := time.Now()
				a, err := m.svc.Spawn(ctx, req)
				m.lat = append(m.lat, time.Since(t0))
				if err != nil {
					b.Fatalf("%s: spawn %s: %v", m.name, req.Name, err)
				}
				pids.add(a)
			}
			reqs := make([]kin.SpawnRequest, throughputBatch)
			for i := range reqs {
				reqs[i] = sleepRequest(fmt.Sprintf("%s-t%d-%d", m.name, iter, i), parents[i%len(parents)].ID)
			}
			t0 := time.Now()
			agents, err := spawnAll(m.svc, reqs, throughputClients)
			m.took += time.Since(t0)
			m.n += len(reqs)
			pids.add(agents...)
			if err != nil {
				b.Fatalf("%s: %v", m.name, err)
			}
			stopRoots(b, m.svc, parents)
		}
	}
	b.ReportMetric(0, "ns/op") // an iteration is a batch: the figures say it
	rawP50 := percentile(raw, 0.5)
	b.ReportMetric(ms(rawP50), "raw-p50-ms")
	rootP50 := percentile(modes[0].lat, 0.5)
	for _, m := range modes {
		p50 := percentile(m.lat, 0.5)
		b.ReportMetric(ms(p50), m.name+"-p50-ms")
		b.ReportMetric(float64(m.n)/m.took.Seconds(), m.name+"-agents/s")
		if m.name != "root" {
			b.ReportMetric(float64(p50)/float64(rootP50), m.name+"-x-root")
		}
	}
}

// startUserDaemon runs the test binary as a daemon (see TestMain) as user
// u, in cgroupDir when given (else in the benchmark's own cgroup, which u
// cannot write), and checks it contains by want. It is stopped (SIGTERM,
// which stops its agents; SIGKILL after 30 s) when the benchmark ends.
func startUserDaemon(b *testing.B, u kintest.User, cgroupDir, want string) (*client.Client, int) {
	b.Helper()
	home := kintest.TempHome(b)
	if err := os.Mkdir(home, 0o700); err != nil {
		b.Fatal(err)
	}
	profile := filepath.Join(home, "bench.json")
	prof, err := os.ReadFile(unlimitedProfile(b))
	if err == nil {
		err = os.WriteFile(profile, prof, 0o600)
	}
	for _, p := range []string{home, profile} {
		if err == nil {
			err = os.Chown(p, u.UID, u.GID)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(kintest.AgentBinary(b), "-test.run=^$")
	cmd.Env = daemonProcessEnv(b, home, "KIN_TEST_DAEMON_PROFILE="+profile)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential()}
	if cgroupDir != "" {
		fd, err := syscall.Open(cgroupDir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			cmd.Process.Signal(sig)
			select {
			case <-exited:
				return
			case <-time.After(30 * time.Second):
			}
		}
	})
	var st *kin.DaemonStatus
	err = poll(20*time.Second, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("the daemon process as %s exited", u.Name)
		default:
		}
		var serr error
		st, serr = c.Status(ctx)
		return serr == nil, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if st.Containment != want {
		b.Fatalf("the daemon as %s contains by %s (%s), want %s", u.Name, st.Containment, st.ContainmentReason, want)
	}
	return c, cmd.Process.Pid
}

// BenchmarkCascadeRootAndUser is issue 18's comparison for the other two
// supervisor benchmarks: against three daemons, each a process of its own
// (root, cgroup2; an ordinary user in a delegated cgroup; the same user in
// PID namespaces), a root agent and 10 x 10 x 10 owned descendants are
// spawned, the daemon's memory and threads read (VmRSS, Threads), then the
// root's process SIGKILLed and timed until the root's end and all 1,110
// descendants' cancellations are recorded.
//
// Metrics: <mode>-cascade-ms, <mode>-rss-MiB and <mode>-threads with 1,111
// live agents, for root, user-cgroup2 and user-pidns.
func BenchmarkCascadeRootAndUser(b *testing.B) {
	g := newGroupCheck(b)
	pids := newPidCheck(b)
	u := kintest.NewUser(b)
	profile := unlimitedProfile(b)
	root := startDaemonProc(b, g, pids, profile)
	userCG, cgPid := startUserDaemon(b, u, kintest.DelegatedCgroup(b, u), "cgroup2")
	userNS, nsPid := startUserDaemon(b, u, "", "pid-namespaces")
	modes := []struct {
		name   string
		svc    kin.Service
		pid    int
		took   time.Duration
		n      int
		status procStatus
	}{{name: "root", svc: root.client, pid: root.pid}, {name: "user-cgroup2", svc: userCG, pid: cgPid}, {name: "user-pidns", svc: userNS, pid: nsPid}}
	for iter := 0; b.Loop(); iter++ {
		for k := range modes {
			m := &modes[k]
			top, tree := spawnTree(b, m.svc, pids, fmt.Sprintf("%s-c%d", m.name, iter))
			st, err := readProcStatus(m.pid)
			if err != nil {
				b.Fatal(err)
			}
			m.status = m.status.max(st)
			t0 := time.Now()
			if err := syscall.Kill(top.PID, syscall.SIGKILL); err != nil {
				b.Fatal(err)
			}
			err = poll(60*time.Second, 50*time.Microsecond, time.Millisecond, func() (bool, error) {
				return cascadeRecorded(m.svc, top, tree)
			})
			m.took += time.Since(t0)
			m.n++
			if err != nil {
				b.Fatalf("%s: the cascade: %v", m.name, err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for _, m := range modes {
		b.ReportMetric(ms(m.took/time.Duration(m.n)), m.name+"-cascade-ms")
		b.ReportMetric(float64(m.status.rssKB)/1024, m.name+"-rss-MiB")
		b.ReportMetric(float64(m.status.threads), m.name+"-threads")
	}
}
