package daemon_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/leanshim"
)

// TestSpawnsWithoutTheLeanShim: where the embedded lean shim cannot be
// installed (here a directory stands where it goes), kin serve says so in
// its log, names what it falls back to, and still starts agents sandboxed,
// through a copy of its own binary.
func TestSpawnsWithoutTheLeanShim(t *testing.T) {
	home := kintest.TempHome(t)
	if err := os.MkdirAll(filepath.Join(home, "ctx", "bin", leanshim.Name, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logged lineLog
	d := kintest.StartDaemon(t, kintest.WithHome(home), func(c *daemon.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	logged.mu.Lock()
	out := logged.buf.String()
	logged.mu.Unlock()
	if !strings.Contains(out, "agents start through the kin binary itself") {
		t.Fatalf("the daemon did not say it has no lean shim; its log:\n%s", out)
	}
	a := spawnAgent(t, d.Client, "no-lean-shim", 0, "sleep")
	// The shim (the fallback) ran and exec'd the agent's command.
	bin, err := kintest.AgentBinaryPath()
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 30*time.Second, "the agent's command to run", func() bool {
		exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(a.PID), "exe"))
		return exe == bin
	})
	got, err := d.Client.Agent(ctx, a.ID)
	if err != nil || !got.Running() {
		t.Fatalf("the agent is not running: %+v, %v", got, err)
	}
}
