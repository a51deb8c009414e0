// Package fleettest runs a fleet of kin hosts for tests: a PostgreSQL
// server and N `kin serve` daemons (default three: a, b and c) on one
// database, each daemon in a network namespace of its own joined by a veth
// pair to a bridge in the root namespace, so that hosts reach the store
// and one another over TCP as separate machines do, and a test can cut one
// host's link. Everything else (the file system, the PID space, cgroup v2)
// is the machine's: each daemon has its own home, and so its own cgroup
// root; one uid range directory for the fleet keeps their agents' uids
// apart.
//
// It needs root, iproute2 (ip) and util-linux (nsenter), and PostgreSQL's
// server (package pgtest). Where one is missing Start skips, naming it,
// unless KIN_TEST_REQUIRE_POSTGRES=1 (CI): then it fails.
//
// Everything a fleet makes carries the test binary's pid in its name
// (bridge kbPID-N, veths kvPID-N-I, namespaces kinfleet-PID-N-HOST,
// directory kinfleet-PID-N-*) and is removed when the test that started
// it ends, failed or not; what a killed test binary left is removed by the
// next Start (those whose pid is gone). The daemons are started from OS
// threads held for their lives with PDEATHSIG, so a killed test binary
// takes them along (its agents, like any kin agents whose daemon died,
// run on until that sweep).
//
// It is test infrastructure: only tests import it.
package fleettest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/pgtest"
)

// EnvRequire, set to 1, turns what Start needs and lacks into a failure
// instead of a skip (CI sets it): pgtest's variable.
const EnvRequire = pgtest.EnvRequire

// HTTPPort is the port of every host's HTTP API, on its own address.
const HTTPPort = 7777

// StorePort is the PostgreSQL server's port, on the bridge's address.
const StorePort = 5432

// StoreUser is the role the hosts connect to the store as.
const StoreUser = "kin"

// DefaultHosts are the hosts' names unless WithHosts says otherwise.
var DefaultHosts = []string{"a", "b", "c"}

// hostName is what a host's name may be: it is part of a namespace's name
// and a daemon's KIN_HOST_NAME.
var hostName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

// Option adjusts a fleet.
type Option func(*config)

type config struct {
	hosts     []string
	serveArgs []string
	hostArgs  map[string][]string
	env       []string
}

// WithHosts names the fleet's hosts (lower-case letters, digits and
// dashes, starting with a letter; at most 9 hosts).
func WithHosts(names ...string) Option { return func(c *config) { c.hosts = names } }

// WithServeArgs adds flags to every host's kin serve.
func WithServeArgs(args ...string) Option {
	return func(c *config) { c.serveArgs = append(c.serveArgs, args...) }
}

// WithHostServeArgs adds flags to one host's kin serve, after those of
// WithServeArgs.
func WithHostServeArgs(host string, args ...string) Option {
	return func(c *config) {
		if c.hostArgs == nil {
			c.hostArgs = map[string][]string{}
		}
		c.hostArgs[host] = append(c.hostArgs[host], args...)
	}
}

// WithEnv adds KEY=VALUE entries to every daemon's environment.
func WithEnv(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// Fleet is a running fleet: its network, its store and its hosts.
type Fleet struct {
	// Bin is the kin binary every host runs (built from this tree, or
	// $KIN_EXAMPLE_BIN: exampletest.Kin).
	Bin string
	// Tag is the fleet's part of every name it makes: PID-N.
	Tag string
	// Bridge is the bridge in the root namespace; Subnet the fleet's /24
	// and Gateway the bridge's address on it, every host's default route.
	Bridge  string
	Subnet  netip.Prefix
	Gateway netip.Addr
	// DB is the PostgreSQL server, listening on Gateway:StorePort (and
	// its socket); Store is the DSN every host is given (as KIN_STORE,
	// which, unlike --store, no other user reads in /proc), with the
	// password StorePassword.
	DB            *pgtest.Server
	Store         string
	StorePassword string
	// Dir holds the hosts' homes and UIDRangeDir, the uid range
	// allocation directory they share.
	Dir         string
	UIDRangeDir string
	// LogKeyDir holds the fleet's log key, copied into every host's home.
	LogKeyDir string
	// Hosts in the order named.
	Hosts []*Host

	// Took is what bringing the fleet up took: the network, the store
	// (initdb, postgres, the database), and the daemons (started at once,
	// until each printed its start-up line).
	Took struct{ Network, Store, Hosts, Total time.Duration }
	// TeardownTook is what tearing it down took, once the test's cleanup
	// has run.
	TeardownTook time.Duration

	cfg config
}

// fleets numbers the fleets of this test binary, for unique names.
var fleets atomic.Int64

// Start brings a fleet up for t and tears it down when t ends.
func Start(t testing.TB, opts ...Option) *Fleet {
	t.Helper()
	began := time.Now()
	cfg := config{hosts: DefaultHosts}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	need(t)
	sweep()

	f := &Fleet{cfg: cfg}
	f.Tag = fmt.Sprintf("%d-%s", os.Getpid(), strconv.FormatInt(fleets.Add(1), 36))
	var teardownBegan time.Time
	t.Cleanup(func() { f.TeardownTook = time.Since(teardownBegan) }) // runs last
	dir, err := os.MkdirTemp("", "kinfleet-"+f.Tag+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A host's daemon killed (Kill9, or by teardown) leaves its served
		// agent/ mounted and dead: detached before the directory goes.
		if points, err := ctxfuse.DetachUnder(dir); err != nil {
			t.Errorf("fleettest: %v", err)
		} else if len(points) > 0 {
			t.Logf("fleettest: detached the served agent/ its killed daemons left: %v", points)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("fleettest: %v", err)
		}
	})
	// Agents, run as their own uids, pass through to their homes' sockets.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	f.Dir, f.UIDRangeDir = dir, filepath.Join(dir, "uid-ranges")
	// One log key for the fleet, given to every host's home as an operator
	// would copy it (a host with another key is refused).
	f.LogKeyDir = filepath.Join(dir, "log-key")
	if _, err := auditlog.LoadKey(f.LogKeyDir); err != nil {
		t.Fatal(err)
	}
	f.Bin = kinBinary(t)

	t0 := time.Now()
	if err := f.makeBridge(); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	t.Cleanup(func() {
		if err := ipCmd("link", "del", f.Bridge); err != nil && !notFound(err) {
			t.Errorf("fleettest: %v", err)
		}
	})
	for i, name := range cfg.hosts {
		h := &Host{Name: name, fleet: f, index: i}
		h.Netns = "kinfleet-" + f.Tag + "-" + name
		h.Veth = fmt.Sprintf("kv%s-%s", f.Tag, strconv.FormatInt(int64(i), 36))
		h.IP = nthAddr(f.Subnet, 10+i)
		h.HTTP = netip.AddrPortFrom(h.IP, HTTPPort).String()
		f.Hosts = append(f.Hosts, h)
		t.Cleanup(func() {
			if err := h.removeNetwork(); err != nil {
				t.Errorf("fleettest: %v", err)
			}
		})
		if err := h.makeNetwork(); err != nil {
			t.Fatalf("fleettest: host %s: %v", name, err)
		}
	}
	f.Took.Network = time.Since(t0)

	t0 = time.Now()
	f.DB = pgtest.StartServer(t, pgtest.ServerConfig{Listen: f.Gateway, Port: StorePort, Allow: f.Subnet})
	f.StorePassword = randomHex(12)
	f.Store = f.DB.NewDatabase(t, StoreUser, f.StorePassword)
	f.Took.Store = time.Since(t0)

	// Stops every daemon and kills what is left of the hosts; registered
	// after the store's, so it runs before the store stops.
	t.Cleanup(func() {
		teardownBegan = time.Now()
		for _, h := range f.Hosts {
			if t.Failed() {
				h.logDaemon(t)
			}
			for _, err := range h.teardown() {
				t.Errorf("fleettest: host %s: %v", h.Name, err)
			}
		}
	})
	t0 = time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(f.Hosts))
	for i, h := range f.Hosts {
		wg.Go(func() { errs[i] = h.start() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fleettest: host %s: %v", f.Hosts[i].Name, err)
		}
	}
	f.Took.Hosts = time.Since(t0)
	f.Took.Total = time.Since(began)
	return f
}

// Host returns the host named name, failing t if there is none.
func (f *Fleet) Host(t testing.TB, name string) *Host {
	t.Helper()
	for _, h := range f.Hosts {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("fleettest: no host %q", name)
	return nil
}

func (c *config) validate() error {
	if len(c.hosts) == 0 || len(c.hosts) > 9 {
		return fmt.Errorf("a fleet has 1 to 9 hosts, not %d", len(c.hosts))
	}
	seen := map[string]bool{}
	for _, n := range c.hosts {
		if !hostName.MatchString(n) {
			return fmt.Errorf("host name %q: want lower-case letters, digits and dashes, starting with a letter, at most 31", n)
		}
		if seen[n] {
			return fmt.Errorf("host name %q twice", n)
		}
		seen[n] = true
	}
	for n := range c.hostArgs {
		if !seen[n] {
			return fmt.Errorf("serve flags for host %q, which the fleet lacks", n)
		}
	}
	return nil
}

// The kin binary the fleets of this test binary share, when Main runs
// them: built at the first Start, removed by Main.
var shared struct {
	mu   sync.Mutex
	main bool
	dir  string
	bin  string
}

// Main runs m's tests; the fleets they start share one kin binary, built
// at the first Start, which Main removes afterwards. Without it each Start
// builds kin into a directory of its test's (a link of some seconds on a
// loaded machine). Call it from TestMain: os.Exit(fleettest.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.main = false
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
		shared.dir, shared.bin = "", ""
	}
	return code
}

// kinBinary is the kin the fleet runs: $KIN_EXAMPLE_BIN, else the test
// binary's shared build under Main, else a build of t's own.
func kinBinary(t testing.TB) string {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if os.Getenv("KIN_EXAMPLE_BIN") != "" || !shared.main {
		return exampletest.Kin(t)
	}
	if shared.bin == "" {
		if shared.dir == "" {
			// Named like a fleet's directory: the sweep removes it once
			// this test binary is gone, should Main not get to.
			dir, err := os.MkdirTemp("", "kinfleet-"+strconv.Itoa(os.Getpid())+"-bin-")
			if err == nil {
				err = os.Chmod(dir, 0o755) // agents, run as their own uids, run kin
			}
			if err != nil {
				t.Fatal(err)
			}
			shared.dir = dir
		}
		shared.bin = exampletest.Build(t, shared.dir, "kin", "github.com/kin-agents/kin/cmd/kin")
	}
	return shared.bin
}

// need skips t, or fails it under EnvRequire, where the fleet cannot run:
// without root, ip or nsenter. PostgreSQL's server is pgtest's to find.
func need(t testing.TB) {
	t.Helper()
	var missing string
	switch {
	case os.Geteuid() != 0:
		missing = "root (network namespaces, veths and a bridge; kin serve as root)"
	case lookPath("ip") != nil:
		missing = "ip (apt-get install iproute2)"
	case lookPath("nsenter") != nil:
		missing = "nsenter (apt-get install util-linux)"
	}
	if missing == "" {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("fleettest: a fleet needs %s (%s=1: not skipped)", missing, EnvRequire)
	}
	t.Skipf("fleettest: a fleet needs %s", missing)
}

func lookPath(name string) error {
	_, err := exec.LookPath(name)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
