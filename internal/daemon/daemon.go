package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/dashboard"
	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storeopen"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

// File names inside the home.
const (
	SocketName = "kin.sock"
	TokenName  = "operator.token"
	lockName   = "kin.lock"
)

// Daemon is a running `kin serve`.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	store   store.Store // its Wait wakes whatever follows the event log
	lineage lineage
	perm    perms            // the permission authority's state (permission.go)
	id      *identityState   // AAuth: agent provider and person server (identity.go)
	logst   *logState        // the verifiable event log's key and checkpoints (eventlog.go)
	disc    *aauth.Discovery // resources' keys, for their resource tokens
	metrics *metrics         // Prometheus metrics (metrics.go)
	tracer  *tracer          // OpenTelemetry spans of spawns, nil when off (tracing.go)
	uids    *uidrange.Range  // the home's agent uid range; nil: agents run as the daemon's user
	pid     int
	started time.Time
	token   string

	mu            sync.Mutex // guards profile and overrides
	profile       kin.Profile
	profileSource string
	baseProfile   kin.Profile
	overrides     map[string]string

	// The supervisor and what the daemon knows of running agents.
	sup           *supervisor.Supervisor
	ctxDir        string // the agent filesystem's root: Config.Ctx, default <home>/ctx
	ctx           *ctxfs.FS
	ctxw          *ctxWriter
	ctxMu         sync.Mutex
	ctxAgents     map[kin.AgentID]*ctxAgent
	agentPath     string   // PATH of agent processes
	agentPathList []string // the same, split: every agent's path control file (read-only)
	rtMu          sync.Mutex
	runtimes      map[kin.AgentID]*runtime
	adopted       map[kin.AgentID]*os.File // pidfds of re-adopted processes
	shuttingDown  bool
	exitWG        sync.WaitGroup // exit handlers and restarts
	agentSrv      *http.Server   // serves every agent socket
	sockMu        sync.Mutex
	socks         map[string]*agentSocket // by socket path

	// The sandbox's default view's exceptions (agentView), and the shim
	// published for agents when the daemon is not a binary named kin.
	hiddenFromAgents, readOnlyForAgents []string
	shimCopy                            string

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
		cfg:       cfg,
		log:       cfg.Logger,
		now:       cfg.Clock,
		pid:       os.Getpid(),
		overrides: map[string]string{},
		closing:   make(chan struct{}),
		ctxDir:    cfg.ctxDir(),
		ctxAgents: map[kin.AgentID]*ctxAgent{},
		runtimes:  map[kin.AgentID]*runtime{},
		adopted:   map[kin.AgentID]*os.File{},
		socks:     map[string]*agentSocket{},
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.metrics = newMetrics(d)
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
	if err := d.allocateUIDs(); err != nil {
		return nil, err
	}
	d.baseProfile, d.profileSource, err = governor.Load(cfg.Profile)
	if err != nil {
		return nil, err
	}
	st, err := storeopen.Open(ctx, cfg.Store, storeopen.Options{Home: cfg.Home, Synchronous: cfg.Synchronous})
	if err != nil {
		return nil, err
	}
	d.store = st
	if err := d.loadGovernor(ctx); err != nil {
		return nil, err
	}
	links, err := st.AgentLinks(ctx)
	if err != nil {
		return nil, fmt.Errorf("load lineage: %w", err)
	}
	for _, l := range links {
		d.lineage.add(l.ID, l.Parent)
	}
	if d.perm.cfg, err = loadPolicyConfig(cfg.PolicyConfig); err != nil {
		return nil, err
	}
	if err := d.loadPerms(ctx); err != nil {
		return nil, fmt.Errorf("load permissions: %w", err)
	}
	if err := d.openIdentity(); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := d.openLog(ctx); err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	if err := d.openTracing(ctx); err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	d.disc = &aauth.Discovery{Now: d.now}
	if d.token, err = loadOrCreateToken(filepath.Join(cfg.Home, TokenName)); err != nil {
		return nil, err
	}
	if err := d.prepareDirs(); err != nil {
		return nil, err
	}
	if err := d.checkAgentsReachCtx(); err != nil {
		return nil, err
	}
	if d.ctx, err = ctxfs.Open(d.ctxDir, ctxfs.Options{}); err != nil {
		return nil, err
	}
	if n, err := d.ctx.RemoveTemps(); err != nil {
		return nil, fmt.Errorf("agent filesystem: %w", err)
	} else if n > 0 {
		d.log.Info("agent filesystem: removed what interrupted writes left", "entries", n)
	}
	name := cfg.CgroupName
	if name == "" {
		name = defaultCgroupName(cfg.Home)
	}
	owner, err := filepath.Abs(cfg.Home)
	if err != nil {
		return nil, err
	}
	d.sup, err = supervisor.New(supervisor.Config{
		Name:        name,
		Owner:       owner,
		Containment: cfg.Containment,
		KeepOnClose: cfg.LeaveRunning,
		DeferRemove: true, // a cascade is done once its processes are reaped and recorded
		OnExit:      d.onExit,
		Logger:      d.log,
	})
	if err != nil {
		return nil, err
	}
	d.agentView()
	api := httpapi.New(d, d.token, d.log)
	api.Observe = d.metrics.observeHTTP
	api.ActAs = d.actAs
	d.agentSrv = &http.Server{
		Handler:           api.Handler(false),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       d.agentConnContext,
		ConnState:         d.agentConnState,
	}
	d.ctxw = newCtxWriter(d)
	go d.ctxw.run()
	if err := d.reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconcile running agents: %w", err)
	}
	d.armDeadlines(ctx)
	// Open both listeners before serving either, so no request sees a
	// half-started daemon.
	if err := d.listenUnix(); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "" && cfg.HTTPAddr != "off" {
		if err := d.listenTCP(); err != nil {
			return nil, err
		}
	}
	if err := d.setIssuer(); err != nil {
		return nil, err
	}
	d.started = d.now()
	d.serve(d.unixLn, d.operatorHandler(api), d.operatorConnContext)
	if d.tcpLn != nil {
		d.serve(d.tcpLn, d.AAuthHandler(d.webHandler(api)), nil)
	}
	d.wg.Add(3)
	go d.watchLiveness()
	go d.pruneAuthTokens()
	go d.signCheckpoints()
	d.log.Info("kin serve started", "home", cfg.Home, "socket", d.SocketPath(), "http", d.HTTPAddr(),
		"store", st.Driver(), "profile", d.profileSource, "containment", d.sup.Containment(),
		"containment_reason", d.sup.ContainmentReason(), "cgroup", d.sup.Root(), "sandbox", d.describeContainment(), "agent_uids", d.uidRangeString(), "running", d.runningCount())
	for _, m := range d.missingGuarantees() {
		d.log.Warn("guarantee missing", "what", m)
	}
	metricsAt := []string{"unix:" + d.SocketPath() + " GET /metrics"}
	if d.tcpLn != nil {
		metricsAt = append(metricsAt, "http://"+d.HTTPAddr()+"/metrics (operator token)")
	}
	d.log.Info("metrics enabled", "format", "prometheus", "at", metricsAt, "traces", d.cfg.tracesMode())
	return d, nil
}

// prepareDirs makes the directories agents use. The home is 0711: agents,
// which run as their own uids, may pass through it to their sockets and
// sessions under ctx, but not list it; what is private in it (the operator
// token and socket, the database, the logs) is 0600 or 0700 itself.
func (d *Daemon) prepareDirs() error {
	if err := os.Chmod(d.cfg.Home, 0o711); err != nil {
		return err
	}
	for dir, mode := range map[string]os.FileMode{
		filepath.Join(d.cfg.Home, "logs"): 0o700,
		d.ctxDir:                          0o711,
		filepath.Join(d.ctxDir, "agent"):  0o711,
		filepath.Join(d.ctxDir, "bin"):    0o755,
	} {
		if err := os.MkdirAll(dir, mode); err != nil {
			return err
		}
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	published := d.publishKin()
	d.agentPath = agentPATH(published)
	d.agentPathList = filepath.SplitList(d.agentPath)
	if published == "" {
		d.publishShim()
	}
	return nil
}

// publishKin puts the running kin binary where every agent may execute it,
// <ctx>/bin/kin, so that `kin` inside an agent is the kin that supervises
// it (also under `go run`, whose binary sits in a 0700 temporary
// directory). It returns the directory, or "" when the daemon is not a kin
// binary (a test).
func (d *Daemon) publishKin() string {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "kin" {
		return ""
	}
	bin := filepath.Join(d.ctxDir, "bin")
	dst := filepath.Join(bin, "kin")
	tmp := dst + ".new"
	os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyExecutable(exe, tmp); err != nil {
			d.log.Warn("publish kin for agents", "err", err)
			return ""
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil || os.Rename(tmp, dst) != nil {
		d.log.Warn("publish kin for agents", "path", dst)
		return ""
	}
	return bin
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(0o755); err != nil { // whatever the umask is now
		out.Close()
		return err
	}
	return out.Close()
}

// agentCredential is the uid and gid agent id runs as, or nil to run as
// the daemon's user.
func (d *Daemon) agentCredential(id kin.AgentID) *syscall.Credential {
	if d.uids == nil {
		return nil
	}
	uid, err := d.uids.UID(uint64(id))
	if err != nil {
		// Unreachable: register refuses ids outside the range and start
		// checks again. Should it happen, the range's first uid, which no
		// agent and no other daemon has, beats the daemon's own (root) or
		// a wrapped uid of someone else.
		uid = d.uids.Start
	}
	c := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	if flat, ok := d.flatPolicy(id); ok {
		if flat.UID != nil {
			c.Uid = *flat.UID
		}
		if flat.GID != nil {
			c.Gid = *flat.GID
		}
		if flat.Groups != nil {
			c.Groups = flat.Groups
		}
	}
	return c
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

// loadGovernor applies the operator's persisted settings to the profile.
func (d *Daemon) loadGovernor(ctx context.Context) error {
	settings, err := d.store.SettingList(ctx)
	if err != nil {
		return fmt.Errorf("read governor settings: %w", err)
	}
	prof := d.baseProfile
	overrides := map[string]string{}
	for k, v := range settings {
		key, ok := strings.CutPrefix(k, "governor.")
		if !ok || v == "" { // "": reset to the profile's value
			continue
		}
		n, err := strconv.Atoi(v)
		if err == nil {
			err = governor.SetSetting(&prof, key, n)
		}
		if err != nil {
			return fmt.Errorf("stored governor setting %s=%q: %v", key, v, err)
		}
		overrides[key] = v
	}
	d.mu.Lock()
	d.profile, d.overrides = prof, overrides
	d.mu.Unlock()
	return nil
}

// governor returns a snapshot of the profile in force.
func (d *Daemon) governor() kin.Profile {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.profile
}

func loadOrCreateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("operator token %s is too short (at least 32 characters); remove it to have a new one made", path)
		}
		return tok, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("operator token: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(buf)
	if err := writeFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	return tok, nil
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so readers see the old or the new file, never half of one.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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
	mux.Handle("GET /metrics", d.metricsHandler())
	mux.Handle("/", api.Handler(false))
	return mux
}

// webHandler serves the HTTP address (behind the AAuth endpoints): the API
// and /metrics for holders of the operator token, the MCP tools for them
// and for agents that sign their requests, the dashboard for browsers that
// logged in with the token, and the login page for everyone else.
func (d *Daemon) webHandler(api *httpapi.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler(true))
	mux.Handle(PathMCP, d.mcpHandler(api))
	mux.Handle("GET /metrics", api.Protect(d.metricsHandler()))
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

// OperatorToken is the operator token.
func (d *Daemon) OperatorToken() string { return d.token }

// CtxRoot is the root of the agent filesystem.
func (d *Daemon) CtxRoot() string { return d.ctxDir }

// Close stops serving, stops every agent (unless the daemon was told to
// leave them running for the next one), ends event streams, and closes the
// store. It waits for everything it started and is safe to call twice.
func (d *Daemon) Close() error {
	d.once.Do(func() {
		close(d.closing)
		d.stopTimers()
		d.rtMu.Lock()
		d.shuttingDown = true
		d.rtMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range d.servers {
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, srv.Close())
			}
		}
		if d.sup != nil {
			if !d.cfg.LeaveRunning {
				d.stopAgents(context.Background())
			}
			d.rtMu.Lock()
			for id, f := range d.adopted {
				f.Close() // ends the pidfd watchers
				delete(d.adopted, id)
			}
			d.rtMu.Unlock()
			d.exitWG.Wait()
			errs = append(errs, d.sup.Close())
			d.exitWG.Wait() // exits the supervisor reported while closing
		}
		if d.agentSrv != nil {
			if err := d.agentSrv.Shutdown(ctx); err != nil {
				d.agentSrv.Close()
			}
			d.sockMu.Lock()
			socks := make([]*agentSocket, 0, len(d.socks))
			for _, s := range d.socks {
				socks = append(socks, s)
			}
			d.sockMu.Unlock()
			for _, s := range socks {
				s.close()
			}
		}
		d.wg.Wait()
		if d.ctxw != nil {
			d.ctxw.stop() // the tree reflects the store, shutdown included
		}
		if d.ctx != nil {
			d.ctx.Close()
		}
		if d.unixLn != nil {
			os.Remove(d.SocketPath())
		}
		d.finalCheckpoint() // after the last event: the shutdown's own
		d.closeTracing()    // flushes the spans still buffered
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
