// Package kintest starts real kin daemons for tests and offers the helpers
// tests share: WaitFor (no sleeps) and a settable clock.
package kintest

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/gateway"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/sandbox"
)

// The test binary can be kin's sandbox shim. Where a test points the
// daemon's ShimPath at AgentBinary, a copy of the running test binary, the
// daemon starts every agent as [that binary, "sandbox-exec", ...]. Given
// those arguments a test binary would run its whole suite as the agent
// (testing ignores a positional argument), recursively. Every test binary
// that starts a daemon through kintest links this package, so its init is
// the one place that makes all of them the shim: it runs sandbox.Main,
// which execs the agent's command or exits, and never returns to the tests.
func init() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
}

// Daemon is a daemon started for a test, with a client on its socket.
type Daemon struct {
	*daemon.Daemon
	Client *client.Client
	Home   string
	Config daemon.Config
}

// Option adjusts the test daemon's config.
type Option func(*daemon.Config)

// WithProfile selects a profile by name or path.
func WithProfile(p string) Option { return func(c *daemon.Config) { c.Profile = p } }

// WithClock injects a clock.
func WithClock(f func() time.Time) Option { return func(c *daemon.Config) { c.Clock = f } }

// WithHTTP serves the API on a free loopback port too.
func WithHTTP() Option { return func(c *daemon.Config) { c.HTTPAddr = "127.0.0.1:0" } }

// WithContainment forces "cgroup2" or "process-groups".
func WithContainment(c string) Option { return func(cfg *daemon.Config) { cfg.Containment = c } }

// WithAgentUIDs runs agents as their own uids (true, the default as root)
// or as the daemon's user (false).
func WithAgentUIDs(on bool) Option { return func(c *daemon.Config) { c.AgentUIDs = on } }

// WithUIDRange asks for the home's agent uid range, START:COUNT.
func WithUIDRange(r string) Option { return func(c *daemon.Config) { c.UIDRange = r } }

// WithUIDRangeDir shares a host uid allocation directory between the
// test's daemons. Without it each test daemon allocates from a directory
// of its own (so tests never write the host's /var/lib/kin).
func WithUIDRangeDir(dir string) Option { return func(c *daemon.Config) { c.UIDRangeDir = dir } }

// WithTestBinaryShim starts every agent through the test binary as the
// sandbox shim (see init) rather than the embedded lean shim: for a test of
// a change to package sandbox before `go generate ./internal/leanshim`.
func WithTestBinaryShim() Option {
	return func(c *daemon.Config) { c.ShimPath, _ = AgentBinaryPath() }
}

// WithLeaveRunning makes the daemon's Close leave agents running.
func WithLeaveRunning() Option { return func(c *daemon.Config) { c.LeaveRunning = true } }

// WithShutdownTimeout bounds the daemon's shutdown (kin serve
// --shutdown-timeout).
func WithShutdownTimeout(d time.Duration) Option {
	return func(c *daemon.Config) { c.ShutdownTimeout = d }
}

// WithStore runs the daemon on the store dsn names (e.g. a PostgreSQL
// database several test daemons share) instead of its home's own.
func WithStore(dsn string) Option { return func(c *daemon.Config) { c.Store = dsn } }

// WithHostName names the daemon's host in the fleet of daemons on its
// store (kin serve --host-name).
func WithHostName(name string) Option { return func(c *daemon.Config) { c.HostName = name } }

// WithLogKeyDir signs the log with the key in dir (made there if missing):
// every test daemon of one fleet takes the same.
func WithLogKeyDir(dir string) Option { return func(c *daemon.Config) { c.LogKeyDir = dir } }

// WithHostLease sets the host's lease on its name (kin serve's default is
// 15 s).
func WithHostLease(d time.Duration) Option { return func(c *daemon.Config) { c.HostLease = d } }

// WithModelUpstream adds a model gateway upstream (kin serve
// --model-upstream NAME=URL --model-api NAME=API --model-key NAME=...):
// api is "openai" or "anthropic", url the upstream's base (without /v1),
// key the operator's key for it ("" for none). The gateway is on once a
// daemon has one; agents get OPENAI_BASE_URL etc. only when the daemon has
// an HTTP address too (WithHTTP).
func WithModelUpstream(name, api, rawURL, key string) Option {
	return func(c *daemon.Config) {
		u, err := url.Parse(rawURL)
		if err != nil {
			panic("kintest.WithModelUpstream: " + err.Error())
		}
		c.ModelUpstreams = append(c.ModelUpstreams, gateway.Upstream{Name: name, API: gateway.API(api), URL: u, Key: gateway.NewSecret(key)})
	}
}

// WithPolicyConfig uses the permission authority's configuration file
// path (kin serve --policy-config: global_deny, presets, prices).
func WithPolicyConfig(path string) Option { return func(c *daemon.Config) { c.PolicyConfig = path } }

// WithHome uses the given home instead of a fresh temporary one (to restart
// a daemon on the same store).
func WithHome(home string) Option { return func(c *daemon.Config) { c.Home = home } }

// EnvStore chooses the store of the daemons tests start: "" or "sqlite"
// for the home's SQLite file, "postgres" for a database of the test
// binary's PostgreSQL cluster (package pgtest), one per home.
const EnvStore = "KIN_TEST_STORE"

// Store is the store DSN of a test daemon on home under $KIN_TEST_STORE:
// "" (the home's kin.db) for SQLite; for PostgreSQL the DSN of home's own
// database, the same for every daemon on home (a restart finds its
// store), made at the first call and dropped when that call's test ends
// (a home shared by several subtests gets its database from their parent:
// call Store there first). Under "postgres" the test skips where
// PostgreSQL is missing (fails under KIN_TEST_REQUIRE_POSTGRES=1) and
// fails if its package's TestMain does not call pgtest.Main.
func Store(t testing.TB, home string) string {
	t.Helper()
	switch s := os.Getenv(EnvStore); s {
	case "", "sqlite":
		return ""
	case "postgres":
		return pgtest.DatabaseFor(t, home)
	default:
		t.Fatalf("%s=%q: want sqlite, postgres, or unset (sqlite)", EnvStore, s)
		return ""
	}
}

// StartDaemon runs a real daemon on a temporary home with a real SQLite
// file (or the store $KIN_TEST_STORE chooses: see Store), and closes it
// when the test ends.
func StartDaemon(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	cfg := daemon.DefaultConfig()
	cfg.Home = shortTempDir(t)
	cfg.HTTPAddr = "off"
	cfg.Version = "test"
	// Every agent starts through the embedded lean shim, as in a kin
	// binary (package leanshim); WithTestBinaryShim makes the test binary
	// the shim instead (see init).
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.UIDRangeDir == "" {
		cfg.UIDRangeDir = filepath.Join(cfg.Home, "host-uid-ranges")
	}
	if cfg.Store == "" { // before the daemon, so its store outlives it (cleanups run last first)
		cfg.Store = Store(t, cfg.Home)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	c, err := client.New(client.Config{Socket: d.SocketPath()})
	if err != nil {
		d.Close()
		t.Fatalf("client: %v", err)
	}
	var cgroupRoot string
	if st, err := d.Status(ctx); err == nil {
		cgroupRoot = st.CgroupRoot
	}
	t.Cleanup(func() {
		c.Close()
		if err := d.Close(); err != nil {
			t.Errorf("close daemon: %v", err)
		}
		if n, err := ctxfuse.Mounted(filepath.Join(d.CtxRoot(), "agent")); n > 0 || err != nil {
			t.Errorf("the daemon left its served agent/ mounted (%d, %v)", n, err)
		}
		if cgroupRoot != "" && !cfg.LeaveRunning {
			if _, err := os.Stat(cgroupRoot); err == nil {
				t.Errorf("the daemon left its cgroup %s behind", cgroupRoot)
			}
		}
	})
	return &Daemon{Daemon: d, Client: c, Home: cfg.Home, Config: cfg}
}

// shortTempDir returns a temporary directory with a short path: Unix socket
// paths are limited to 108 bytes and t.TempDir() can be longer.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kin")
	if err != nil {
		t.Fatal(err)
	}
	// Agents run as their own unprivileged uids: they must be able to pass
	// through to their sockets and sessions in the home.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A daemon the test killed leaves its served agent/ mounted, dead.
		if _, err := ctxfuse.DetachUnder(dir); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	return filepath.Join(dir, "home")
}

// TempHome returns a fresh short home directory path (not yet created).
func TempHome(t testing.TB) string { return shortTempDir(t) }

var agentBinary struct {
	once sync.Once
	path string
	err  error
}

// AgentBinary returns a copy of the running test binary that any uid may
// execute: tests run it as an agent program, and agents run as their own
// unprivileged uids while `go test` keeps its binaries in a 0700 directory.
// The copy lives for the whole test process.
func AgentBinary(t testing.TB) string {
	t.Helper()
	path, err := AgentBinaryPath()
	if err != nil {
		t.Fatalf("agent binary: %v", err)
	}
	return path
}

// AgentBinaryPath is AgentBinary for code without a testing.TB. The copy's
// directory carries the test process's pid (kinbin-PID-*): a test binary
// whose TestMain does not call RemoveAgentBinary, or that was killed, leaves
// its copy behind, and the next AgentBinaryPath removes the copies of
// processes that are gone.
func AgentBinaryPath() (string, error) {
	agentBinary.once.Do(func() {
		removeStaleAgentBinaries()
		dir, err := os.MkdirTemp("", "kinbin-"+strconv.Itoa(os.Getpid())+"-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			agentBinary.err = err
			return
		}
		self, err := os.Executable()
		if err != nil {
			agentBinary.err = err
			return
		}
		path := filepath.Join(dir, filepath.Base(self))
		agentBinary.path, agentBinary.err = path, copyFile(self, path, 0o755)
	})
	return agentBinary.path, agentBinary.err
}

// removeStaleAgentBinaries removes the kinbin-PID-* copies whose process
// has exited.
func removeStaleAgentBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "kinbin-*-*"))
	for _, dir := range dirs {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), "kinbin-"), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil { // whatever the umask is now
		out.Close()
		return err
	}
	return out.Close()
}

// SharedDir returns a fresh directory every uid may write to, for files
// agent programs leave for the test to read.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kinshared")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WaitFor polls cond until it is true or the deadline passes.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(delay)
	}
}

// Clock is a settable clock for tests where time is the subject.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return NewClockAt(time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)) }

// NewClockAt returns a clock at t: time.Now() for a test whose daemon
// issues tokens that something else checks against the wall clock.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// RemoveAgentBinary deletes AgentBinary's copy; call it from TestMain after
// the tests ran.
func RemoveAgentBinary() {
	if agentBinary.path != "" {
		os.RemoveAll(filepath.Dir(agentBinary.path))
	}
}
