package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/dashboard"
	"github.com/kin-agents/kin/internal/exchange"
	"github.com/kin-agents/kin/internal/gateway"
	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/hosts"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/keyring"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/logsigner"
	"github.com/kin-agents/kin/internal/peer"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/runner"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storeopen"
	"github.com/kin-agents/kin/internal/telemetry"
	"github.com/kin-agents/kin/kin"
)

// File names inside the home.
const (
	SocketName = "kin.sock"
	TokenName  = "operator.token"
	lockName   = "kin.lock"
	keysDir    = "keys" // <home>/keys/<role>/: the signing keys (keyring)
)

// Daemon is a running `kin serve`: the composition root. It opens the
// store, builds each service on it and serves them; the services do the
// work, and the Daemon answers kin.Service through them.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	store   store.Store // its Wait wakes whatever follows the event log
	lineage lineage.Tree

	*registry.Registry                      // the lineage registry and the governor: kin.RegistryService
	*runner.Runner                          // agents' processes, files and sockets: kin.RunnerService
	*authority.Authority                    // the permission authority: kin.AuthorityService
	*exchange.Exchange                      // what agents share with consent: kin.ExchangeService
	*personserver.Server                    // AAuth: agent provider and person server: kin.IdentityService
	*logsigner.Signer                       // the verifiable event log's key and checkpoints: kin.LogService
	host                 *hosts.Hosts       // this daemon as a host of the fleet: kin.FleetService (fleet.go)
	peerAuth             *peer.Auth         // signs this host's calls to other hosts, checks theirs
	peers                *peer.Fleet        // the other hosts' APIs: agents' logs there
	metrics              *telemetry.Metrics // Prometheus metrics
	tracer               *telemetry.Tracer  // OpenTelemetry spans of spawns, nil when off
	quota                *quota.Limiter     // the profile's rate limits on agents (issue 21)
	streams              quota.Streams      // the long-lived answers each agent holds open
	gateway              *gateway.Gateway   // the model gateway, nil without upstreams (issue 25)

	pid     int
	started time.Time
	token   string

	lock     *os.File
	unixLn   net.Listener
	tcpLn    net.Listener
	servers  []*http.Server
	wg       sync.WaitGroup
	closing  chan struct{}
	closeErr error
	once     sync.Once
}

var _ kin.Service = (*Daemon)(nil)

// Start opens the home, the store and the listeners and starts serving. The
// daemon runs until Close; ctx only bounds start-up.
func Start(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if cfg.DefaultResponsible == "" {
		cfg.DefaultResponsible = loginName()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:     cfg,
		log:     cfg.Logger,
		now:     cfg.Clock,
		pid:     os.Getpid(),
		closing: make(chan struct{}),
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.metrics = telemetry.NewMetrics(metricsSource{d}, func() time.Time { return d.now() }, d.log)
	if d.now == nil {
		d.now = func() time.Time { return time.Now().UTC() }
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	// Directories made above the home are 0755, as /var/lib/kin for
	// root's: agents (their own uids, as root) pass through them.
	if err := os.MkdirAll(filepath.Dir(cfg.Home), 0o755); err != nil {
		return nil, fmt.Errorf("home %s: %w", cfg.Home, err)
	}
	if err := os.Mkdir(cfg.Home, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("home %s: %w", cfg.Home, err)
	}
	if err := d.lockHome(); err != nil {
		return nil, err
	}
	files := raiseOpenFiles()
	logOpenFiles(d.log, files)
	baseProfile, profileSource, err := governor.Load(cfg.Profile)
	if err != nil {
		return nil, err
	}
	// The home's kin.db is this daemon's alone while it holds kin.lock:
	// its store may keep rows in memory between reads. Another file
	// ("sqlite:PATH") may be another daemon's too.
	onlyWriter := cfg.Store == "" || cfg.Store == storeopen.DriverSQLite
	st, err := storeopen.Open(ctx, cfg.Store, storeopen.Options{Home: cfg.Home, Synchronous: cfg.Synchronous, OnlyWriter: onlyWriter})
	if err != nil {
		return nil, err
	}
	d.store = st
	if cfg.WrapStore != nil {
		d.store = cfg.WrapStore(st)
	}
	hostName, err := cfg.hostName()
	if err != nil {
		return nil, err
	}
	fenceMode := cfg.FenceMode
	if fenceMode == "" {
		fenceMode = runner.FenceStop
	}
	if err := runner.CheckFenceMode(fenceMode); err != nil {
		return nil, fmt.Errorf("fence mode %q: %w", fenceMode, err)
	}
	// The fence's callbacks come after Start, once the runner exists.
	if d.host, err = hosts.New(ctx, hosts.Config{Store: d.store, Name: hostName, Home: cfg.Home, Lease: cfg.HostLease,
		Version: cfg.Version, Clock: d.now, Log: d.log, FenceAfter: cfg.FenceAfter,
		Fence:  func() { d.Runner.Fence(fenceMode) },
		Rejoin: func(fenced bool) { d.Runner.Rejoin(fenced) },
		Lost:   func(err error) { d.Runner.HostLost(err) },
	}); err != nil {
		return nil, err
	}
	// The log's size before the links: what other hosts commit after it
	// is applied to the caches by the registry's follower (FollowStore);
	// what both read is applied twice, which changes nothing.
	followFrom, err := st.EventLastSeq(ctx)
	if err != nil {
		return nil, fmt.Errorf("load lineage: %w", err)
	}
	links, err := st.AgentLinks(ctx)
	if err != nil {
		return nil, fmt.Errorf("load lineage: %w", err)
	}
	for _, l := range links {
		d.lineage.Add(l.ID, l.Parent)
	}

	// The services, each on the store; what one needs of another is handed
	// in (an interface, or a function for the one call it makes).
	pcfg, err := authority.LoadPolicyConfig(cfg.PolicyConfig)
	if err != nil {
		return nil, err
	}
	// Quotas are the profile's, read at each request (issue 21).
	d.quota = quota.New(quota.Config{Quotas: func() kin.Quotas { return d.Registry.Profile().Quotas }, Clock: d.now, Chain: d.lineage.Chain})
	d.Authority, err = authority.New(ctx, authority.Config{
		Store: d.store, Lineage: &d.lineage, Policy: pcfg, Clock: d.now, Log: d.log, Quota: d.quota,
		Stop: func(ctx context.Context, id kin.AgentID, reason string) (func() error, error) {
			return d.Runner.StopSubtree(ctx, id, reason)
		},
		Limits: func(flat kin.Policy) []kin.ResourceLimit { return d.Runner.LimitsOf(flat) },
	})
	if err != nil {
		return nil, fmt.Errorf("load permissions: %w", err)
	}
	d.Server, err = personserver.New(personserver.Config{
		Home: cfg.Home, TokenLifetime: cfg.AgentTokenLifetime, Issuer: cfg.Issuer, PersonServer: cfg.PersonServer,
		Store: d.store, Lineage: &d.lineage, Clock: d.now, Log: d.log, ReplayCapacity: cfg.ReplayCapacity,
		SingleLevel: func() bool { return d.Registry.Profile().Name == "aauth" },
		KeyPath:     func(id kin.AgentID) string { return d.Runner.AgentKeyPath(id) },
		Quota:       d.quota,
		Host:        hostName,
	})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	d.Signer, err = logsigner.New(ctx, logsigner.Config{
		KeyDir: cfg.logKeyDir(), Every: cfg.LogCheckpointEvents, Interval: cfg.LogCheckpointInterval,
		Store: d.store, Clock: d.now, Log: d.log, Ancestors: func(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) { return d.Registry.Ancestors(ctx, id) },
		Host: hostName,
	})
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	exporter, path, err := cfg.traces()
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	if exporter == TracesOff {
		exporter = ""
	}
	d.tracer, err = telemetry.OpenTracer(ctx, telemetry.TracerConfig{Exporter: exporter, Path: path, Salt: d.Signer.VerifierKey(),
		Version: cfg.Version, Home: cfg.Home, Lineage: &d.lineage, Log: d.log})
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	// The hosts of a fleet share the log key, and so the key they sign
	// their calls to one another with.
	d.peerAuth = peer.NewAuth(hostName, d.Signer.Derive(peer.Label), d.now)
	d.peers = peer.NewFleet(d.peerAuth, d.store.HostList, d.now)
	// The model gateway: agents' credentials are HMACs under a secret
	// derived from the log key, which every host of a fleet shares.
	var models runner.ModelGateway
	if len(cfg.ModelUpstreams) > 0 {
		d.gateway, err = gateway.New(gateway.Config{Upstreams: cfg.ModelUpstreams, Key: d.Signer.Derive("model gateway credentials"),
			Authority: d.Authority, Runs: func(id kin.AgentID) bool { return d.Runner != nil && d.Runner.Runs(id) },
			AgentUID: func(id kin.AgentID) (uint32, bool) { return d.Runner.AgentUID(id) },
			Addr:     d.HTTPAddr, Quota: d.quota, Observe: func(c kin.ModelCallData) {
				d.metrics.ObserveModelCall(c, d.lineage.Root(c.Agent))
				d.tracer.ModelCall(c)
			}, Transport: cfg.ModelTransport, Clock: d.now, Log: d.log})
		if err != nil {
			return nil, err
		}
		models = d.gateway
	}
	d.Runner, err = runner.New(runner.Config{
		Home: cfg.Home, CtxDir: cfg.ctxDir(), HTTPAddr: cfg.HTTPAddr, ListenAddr: d.HTTPAddr, SocketPath: d.SocketPath(),
		AgentUIDs: cfg.AgentUIDs, UIDRange: cfg.UIDRange, UIDRangeDir: cfg.UIDRangeDir,
		SandboxRO: cfg.SandboxRO, SandboxBestEffort: cfg.SandboxBestEffort, ShimPath: cfg.ShimPath,
		Containment: cfg.Containment, CgroupName: cfg.CgroupName, LeaveRunning: cfg.LeaveRunning, ShutdownTimeout: cfg.ShutdownTimeout, Host: hostName,
		AgentOpenFiles: files.child, Store: d.store, Lineage: &d.lineage, Authority: d.Authority, Identity: d.Server,
		Observer: telemetry.RunnerObserver{M: d.metrics, T: d.tracer}, Clock: d.now, Log: d.log, Quota: d.quota,
		Remote: d.peers, Models: models,
	})
	if err != nil {
		return nil, err
	}
	d.Registry, err = registry.New(ctx, registry.Config{
		Store: d.store, Lineage: &d.lineage, Authority: d.Authority, Identity: d.Server,
		Runner: d.Runner.RegistryHooks(), Observer: telemetry.RegistryObserver{M: d.metrics, T: d.tracer}, Clock: d.now,
		Profile: baseProfile, ProfileSource: profileSource, DefaultResponsible: cfg.DefaultResponsible,
		Closing: d.closing, Wait: d.store.Wait, Quota: d.quota, Host: hostName,
	})
	if err != nil {
		return nil, err
	}
	d.Runner.SetRegistry(d.Registry)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		identityTypes := personserver.FollowedTypes
		d.Registry.FollowStore(followFrom, d.log, append(slices.Clone(runner.FollowedTypes), identityTypes...), func(e kin.Event) {
			if slices.Contains(runner.FollowedTypes, e.Type) {
				d.Runner.Followed(e)
			}
			if slices.Contains(identityTypes, e.Type) {
				d.Server.Followed(e)
			}
		})
	}()
	if d.token, err = loadOrCreateToken(filepath.Join(cfg.Home, TokenName)); err != nil {
		return nil, err
	}
	if err := d.Runner.Open(); err != nil {
		return nil, err
	}
	d.Exchange = exchange.New(exchange.Config{Store: d.store, Lineage: &d.lineage, Registry: d.Registry, Authority: d.Authority,
		FS: d.Runner.FS(), Workspace: d.Runner.WorkspaceOf, Clock: d.now, Quota: d.quota})

	api := httpapi.New(d, d.token, d.log)
	api.Observe = d.metrics.ObserveHTTP
	api.ActAs = d.actAs
	api.OpenStream = d.streams.Open
	api.Peer = d.peerAuth.Serve
	// The HTTP address is the host's issuer unless configured: listen (not
	// serve) first, and settle the fleet's issuer and publish this host's
	// keys before reconciliation starts (it may hold the store's writer).
	if cfg.HTTPAddr != "" && cfg.HTTPAddr != "off" {
		if err := d.listenTCP(); err != nil {
			return nil, err
		}
	}
	if err := d.Server.SetIssuer(d.HTTPAddr()); err != nil {
		return nil, err
	}
	agents := api.Handler(false)
	if d.gateway != nil {
		agents = d.gateway.Socket(agents)
	}
	if err := d.Runner.Start(ctx, agents); err != nil {
		return nil, err
	}
	d.Authority.ArmDeadlines(ctx)
	// Started: what only the start ran of the binary need not stay mapped.
	if n, err := unmapStartupPages(); err != nil {
		d.log.Debug("the binary's start-up pages stay mapped", "err", err)
	} else if n > 0 {
		d.log.Debug("the binary's start-up pages unmapped (cached, mapped back as used)", "bytes", n)
	}
	// Open both listeners before serving either, so no request sees a
	// half-started daemon.
	if err := d.listenUnix(); err != nil {
		return nil, err
	}
	d.started = d.now()
	d.serve(d.unixLn, d.operatorHandler(api), d.Runner.OperatorConnContext)
	if d.tcpLn != nil {
		var connContext func(context.Context, net.Conn) context.Context
		if d.gateway != nil {
			connContext = gateway.ConnContext // which uid a model call comes from
		}
		d.serve(d.tcpLn, d.Server.Handler(d.webHandler(api)), connContext)
	}
	d.Signer.Start()
	sup := d.Runner.Supervisor()
	d.host.Announce(d.HTTPAddr(), sup.Containment())
	d.host.Start()
	d.Runner.WatchFleet(d.host.Lease() / 3)
	d.log.Info("kin serve started", "host", hostName, "home", cfg.Home, "socket", d.SocketPath(), "http", d.HTTPAddr(),
		"store", st.Driver(), "profile", d.Registry.ProfileSource(), "containment", sup.Containment(),
		"containment_reason", sup.ContainmentReason(), "cgroup", sup.Root(), "sandbox", d.Runner.DescribeContainment(),
		"agent_uids", d.Runner.UIDRangeString(), "running", d.Runner.RunningCount())
	for _, l := range d.Runner.HostLimits() {
		d.log.Info("limit", "budget", l.Name, "binds", l.Scope, "by", l.By, "note", l.Note)
	}
	if d.gateway != nil {
		for _, u := range d.gateway.Upstreams() {
			d.log.Info("model upstream", "name", u.Name, "api", u.API, "url", u.URL.Redacted(), "key", u.Key)
		}
		if d.HTTPAddr() == "" {
			d.log.Warn("the model gateway serves agents' sockets only: without an HTTP address (--http off) agents' SDKs get no base URL")
		}
	}
	for _, m := range d.Runner.MissingGuarantees() {
		d.log.Warn("guarantee missing", "what", m)
	}
	metricsAt := []string{"unix:" + d.SocketPath() + " GET /metrics"}
	if d.tcpLn != nil {
		metricsAt = append(metricsAt, "http://"+d.HTTPAddr()+"/metrics (operator token)")
	}
	d.log.Info("metrics enabled", "format", "prometheus", "at", metricsAt, "traces", d.cfg.tracesMode())
	return d, nil
}

// lockHome takes an exclusive lock on the home so that two daemons never
// share one store and socket.
func (d *Daemon) lockHome() error {
	f, err := os.OpenFile(filepath.Join(d.cfg.Home, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("home %s: %w", d.cfg.Home, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("another kin serve is already running with home %s", d.cfg.Home)
		}
		return fmt.Errorf("lock home %s: %w", d.cfg.Home, err)
	}
	f.Truncate(0)
	f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	d.lock = f
	return nil
}

func loadOrCreateToken(path string) (string, error) {
	return keyring.Secret(path, "operator token", 32)
}

func (d *Daemon) listenUnix() error {
	path := d.SocketPath()
	// We hold the home lock, so a socket file left here is stale.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	// The socket is born 0600: no window where others may connect. The
	// umask is process-wide; this runs once, during Start, before the
	// daemon serves or spawns anything that creates files.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("socket %s: %w", path, err)
	}
	d.unixLn = ln
	return nil
}

func (d *Daemon) listenTCP() error {
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http %s: %w", d.cfg.HTTPAddr, err)
	}
	d.tcpLn = ln
	return nil
}

func (d *Daemon) serve(ln net.Listener, h http.Handler, connContext func(context.Context, net.Conn) context.Context) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext}
	d.servers = append(d.servers, srv)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// operatorHandler serves the operator socket: the API and /metrics.
func (d *Daemon) operatorHandler(api *httpapi.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	mux.Handle("/", api.Handler(false))
	return mux
}

// webHandler serves the HTTP address (behind the AAuth endpoints): the API
// and /metrics for holders of the operator token, the MCP tools for them
// and for agents that sign their requests, the dashboard for browsers that
// logged in with the token, and the login page for everyone else.
func (d *Daemon) webHandler(api *httpapi.Server) http.Handler {
	mux := http.NewServeMux()
	var v1 http.Handler = api.Handler(true)
	if d.gateway != nil {
		v1 = d.gateway.TCP(v1) // the model APIs, for agents' credentials
	}
	mux.Handle("/v1/", v1)
	mux.Handle("GET "+httpapi.PathHandoff, api.Protect(d.handoffHandler(api)))
	mux.Handle(PathMCP, d.mcpHandler(api))
	mux.Handle("GET /metrics", api.Protect(d.metrics.Handler()))
	mux.Handle("/metrics", api.Protect(http.HandlerFunc(api.NotFound))) // another method: the API's answers, not the login page
	mux.Handle("/", dashboard.Handler(api, filepath.Join(d.cfg.Home, TokenName)))
	return mux
}

// SocketPath is the operator socket.
func (d *Daemon) SocketPath() string { return filepath.Join(d.cfg.Home, SocketName) }

// HTTPAddr is the TCP address the API listens on, or "" if it does not.
func (d *Daemon) HTTPAddr() string {
	if d.tcpLn == nil {
		return ""
	}
	return d.tcpLn.Addr().String()
}

// TracesEnabled reports whether spans are exported (Config.Traces is not off).
func (d *Daemon) TracesEnabled() bool { return d.tracer != nil }

// metricsSource is what the metrics read at scrape time.
type metricsSource struct{ d *Daemon }

func (s metricsSource) Store() store.Store   { return s.d.store }
func (s metricsSource) Profile() kin.Profile { return s.d.Registry.Profile() }
func (s metricsSource) Running() int         { return s.d.Runner.RunningCount() }
func (s metricsSource) Containment() string {
	if s.d.Runner == nil || s.d.Runner.Supervisor() == nil {
		return ""
	}
	return s.d.Runner.Supervisor().Containment()
}
func (s metricsSource) MissingGuarantees() []string { return s.d.Runner.MissingGuarantees() }

// OperatorToken is the operator token.
func (d *Daemon) OperatorToken() string { return d.token }

// CtxRoot is the root of the agent filesystem.
func (d *Daemon) CtxRoot() string { return d.cfg.ctxDir() }

// Close stops serving, stops every agent (unless the daemon was told to
// leave them running for the next one: every independent subtree at once,
// within Config.ShutdownTimeout, counted from here), ends event streams,
// and closes the store. It waits for everything it started and is safe to
// call twice.
func (d *Daemon) Close() error {
	d.once.Do(func() {
		close(d.closing)
		if d.Authority != nil {
			d.Authority.Close() // no deadline fires, no budget stop starts, from now on
		}
		if d.Server != nil {
			d.Server.Close() // the auth-token pruner
		}
		if d.Runner != nil {
			d.Runner.Shutdown() // no agent starts or restarts from now on
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range d.servers {
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, srv.Close())
			}
		}
		if d.Runner != nil {
			errs = append(errs, d.Runner.Close())
		}
		d.wg.Wait()
		if d.peers != nil {
			d.peers.Close()
		}
		// Listeners a failed start opened and never served.
		for _, ln := range []net.Listener{d.tcpLn, d.unixLn} {
			if ln != nil {
				ln.Close()
			}
		}
		if d.unixLn != nil {
			os.Remove(d.SocketPath())
		}
		if d.Signer != nil {
			d.Signer.Close() // signs the head after the last event: the shutdown's own
		}
		if d.host != nil {
			errs = append(errs, d.host.Close()) // the name is free at once
		}
		d.tracer.Close() // flushes the spans still buffered
		if d.store != nil {
			errs = append(errs, d.store.Close())
		}
		if d.lock != nil {
			d.lock.Close()
		}
		d.closeErr = errors.Join(errs...)
		d.log.Info("kin serve stopped")
	})
	return d.closeErr
}
