package fleettest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/proctest"
)

// startWithin bounds a daemon's start, until its start-up line.
const startWithin = 60 * time.Second

// Host is one kin serve of the fleet, in its network namespace.
type Host struct {
	// Name is the host's name, given to its daemon as KIN_HOST_NAME.
	Name string
	// Netns is its network namespace (/run/netns/<Netns>), Veth the
	// bridge's end of its link (eth0 is the other, inside), IP its address.
	Netns, Veth string
	IP          netip.Addr
	// HTTP is its HTTP API's address (IP:HTTPPort), reachable from the
	// root namespace and every host over the bridge; Token is the
	// operator token that API wants.
	HTTP, Token string
	// Home is its home, the same across restarts; Socket its operator
	// socket there.
	Home, Socket string
	// Client talks to the daemon over its socket (any daemon on Home:
	// it survives restarts).
	Client *client.Client

	fleet *Fleet
	index int

	mu      sync.Mutex
	proc    *exampletest.Proc
	info    ServeInfo
	stderrs []string // earlier daemons' stderr, for a failed test's log
	cgroups []string // every cgroup root a daemon of this host reported
	pids    []int    // every daemon's pid
}

// ServeInfo is what kin serve --json printed once it listened.
type ServeInfo struct {
	Version           string `json:"version"`
	Home              string `json:"home"`
	Socket            string `json:"socket"`
	HTTP              string `json:"http"`
	TokenFile         string `json:"token_file"`
	Store             string `json:"store"`
	Containment       string `json:"containment"`
	ContainmentReason string `json:"containment_reason"`
	CgroupRoot        string `json:"cgroup_root"`
	AgentUIDRange     string `json:"agent_uid_range"`
	Sandbox           string `json:"sandbox"`
}

// Info is what the running (or last) daemon printed at start: its
// containment, cgroup root, uid range, store (redacted).
func (h *Host) Info() ServeInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// Line is the running (or last) daemon's start-up output as printed.
func (h *Host) Line() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return ""
	}
	return h.proc.Line
}

// Pid is the running (or last) daemon's pid, 0 before the first start.
func (h *Host) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return 0
	}
	return h.proc.Pid()
}

// Running says whether the host's daemon runs.
func (h *Host) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running()
}

func (h *Host) running() bool {
	if h.proc == nil {
		return false
	}
	select {
	case <-h.proc.Exited():
		return false
	default:
		return true
	}
}

// Stderr is what the running (or last) daemon wrote to stderr: its log.
func (h *Host) Stderr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return ""
	}
	return h.proc.Stderr()
}

// CgroupRoots are the cgroup roots this host's daemons reported (one,
// unless a restart chose another).
func (h *Host) CgroupRoots() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cgroups...)
}

// DaemonPids are the pids of every daemon this host ran.
func (h *Host) DaemonPids() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.pids...)
}

// serveArgs is the host's kin serve command line, after the binary.
func (h *Host) serveArgs() []string {
	f := h.fleet
	args := []string{"serve", "--home", h.Home, "--json", "--http", h.HTTP}
	args = append(args, f.cfg.serveArgs...)
	return append(args, f.cfg.hostArgs[h.Name]...)
}

// start starts the host's daemon in its namespace and waits for its
// start-up line.
func (h *Host) start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running() {
		return fmt.Errorf("its daemon (pid %d) still runs", h.proc.Pid())
	}
	f := h.fleet
	if h.Home == "" {
		dir := filepath.Join(f.Dir, h.Name)
		if err := os.Mkdir(dir, 0o711); err != nil {
			return err
		}
		h.Home = filepath.Join(dir, "home")
		h.Socket = filepath.Join(h.Home, "kin.sock")
		if err := copyDir(f.LogKeyDir, filepath.Join(h.Home, "keys", "log")); err != nil {
			return fmt.Errorf("the fleet's log key: %w", err)
		}
		c, err := client.New(client.Config{Socket: h.Socket})
		if err != nil {
			return err
		}
		h.Client = c
	}
	if h.proc != nil {
		h.stderrs = append(h.stderrs, h.proc.Stderr())
	}
	cmd := h.command(f.Bin, h.serveArgs()...)
	cmd.Env = append(cmd.Env,
		"KIN_STORE="+f.Store,
		"KIN_UID_RANGE_DIR="+f.UIDRangeDir,
		"KIN_HOST_NAME="+h.Name, // kin serve's --host-name, by its variable
	)
	cmd.Env = append(cmd.Env, f.cfg.env...)
	p, err := launchHeld(cmd)
	if p != nil {
		h.proc = p
		h.pids = append(h.pids, p.Pid())
	}
	if err != nil {
		return err
	}
	var info ServeInfo
	if err := json.Unmarshal([]byte(p.Line), &info); err != nil || info.Socket == "" {
		return fmt.Errorf("kin serve --json said %q (%v); stderr: %s", p.Line, err, p.Stderr())
	}
	h.info = info
	if info.CgroupRoot != "" && !slices.Contains(h.cgroups, info.CgroupRoot) {
		h.cgroups = append(h.cgroups, info.CgroupRoot)
		if err := appendLine(filepath.Join(f.Dir, "cgroups"), info.CgroupRoot); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(info.TokenFile)
	if err != nil {
		return fmt.Errorf("operator token: %v", err)
	}
	h.Token = strings.TrimSpace(string(tok))
	return nil
}

// launchHeld launches cmd (exampletest.Launch) with PDEATHSIG=SIGKILL from
// an OS thread held until the process exits: PDEATHSIG follows the thread
// that started the process, so the daemon dies with the test binary and
// not before.
func launchHeld(cmd *exec.Cmd) (*exampletest.Proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	type result struct {
		p   *exampletest.Proc
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the process
		p, err := exampletest.Launch(cmd, startWithin)
		done <- result{p, err}
		if p != nil {
			<-p.Exited()
		}
	}()
	r := <-done
	return r.p, r.err
}

// command is name with args run in the host's network namespace (only:
// the mount namespace stays the machine's, so kin sees the cgroup v2
// mount `ip netns exec` would hide by remounting /sys), in exampletest's
// clean environment.
func (h *Host) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", h.nsenterArgs(name, args)...)
	cmd.Env = exampletest.Env()
	return cmd
}

func (h *Host) nsenterArgs(name string, args []string) []string {
	return append([]string{"--net=" + netnsDir + "/" + h.Netns, "--", name}, args...)
}

// Command is name with args to run in the host's network namespace, as a
// program on that host.
func (h *Host) Command(name string, args ...string) *exec.Cmd { return h.command(name, args...) }

// Kin runs `kin --home HOME args...` on the host (in its namespace,
// against its daemon's socket) within 3 minutes, and returns its combined
// output.
func (h *Host) Kin(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", h.nsenterArgs(h.fleet.Bin, append([]string{"--home", h.Home}, args...))...)
	cmd.Env = exampletest.Env()
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Exec is Kin that fails t when kin fails, showing its output.
func (h *Host) Exec(t testing.TB, args ...string) string {
	t.Helper()
	out, err := h.Kin(args...)
	if err != nil {
		t.Fatalf("host %s: kin %s: %v\n%s", h.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Kill9 kills the host's daemon with SIGKILL, as a crash would, and waits
// until it is reaped; its agents run on.
func (h *Host) Kill9(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		t.Fatalf("fleettest: host %s has no daemon to kill", h.Name)
	}
	p.Kill()
}

// Stop stops the host's daemon as an operator would (SIGTERM: it stops its
// agents, unless told to leave them running), and returns how it exited.
func (h *Host) Stop() error {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop()
}

// Restart starts the host's daemon again, on the same home, store, name
// and flags, once the last one has ended (Kill9, Stop). It fails t if a
// daemon still runs or the new one does not start.
func (h *Host) Restart(t testing.TB) {
	t.Helper()
	if err := h.start(); err != nil {
		t.Fatalf("fleettest: restart host %s: %v", h.Name, err)
	}
}

// CutLink takes the host's eth0 down: it loses the store and every other
// host (its addresses stay; its routes go).
func (h *Host) CutLink(t testing.TB) {
	t.Helper()
	if err := ipCmd("-n", h.Netns, "link", "set", "eth0", "down"); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
}

// RestoreLink brings the host's eth0 back up and its default route (which
// the link going down removed).
func (h *Host) RestoreLink(t testing.TB) {
	t.Helper()
	if err := ipCmd("-n", h.Netns, "link", "set", "eth0", "up"); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	if err := ipCmd("-n", h.Netns, "route", "replace", "default", "via", h.fleet.Gateway.String()); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
}

// teardown stops the daemon, then kills by pid whatever still runs in the
// host's namespace and every cgroup root its daemons reported, and removes
// those cgroups. It returns what went wrong.
func (h *Host) teardown() []error {
	var errs []error
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if h.Client != nil {
		defer h.Client.Close()
	}
	// A host cut off from the store (a test that failed before restoring
	// its link) gets it back, so that its daemon stops as it would.
	if h.linkDown() {
		ipCmd("-n", h.Netns, "link", "set", "eth0", "up")
		ipCmd("-n", h.Netns, "route", "replace", "default", "via", h.fleet.Gateway.String())
	}
	if p != nil {
		p.Stop()
	}
	if err := killNetns(h.Netns); err != nil {
		errs = append(errs, err)
	}
	for _, cg := range h.CgroupRoots() {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// linkDown says whether the host's eth0 is down (CutLink).
func (h *Host) linkDown() bool {
	out, err := exec.Command("ip", "-n", h.Netns, "-o", "link", "show", "eth0").Output()
	return err == nil && !strings.Contains(string(out), ",UP")
}

// logDaemon logs the daemons' stderr (their JSON logs), for a failed test.
func (h *Host) logDaemon(t testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.stderrs {
		t.Logf("host %s, daemon %d of %d, stderr:\n%s", h.Name, i+1, len(h.stderrs)+1, tail(s))
	}
	if h.proc != nil {
		t.Logf("host %s, last daemon (pid %d), stderr:\n%s", h.Name, h.proc.Pid(), tail(h.proc.Stderr()))
	}
}

// killNetns kills every process in namespace ns by pid and waits until
// they are gone.
func killNetns(ns string) error {
	if _, err := os.Stat(netnsDir + "/" + ns); err != nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return fmt.Errorf("ip netns pids %s: %v", ns, err)
		}
		var live []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && proctest.Alive(pid) {
				live = append(live, pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in namespace %s outlived SIGKILL for 30 s", live, ns)
		}
		time.Sleep(delay)
	}
}

// removeCgroup kills what runs in the cgroup tree at dir (cgroup.kill) and
// removes it, children first. A tree already gone is no error.
func removeCgroup(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(30 * time.Second)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || !bytes.Contains(b, []byte("populated 1")) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still populated 30 s after cgroup.kill", dir)
		}
		time.Sleep(delay)
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %v", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func tail(s string) string {
	if len(s) > 8000 {
		return "..." + s[len(s)-8000:]
	}
	return s
}

// copyDir copies the files of dir into a new private directory to
// (making its parents private too).
func copyDir(dir, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for p := to; p != filepath.Dir(p) && filepath.Base(p) != "home"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o700); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
