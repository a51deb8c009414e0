package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
)

// TestHomeAgentsCannotReachIsRefused: a root daemon runs agents as their
// own uids, which must pass through every directory above their sessions.
// A home under a directory no other user may traverse (root's ~/.kin under
// a 0700 /root) would make every spawn fail with "permission denied"; kin
// serve refuses it at start and names the directory and the fix. Given an
// agent filesystem others can reach (--ctx), the same home serves agents.
func TestHomeAgentsCannotReachIsRefused(t *testing.T) {
	needRoot(t)
	private, err := os.MkdirTemp("", "kinpriv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(private) })
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.UIDRangeDir = filepath.Join(private, "home"), "off", t.TempDir()
	d, err := daemon.Start(context.Background(), cfg)
	if err == nil {
		d.Close()
		t.Fatal("a root daemon started with its agent filesystem under a 0700 directory")
	}
	for _, want := range []string{private + " (mode 0700)", "--ctx", "chmod o+x " + private} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	ctxDir := filepath.Join(filepath.Dir(kintest.TempHome(t)), "ctx")
	kd := kintest.StartDaemon(t, kintest.WithHome(filepath.Join(private, "home")), func(c *daemon.Config) { c.Ctx = ctxDir })
	spawnAgent(t, kd.Client, "reachable", 0, "sleep")
}
