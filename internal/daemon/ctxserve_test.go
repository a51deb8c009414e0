package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/runner"
	"github.com/kin-agents/kin/kin"
)

// TestControlFilesServed: a root daemon with /dev/fuse serves the control
// files (ctxfuse). Read right after the spawn returns, they already hold
// the agent's values (no writer in between: the disk's writer lags, so
// with KIN_CTX_DISK=1 this part is skipped); a status change is in the
// next read. Either way an agent, under its Landlock view and its own uid,
// reaches its own socket in agent/ (a rule naming a path in the mount) and
// is refused another agent's control files, the listing of agent/ and any
// write to a control file.
func TestControlFilesServed(t *testing.T) {
	d := kintest.StartDaemon(t)
	agentDir := filepath.Join(d.CtxRoot(), "agent")
	other := spawnAgent(t, d.Client, "served-other", 0, "sleep")
	switch {
	case os.Getenv(runner.EnvCtxDisk) == "1":
		if d.ServedControl() {
			t.Fatal(runner.EnvCtxDisk + "=1, and the control files are served")
		}
	case ctxfuse.Available() != nil:
		t.Logf("FUSE: %v: the control files are on disk", ctxfuse.Available())
	case !d.ServedControl():
		t.Fatal("root with /dev/fuse, and the control files are not served")
	default:
		if got := readFile(t, filepath.Join(agentDir, "served-other.d", ctxfs.CtlPID)); got != strconv.Itoa(other.PID)+"\n" {
			t.Errorf("pid right after the spawn: %q, the spawn said %d", got, other.PID)
		}
		var meta kin.Agent
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(agentDir, "served-other.d", ctxfs.CtlMeta))), &meta); err != nil ||
			meta.ID != other.ID || meta.PID != other.PID || meta.State != other.State {
			t.Errorf("meta.json right after the spawn: %+v, %v", meta, err)
		}
		if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: other.ID, Action: kin.ActionSuspend}); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(agentDir, "served-other.d", ctxfs.CtlStatus)); got != "suspended\n" {
			t.Errorf("status after the suspension: %q", got)
		}
	}

	own := filepath.Join(agentDir, "served-reader.d")
	denied := []string{
		"read:" + filepath.Join(agentDir, "served-other.d", ctxfs.CtlMeta),
		"list:" + filepath.Join(agentDir, "served-other.d"),
		"list:" + agentDir,
		"append:" + filepath.Join(own, ctxfs.CtlStatus),
	}
	// Its own control files: the default view hides kin's home and agent
	// filesystem (sandbox's view.go) but grants each agent its own
	// control directory and id file, read-only.
	mine := []string{"read:" + filepath.Join(own, ctxfs.CtlStatus), "read:" + filepath.Join(agentDir, "served-reader")}
	out := outPath(t)
	mode := "trespass " + strings.Join(append(append([]string{}, mine...), denied...), " ")
	spawnAgent(t, d.Client, "served-reader", 0, mode, withEnv("KINTEST_OUT="+out))
	got := waitOut(t, out, "trespass done")
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			res[strings.Replace(k, " ", ":", 1)] = v
		}
	}
	for _, p := range denied {
		if r := res[p]; !strings.HasSuffix(r, "permission denied") {
			t.Errorf("%s: %q; want permission denied", p, r)
		}
	}
	for _, p := range mine {
		if r := res[p]; r != "ok" {
			t.Errorf("the agent's own %s: %q; want ok", p, r)
		}
	}
	// Its socket in agent/, named by its Landlock rules, answers it.
	who := outPath(t)
	whoami := spawnAgent(t, d.Client, "served-whoami", 0, "whoami", withEnv("KINTEST_OUT="+who))
	if got := waitOut(t, who, "id:"); !strings.Contains(got, "id:"+whoami.ID.String()) {
		t.Errorf("whoami through the agent's socket: %q", got)
	}
}

// TestControlFilesOnDiskGrantedFromTheStart: where the control files are
// written to disk (KIN_CTX_DISK=1, or a daemon that is not root), an
// agent reads its own agent/<name> and agent/<name>.d/ for its whole life,
// also when they were not there yet, or were an earlier agent's, when its
// shim granted them: the spawn makes them first. (The writer, behind the
// store, made them after the shim looked: the grant of a new name's
// directory was skipped, and a reused name's id file was replaced under a
// grant on the old file.)
func TestControlFilesOnDiskGrantedFromTheStart(t *testing.T) {
	t.Setenv(runner.EnvCtxDisk, "1")
	d := kintest.StartDaemon(t)
	if d.ServedControl() {
		t.Fatal(runner.EnvCtxDisk + "=1, and the control files are served")
	}
	agentDir := filepath.Join(d.CtxRoot(), "agent")
	// An earlier agent of the reused name, ended: its files stay.
	first := spawnAgent(t, d.Client, "disk-reused", 0, "sleep")
	kintest.WaitFor(t, 10*time.Second, "the first agent's control files", func() bool {
		b, err := os.ReadFile(filepath.Join(agentDir, "disk-reused"))
		return err == nil && string(b) == first.ID.String()+"\n"
	})
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: first.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "the first agent ended", func() bool {
		a, err := d.Client.Agent(ctx, first.ID)
		return err == nil && !a.EndedAt.IsZero()
	})
	for _, name := range []string{"disk-new", "disk-reused"} {
		t.Run(name, func(t *testing.T) {
			// A burst of registrations first, as a planner's fan-out:
			// the writer is behind by their files when the agent starts.
			registerBurst(t, d.Client, name+"-burst", 400)
			own := filepath.Join(agentDir, name+".d")
			mine := []string{"read:" + filepath.Join(own, ctxfs.CtlStatus), "read:" + filepath.Join(own, ctxfs.CtlMeta), "read:" + filepath.Join(agentDir, name), "list:" + own}
			out := outPath(t)
			a := spawnAgent(t, d.Client, name, 0, "on-usr1 trespass "+strings.Join(mine, " "), withEnv("KINTEST_OUT="+out))
			waitOut(t, out, "waiting for usr1")
			// The writer has caught up with the start: the files hold the
			// running agent.
			kintest.WaitFor(t, 10*time.Second, "the writer's pid", func() bool {
				b, err := os.ReadFile(filepath.Join(own, ctxfs.CtlPID))
				return err == nil && string(b) == strconv.Itoa(a.PID)+"\n"
			})
			if got := readFile(t, filepath.Join(agentDir, name)); got != a.ID.String()+"\n" {
				t.Fatalf("agent/%s: %q, want %d", name, got, a.ID)
			}
			if err := syscall.Kill(a.PID, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			got := waitOut(t, out, "trespass done")
			for _, p := range mine {
				verb, target, _ := strings.Cut(p, ":")
				if !strings.Contains(got, verb+" "+target+": ok\n") {
					t.Errorf("the agent's own %s: want ok; it wrote:\n%s", p, got)
				}
			}
		})
	}
}

// registerBurst registers n agents named prefix-<i> from 8 clients.
func registerBurst(t *testing.T, svc kin.Service, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, err := svc.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("%s-%d", prefix, i), Responsible: "Dr. Schmidt"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
