package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
)

// TestDaemonRaisesOpenFilesAgentsKeepTheirs: a daemon started with a low
// RLIMIT_NOFILE raises its own, soft and hard, to hold an agent's
// descriptors for every pid the host has (10,000 agents need about 40,000
// here, past the usual 20,000); its agents still get the limit it started
// with, soft and hard as they were, also where Go's runtime had raised the
// soft limit at start. Without CAP_SYS_RESOURCE it cannot, keeps its
// limit, and says so, naming the limit; its agents get theirs all the same.
func TestDaemonRaisesOpenFilesAgentsKeepTheirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("raising the hard limit needs root")
	}
	want := min(readProcUint(t, "/proc/sys/kernel/pid_max")*4+4096, readProcUint(t, "/proc/sys/fs/nr_open"))
	for _, c := range []struct {
		name       string
		soft, hard uint64
		noCap      bool
	}{
		{"soft below hard", 1024, 4096, false},
		{"soft at hard", 4096, 4096, false},
		{"without CAP_SYS_RESOURCE", 1024, 4096, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.noCap && !hasCapSysResource(t) {
				t.Skip("this test process lacks CAP_SYS_RESOURCE (a container's bounding set), so no daemon it starts may raise a hard limit")
			}
			var prefix []string
			if c.noCap {
				prefix = []string{"setpriv", "--inh-caps=-sys_resource", "--bounding-set=-sys_resource", "--"}
			}
			prefix = append(prefix, "prlimit", fmt.Sprintf("--nofile=%d:%d", c.soft, c.hard), "--")
			home := kintest.TempHome(t)
			logPath := filepath.Join(t.TempDir(), "daemon.log")
			p := startWrappedDaemon(t, home, prefix, "KIN_TEST_DAEMON_LOG="+logPath)

			soft, hard := nofile(t, p.cmd.Process.Pid)
			switch {
			case c.noCap && (soft != c.hard-1 || hard != c.hard):
				t.Errorf("the daemon without CAP_SYS_RESOURCE runs with %d:%d open files, want %d:%d (Go's own raise)", soft, hard, c.hard-1, c.hard)
			case !c.noCap && (soft != want || hard != want):
				t.Errorf("the daemon runs with %d:%d open files, want %d:%d", soft, hard, want, want)
			}
			log, _ := os.ReadFile(logPath)
			line := ""
			for l := range strings.Lines(string(log)) {
				if strings.Contains(l, `"msg":"open files limit"`) {
					line = l
				}
			}
			switch {
			case c.noCap && !strings.Contains(line, fmt.Sprintf("cannot raise RLIMIT_NOFILE from %d (hard) to %d", c.hard, want)):
				t.Errorf("the daemon that cannot raise its limit says %q, want it to name RLIMIT_NOFILE and both limits", line)
			case !c.noCap && !strings.Contains(line, fmt.Sprintf(`"agents_get":"%d:%d"`, c.soft, c.hard)):
				t.Errorf("the daemon's line on its limit is %q, want it to say what agents get", line)
			}

			a, err := p.client.Spawn(ctx, sleepRequest("files", 0))
			if err != nil {
				t.Fatal(err)
			}
			var asoft, ahard uint64
			kintest.WaitFor(t, 20*time.Second, "the agent's command to run", func() bool {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", a.PID))
				if strings.TrimSpace(string(b)) != "sleep" {
					return false
				}
				asoft, ahard = nofile(t, a.PID)
				return true
			})
			if asoft != c.soft || ahard != c.hard {
				t.Errorf("the agent runs with %d:%d open files, want the daemon's original %d:%d", asoft, ahard, c.soft, c.hard)
			}
			p.stop(t)
			if procLeft(a.PID) != "" {
				t.Errorf("agent %d left running after the daemon's shutdown", a.PID)
			}
		})
	}
}

// wrappedDaemon is a daemon process (the test binary) started through a
// command that execs it (prlimit, setpriv), so that it keeps the pid.
type wrappedDaemon struct {
	cmd    *exec.Cmd
	client *client.Client
	exited chan struct{}
}

func startWrappedDaemon(t *testing.T, home string, prefix []string, env ...string) *wrappedDaemon {
	t.Helper()
	argv := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = daemonProcessEnv(t, home, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &wrappedDaemon{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	p.client = c
	kintest.WaitFor(t, 20*time.Second, "the daemon process to answer", func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Reconciling == 0
	})
	return p
}

// stop ends the daemon with SIGTERM (a clean shutdown stops its agents),
// SIGKILL after 30 s.
func (p *wrappedDaemon) stop(t *testing.T) {
	p.client.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-p.exited:
			return
		default:
		}
		p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
			return
		case <-time.After(30 * time.Second):
			t.Errorf("the daemon did not exit within 30 s of %v", sig)
		}
	}
}

// nofile is process pid's RLIMIT_NOFILE, soft and hard.
func nofile(t *testing.T, pid int) (soft, hard uint64) {
	t.Helper()
	soft, hard, err := procNofile(pid)
	if err != nil {
		t.Fatal(err)
	}
	return soft, hard
}

// procNofile is process pid's RLIMIT_NOFILE, soft and hard, from
// /proc/<pid>/limits ("unlimited" is 0), which any process may read:
// prlimit(2) on another user's process needs CAP_SYS_RESOURCE, which root
// lacks in some containers (these machines').
func procNofile(pid int) (soft, hard uint64, err error) {
	path := fmt.Sprintf("/proc/%d/limits", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(strings.TrimPrefix(l, "Max open files")); strings.HasPrefix(l, "Max open files") && len(f) >= 2 {
			soft, _ = strconv.ParseUint(f[0], 10, 64)
			hard, _ = strconv.ParseUint(f[1], 10, 64)
			return soft, hard, nil
		}
	}
	return 0, 0, fmt.Errorf("no open files limit in %s", path)
}

func readProcUint(t *testing.T, path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// hasCapSysResource reports whether this process may raise hard limits.
func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
