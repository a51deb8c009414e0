package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// The link-swap race of issue 18: a parent swaps the folder it granted a
// child for a link to a folder it cannot see, between kin's policy check
// and the child's start. Real processes, real Landlock, a real daemon.

const raceSecret = "HIDDEN-SECRET"

// runSwapSpawn is the parent agent: args are WORK HIDDEN N. It swaps
// WORK/shared (a folder) with WORK/shared.link (a link to HIDDEN) in a
// tight loop (renameat2 RENAME_EXCHANGE: the path is always one or the
// other) while it spawns N children, each asking for WORK/shared rw and
// trying to read HIDDEN's secret. It writes "spawned ID" or "refused CODE
// ERROR" per child, then "done swaps=N".
func runSwapSpawn(args []string, c *client.Client, out func(string, ...any)) int {
	if len(args) != 3 {
		out("usage: swap-spawn WORK HIDDEN N")
		return 2
	}
	work, hidden := args[0], args[1]
	n, _ := strconv.Atoi(args[2])
	shared, link := filepath.Join(work, "shared"), filepath.Join(work, "shared.link")
	if err := os.Symlink(hidden, link); err != nil {
		out("symlink: %v", err)
		return 2
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, shared, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				out("swap: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()
	script := fmt.Sprintf("cat %s/secret 2>/dev/null || echo NOLEAK", hidden)
	grace := kin.Duration(0)
	for i := range n {
		a, err := c.Spawn(context.Background(), kin.SpawnRequest{
			RegisterRequest: kin.RegisterRequest{Name: fmt.Sprintf("kid-%d", i), Policy: &kin.Policy{Mounts: map[string]kin.Mode{shared: kin.ModeRW}}},
			Command:         []string{"/bin/sh", "-c", script},
			Grace:           &grace,
		})
		if err != nil {
			out("refused %s %s", kin.ErrorCodeOf(err), strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		out("spawned %d", a.ID)
	}
	stop.Store(true)
	<-swapped
	// Leave the folder in place.
	if fi, err := os.Lstat(shared); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		unix.Renameat2(unix.AT_FDCWD, shared, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
	}
	out("done swaps=%d", swaps.Load())
	return 0
}

func TestLinkSwapRaceNeverGivesAChildTheHiddenTarget(t *testing.T) {
	if sandbox.ABI() == 0 {
		t.Skip("Landlock is unavailable on this kernel: the race is about what Landlock grants")
	}
	const children = 200
	d := kintest.StartDaemon(t)
	base := kintest.SharedDir(t)
	work, hidden := filepath.Join(base, "work"), filepath.Join(base, "hidden")
	shared := filepath.Join(work, "shared")
	for _, dir := range []string{work, shared, hidden} {
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// Readable by every uid: only Landlock keeps it from the agents.
	if err := os.Chmod(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hidden, "secret"), []byte(raceSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{work, shared} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(work, "out")
	bin := kintest.AgentBinary(t)
	g := kin.Duration(0)
	parent, err := d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "swapper", Responsible: "Dr. Schmidt",
			Policy: &kin.Policy{Mounts: map[string]kin.Mode{work: kin.ModeRW, filepath.Dir(bin): kin.ModeRO}}},
		Command: []string{bin},
		Env:     []string{"KINTEST_MODE=swap-spawn " + work + " " + hidden + " " + strconv.Itoa(children), "KINTEST_OUT=" + out},
		Grace:   &g,
	})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	kintest.WaitFor(t, 5*time.Minute, "the parent to spawn its children", func() bool {
		b, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.HasPrefix(lines[len(lines)-1], "done") || strings.HasPrefix(lines[len(lines)-1], "usage") ||
			strings.HasPrefix(lines[len(lines)-1], "symlink") || strings.HasPrefix(lines[len(lines)-1], "swap")
	})
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: parent.ID}); err != nil && kin.ErrorCodeOf(err) != kin.ECodeInvalidTransition {
		t.Logf("stop parent: %v", err)
	}
	refused := map[string]int{}
	ran, leaks := 0, 0
	for _, l := range lines {
		switch f := strings.Fields(l); f[0] {
		case "refused":
			refused[f[1]]++
			if refused[f[1]] == 1 { // the first of each kind
				t.Logf("a refusal: %s", l)
			}
		case "spawned":
			id, _ := kin.ParseAgentID(f[1])
			_, log := ended(t, d, id)
			if strings.Contains(log, raceSecret) {
				leaks++
			} else {
				ran++
			}
		case "done":
		default:
			t.Fatalf("the parent said %q", l)
		}
	}
	t.Logf("%d spawns while the parent swapped the folder (%s): %d ran and read nothing hidden, refused %v, %d leaked the hidden folder",
		children, lines[len(lines)-1], ran, refused, leaks)
	if leaks > 0 {
		t.Errorf("%d of %d children read %s, which their parent cannot see: a grant was resolved again after kin checked it", leaks, children, hidden)
	}
	if ran+leaks+sum(refused) != children {
		t.Errorf("%d outcomes for %d spawns", ran+leaks+sum(refused), children)
	}
	if ran == 0 {
		t.Errorf("no child ran: the test shows nothing about what a started child gets")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// After a restart the daemon holds agents to the files their checks
// approved before it: they are kept in the stored policy.
func TestRestartedDaemonHoldsAnInheritingChildToItsParentsCheck(t *testing.T) {
	if sandbox.ABI() == 0 {
		t.Skip("Landlock is unavailable on this kernel: nothing is held without it")
	}
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	base := kintest.SharedDir(t)
	work, hidden := filepath.Join(base, "work"), filepath.Join(base, "hidden")
	for _, dir := range []string{work, hidden} {
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(hidden, "secret"), []byte(raceSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parent := registerWith(t, d, "parent", 0, "", &kin.Policy{Mounts: map[string]kin.Mode{work: kin.ModeRW}})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	// The parent's folder is replaced by one its check never saw.
	if err := os.Rename(work, work+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hidden, work); err != nil {
		t.Fatal(err)
	}
	_, err := sh(t, d2, "kid", parent.ID, nil, "cat "+work+"/secret")
	if err == nil || !strings.Contains(err.Error(), `mount "`+work+`" is no longer the file the policy check of agent `+parent.ID.String()+` approved`) {
		t.Fatalf("spawn after the swap = %v, want a refusal naming %s and agent %d's check", err, work, parent.ID)
	}
	// Put back, the child runs with it.
	if err := os.Rename(work, hidden); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(work+".old", work); err != nil {
		t.Fatal(err)
	}
	kid, err := sh(t, d2, "kid2", parent.ID, nil, "echo ok > "+work+"/f && cat "+work+"/f; cat "+hidden+"/secret 2>/dev/null || echo NOLEAK")
	if err != nil {
		t.Fatal(err)
	}
	if _, out := ended(t, d2, kid.ID); out != "ok\nNOLEAK\n" {
		t.Fatalf("the child with its parent's checked folder: output %q, want ok and NOLEAK", out)
	}
}
