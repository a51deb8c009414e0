package containmenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// served is a kin serve run as the test user.
type served struct {
	*exampletest.Proc
	info   map[string]any
	client *client.Client
}

// serveAs starts kin serve as u on home, inside cgroupDir when given.
func serveAs(t *testing.T, kinBin string, u kintest.User, home, cgroupDir string) *served {
	t.Helper()
	cmd := exec.Command(kinBin, "serve", "--json", "--home", home, "--http", "127.0.0.1:0")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Dir(home)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential()}
	if cgroupDir != "" {
		fd, err := syscall.Open(cgroupDir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	s := &served{Proc: exampletest.StartCmd(t, cmd)}
	if err := json.Unmarshal([]byte(s.Line), &s.info); err != nil {
		t.Fatalf("kin serve --json as %s: %v: %s; stderr: %s", u.Name, err, s.Line, s.Stderr())
	}
	c, err := client.New(client.Config{Socket: filepath.Join(home, "kin.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s.client = c
	return s
}

// attack is what a hostile agent tries, one line each: "NAME ok" when the
// attempt succeeded, "NAME refused" when it did not.
const attack = `#!/bin/sh
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name ok"; else echo "$name refused"; fi; }
try read-token cat "$H/operator.token"
try read-keys sh -c 'cat "$H"/keys/*/* "$H"/keys/*'
try list-keys ls "$H/keys"
try read-db cat "$H/kin.db"
try write-db sh -c 'printf x >> "$H/kin.db"'
try op-socket env -u KIN_SOCKET "$KIN" --home "$H" governor set max_generation_depth=42
try op-socket-setsid setsid -w env -i "$KIN" --home "$H" governor set max_generation_depth=43
try tcp-stolen-token env -u KIN_SOCKET KIN_ADDR="$ADDR" KIN_TOKEN="$(cat "$H/operator.token" 2>/dev/null || echo none)" "$KIN" governor set max_generation_depth=44
try read-daemon-environ sh -c 'cat "/proc/$DPID/environ" | grep -q PATH'
try read-daemon-maps sh -c 'cat "/proc/$DPID/maps" | grep -q kin'
try kill-daemon kill -9 "$DPID"
try kill-other-tree kill -9 "$VICTIM"
echo done
exec sleep 1000
`

func TestNonRootDaemonContainsItsAgents(t *testing.T) {
	u := kintest.NewUser(t)
	kinBin := exampletest.Kin(t)
	for _, mode := range []string{"cgroup2", "pid-namespaces"} {
		t.Run(mode, func(t *testing.T) {
			base, err := os.MkdirTemp("", "kinct")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			os.Chmod(base, 0o755)
			home, work := filepath.Join(base, "home"), filepath.Join(base, "work")
			for _, d := range []string{home, work} {
				os.Mkdir(d, 0o700)
				os.Chown(d, u.UID, u.GID)
			}
			cg := ""
			if mode == "cgroup2" {
				cg = kintest.DelegatedCgroup(t, u)
			}
			s := serveAs(t, kinBin, u, home, cg)
			if got := s.info["containment"]; got != mode {
				t.Fatalf("containment %v, want %s (%v)", got, mode, s.info["containment_reason"])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			t.Run("attacks", func(t *testing.T) { attacks(t, ctx, s, kinBin, home, work) })
			t.Run("three-generations", func(t *testing.T) { threeGenerations(t, ctx, s, work) })
			t.Run("pids-limit", func(t *testing.T) { pidsLimit(t, ctx, s, work) })
			t.Run("restart-readopts", func(t *testing.T) { restartReadopts(t, ctx, s, kinBin, u, home, cg) })
		})
	}
}

// pidsLimit: an agent of an ordinary user's daemon that tries to fork 500
// processes under budget.pids 50 gets fewer than 50. Its uid is the
// daemon's, but its user namespace is its own, where the kernel counts its
// tasks (RLIMIT_NPROC).
func pidsLimit(t *testing.T, ctx context.Context, s *served, work string) {
	mark := fmt.Sprintf("0.000%09d", time.Now().UnixNano()%1e9)
	out := filepath.Join(work, "forked")
	t.Cleanup(func() {
		for _, pid := range proctest.WithArg(mark) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	script := fmt.Sprintf(`( i=0; while [ $i -lt 500 ]; do sleep 1000 %s & i=$((i+1)); done ) ; echo forked > %s; exec sleep 1000`, mark, out)
	limit := int64(50)
	a, err := s.client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "forker", Responsible: "containment test", Policy: &kin.Policy{Budget: &kin.Budget{Pids: &limit}}},
		Command:         []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 30*time.Second, "the fork loop to end", func() bool {
		_, err := os.Stat(out)
		return err == nil
	})
	if n := len(proctest.WithArg(mark)); n >= int(limit) || n < int(limit)/2 {
		t.Errorf("the agent started %d of 500 processes under budget.pids %d", n, limit)
	}
	pol, err := s.client.Policy(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l := pol.Effective.Limits; len(l) == 0 || l[0].Name != "pids" || l[0].Scope == kin.LimitNone {
		t.Errorf("the pids limit is not said to be enforced: %+v", l)
	}
	if _, err := s.client.Stop(ctx, kin.StopRequest{ID: a.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "the agent's processes to end with it", func() bool { return len(proctest.WithArg(mark)) == 0 })
}

func spawn(t *testing.T, ctx context.Context, c *client.Client, name string, env []string, argv ...string) *kin.Agent {
	t.Helper()
	a, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Responsible: "containment test"}, Command: argv, Env: env})
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	return a
}

func attacks(t *testing.T, ctx context.Context, s *served, kinBin, home, work string) {
	script := filepath.Join(work, "attack.sh")
	os.WriteFile(script, []byte(attack), 0o755)
	os.Chmod(script, 0o755)
	govBefore, err := s.client.Governor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := spawn(t, ctx, s.client, "victim", nil, "/bin/sleep", "1000")
	addr, _ := s.info["http"].(string)
	attacker := spawn(t, ctx, s.client, "attacker", []string{
		"H=" + home, "KIN=" + kinBin, "ADDR=" + addr,
		"DPID=" + strconv.Itoa(s.Pid()), "VICTIM=" + strconv.Itoa(victim.PID),
	}, "/bin/sh", script)
	var log string
	kintest.WaitFor(t, 60*time.Second, "the attacker to finish", func() bool {
		var b strings.Builder
		s.client.Logs(ctx, kin.LogsRequest{ID: attacker.ID}, func(p []byte) error { b.Write(p); return nil })
		log = b.String()
		return strings.Contains(log, "done\n")
	})
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.HasSuffix(line, " ok") {
			t.Errorf("from inside an agent, %s", line)
		}
	}
	t.Logf("attacker's log:\n%s", log)
	if _, err := s.client.Status(ctx); err != nil {
		t.Fatalf("the daemon stopped answering: %v", err)
	}
	if err := syscall.Kill(victim.PID, 0); err != nil {
		t.Errorf("the other tree's agent died: %v", err)
	}
	govAfter, err := s.client.Governor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(govAfter) != fmt.Sprint(govBefore) {
		t.Errorf("the governor changed: %v -> %v", govBefore, govAfter)
	}
	if es, _ := s.client.Events(ctx, kin.EventFilter{Types: []string{"governor.changed"}}); len(es) > 0 {
		t.Errorf("governor.changed recorded: %+v", es)
	}
	zero := kin.Duration(0)
	for _, a := range []*kin.Agent{victim, attacker} {
		s.client.Stop(ctx, kin.StopRequest{ID: a.ID, Grace: &zero})
	}
}

func threeGenerations(t *testing.T, ctx context.Context, s *served, work string) {
	mark := strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	write := func(name, body string) string {
		p := filepath.Join(work, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
		os.Chmod(p, 0o755)
		return p
	}
	gen2 := write("gen2.sh", `setsid env -i /bin/sh -c 'trap "" TERM; exec sleep 1002.`+mark+`' </dev/null >/dev/null 2>&1 &
trap "" TERM
exec sleep 1003.`+mark)
	gen1 := write("gen1.sh", `kin spawn --name g2-`+mark+` -- /bin/sh `+gen2+` >/dev/null || exit 9
exec sleep 1001.`+mark)
	gen0 := write("gen0.sh", `kin spawn --name g1-`+mark+` -- /bin/sh `+gen1+` >/dev/null || exit 9
exec sleep 1000.`+mark)
	root := spawn(t, ctx, s.client, "g0-"+mark, nil, "/bin/sh", gen0)
	kintest.WaitFor(t, 30*time.Second, "three generations and the escaper", func() bool {
		return len(proctest.WithArg("1002."+mark)) == 1 && len(proctest.WithArg("1003."+mark)) == 1
	})
	root, _ = s.client.Agent(ctx, root.ID)
	if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var tree []kin.Agent
	kintest.WaitFor(t, 30*time.Second, "every descendant recorded cancelled", func() bool {
		all, err := s.client.Agents(ctx, kin.AgentFilter{})
		if err != nil {
			return false
		}
		tree = tree[:0]
		done := 0
		for _, a := range all {
			if strings.HasSuffix(a.Name, "-"+mark) && a.ID != root.ID {
				tree = append(tree, *a)
				if a.State == kin.StateCancelled {
					done++
				}
			}
		}
		return len(tree) == 2 && done == 2
	})
	if left := proctest.WithArg("." + mark); len(left) > 0 {
		t.Fatalf("processes of the cancelled tree still run: %v", left)
	}
}

func restartReadopts(t *testing.T, ctx context.Context, s *served, kinBin string, u kintest.User, home, cg string) {
	a := spawn(t, ctx, s.client, "survivor", nil, "/bin/sleep", "1000")
	s.Kill()
	if err := syscall.Kill(a.PID, 0); err != nil {
		t.Fatalf("kill -9 of the daemon took its agent along: %v", err)
	}
	s2 := serveAs(t, kinBin, u, home, cg)
	// The restarted daemon serves at once and checks its agents in the background.
	var got *kin.Agent
	kintest.WaitFor(t, 10*time.Second, "the survivor to be checked", func() bool {
		var err error
		got, err = s2.client.Agent(ctx, a.ID)
		return err == nil && !got.Reconciling
	})
	if !got.Running() || got.PID != a.PID || syscall.Kill(a.PID, 0) != nil {
		t.Fatalf("after the restart the survivor is %s/%s pid %d (was %d): not re-adopted", got.Status, got.State, got.PID, a.PID)
	}
	if es, _ := s2.client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentAdopted}}); len(es) == 0 {
		t.Error("no agent.adopted event")
	}
	if err := s2.Stop(); err != nil {
		t.Errorf("kin serve stopped with %v", err)
	}
	kintest.WaitFor(t, 10*time.Second, "the survivor stopped with its daemon", func() bool { return syscall.Kill(a.PID, 0) != nil })
}
