package daemon

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/gateway"
	"github.com/kin-agents/kin/internal/hosts"
	"github.com/kin-agents/kin/internal/runner"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storeopen"
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

// Config configures a daemon. Build it with DefaultConfig, then override.
type Config struct {
	// Home holds the database, the socket and the operator token.
	Home string
	// Ctx is the root of the agent filesystem (seed 001's /ctx); "" is
	// <home>/ctx. It holds agent/<name>.d/ control files, sockets and every
	// agent's sessions.
	Ctx string
	// HTTPAddr is the TCP address of the HTTP API; "" or "off" disables it.
	HTTPAddr string
	// Profile is a shipped profile's name or a profile file's path.
	Profile string
	// Store is the store's DSN (storeopen.ParseDSN): "" or "sqlite" for
	// <home>/kin.db, "sqlite:PATH" or "sqlite://PATH" for another file,
	// "postgres://..." for a PostgreSQL database a fleet shares.
	Store string
	// HostName is this daemon's name in the fleet of daemons on the store
	// (package hosts); "" is the machine's host name.
	HostName string
	// HostLease is how long the host's lease on its name runs unless
	// renewed (0: hosts.DefaultLease).
	HostLease time.Duration
	// LogKeyDir is the verifiable log's key directory ("": <home>/keys/log).
	// Every host of a fleet signs the one log with one key: point each at
	// a copy of the same key.
	LogKeyDir string
	// FenceAfter is how long the host goes on without renewing its lease
	// (the store out of reach) before it fences itself: longer than the
	// lease (0: hosts' default, 30 s or twice the lease).
	FenceAfter time.Duration
	// FenceMode is what a fence does to the host's agents: runner.FenceStop
	// ("stop", the default when "") or runner.FenceFreeze ("freeze").
	FenceMode string
	// WrapStore, when set, wraps the store the daemon opens: tests inject
	// a failing commit with it. The daemon closes what it returns.
	WrapStore func(store.Store) store.Store
	// Synchronous is SQLite's synchronous setting, FULL (default) or NORMAL.
	Synchronous string
	// Version is reported by Status.
	Version string
	// AgentUIDs runs each agent as its own uid and gid, the start of the
	// home's uid range + its id, so that agents cannot read one another's
	// files or the daemon's. It needs a daemon running as root;
	// DefaultConfig sets it then. Without it agents run as the daemon's
	// user.
	AgentUIDs bool
	// UIDRange is the home's agent uid range, START:COUNT; "" keeps the
	// range the home recorded, or allocates a free one at first start
	// (package uidrange). Every daemon of a host has its own range.
	UIDRange string
	// UIDRangeDir is the directory all kin daemons of the host share for
	// the allocation file; "" is uidrange.DefaultDir (/var/lib/kin).
	UIDRangeDir string
	// LeaveRunning makes a clean shutdown leave agents running for the next
	// daemon to re-adopt; by default a shutdown stops every agent.
	LeaveRunning bool
	// ShutdownTimeout bounds a clean shutdown's stopping of agents: every
	// independent subtree is stopped at once, each with its grace, and once
	// this much time has passed since the shutdown began whatever still
	// runs is killed at once (SIGKILL, cgroup.kill) and recorded. 0 is
	// DefaultShutdownTimeout; at most MaxShutdownTimeout.
	ShutdownTimeout time.Duration
	// Containment forces "cgroup2" or "process-groups"; "" picks cgroup2
	// when a writable cgroup v2 exists.
	Containment string
	// CgroupName names the kin root cgroup; default "kin-" and a hash of
	// the home, stable across restarts so agents can be re-adopted.
	CgroupName string
	// PolicyConfig is the permission authority's configuration file (the
	// global deny list and the stage presets, JSON or YAML); "" ships
	// seed 003's presets restricted, supervised and full.
	PolicyConfig string
	// SandboxRO are the read-only system paths every agent with restricted
	// mounts gets; nil: sandbox.DefaultSystemRO.
	SandboxRO []string
	// SandboxBestEffort runs agents with restricted mounts unrestricted
	// where the kernel has no Landlock, instead of refusing them.
	SandboxBestEffort bool
	// ShimPath is the kin binary that applies the sandbox when the daemon
	// is not itself a kin binary (tests); "" uses the published kin.
	ShimPath string
	// Issuer is the AAuth issuer URL of the tokens kin signs (agent
	// provider and person server); "" is http://<the HTTP address>.
	Issuer string
	// DefaultResponsible is the responsible party of a root registered
	// without one; "" is the login name of the user the daemon runs as
	// (the operator: whoever may open its socket).
	DefaultResponsible string
	// PersonServer is the ps claim of agent tokens: "" names kin itself,
	// "off" leaves it out.
	PersonServer string
	// ReplayCapacity bounds the signatures kin remembers so that it
	// accepts each signed request once (docs/IDENTITY.md, "Replay"): 0 is
	// 1,000,000.
	ReplayCapacity int
	// AgentTokenLifetime is how long agent tokens live: 0 is an hour, at
	// most 24 hours.
	AgentTokenLifetime time.Duration
	// LogCheckpointEvents and LogCheckpointInterval say how often kin signs
	// a checkpoint of its event log: once this many events were appended
	// since the last (0: 1000), and at this interval when any were (0: 10
	// s); and always on shutdown.
	LogCheckpointEvents   int
	LogCheckpointInterval time.Duration
	// Traces says where OpenTelemetry spans of spawns and registrations
	// go: "" or "off" (none, no tracer runs), "otlp" (OTLP over HTTP,
	// configured by the standard OTEL_EXPORTER_OTLP_* environment), or
	// "file:PATH" (JSON lines of spans appended to PATH).
	Traces string
	// ModelUpstreams are the model gateway's upstreams (kin serve
	// --model-upstream, --model-api, --model-key): none, no gateway.
	ModelUpstreams []gateway.Upstream
	// ModelTransport reaches them (nil: the gateway's own transport).
	ModelTransport http.RoundTripper
	// Logger receives the daemon's structured logs; nil discards them.
	Logger *slog.Logger
	// Clock returns the current time; tests inject their own.
	Clock func() time.Time
}

// DefaultShutdownTimeout is Config.ShutdownTimeout's default: below the
// 90 s systemd gives a service to stop before it kills it.
const DefaultShutdownTimeout = runner.DefaultShutdownTimeout

// MaxShutdownTimeout is the longest Config.ShutdownTimeout: no grace is
// longer (kin.MaxGrace).
const MaxShutdownTimeout = kin.MaxGrace

// DefaultHTTPAddr is where the HTTP API listens unless told otherwise.
const DefaultHTTPAddr = "127.0.0.1:7777"

// DefaultHome is kin.DefaultHome, or ".kin" where no home directory is
// known.
func DefaultHome() string {
	if h, err := kin.DefaultHome(); err == nil {
		return h
	}
	return ".kin"
}

// DefaultConfig returns the defaults: home from DefaultHome, HTTP on
// DefaultHTTPAddr, the default profile, SQLite in the home.
func DefaultConfig() Config {
	c := Config{Home: DefaultHome(), HTTPAddr: DefaultHTTPAddr, Profile: "default", Version: "dev"}
	if os.Geteuid() == 0 {
		c.AgentUIDs = true
	}
	return c
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	if c.Home == "" {
		return fmt.Errorf("config: home is empty")
	}
	if len(c.DefaultResponsible) > kin.MaxResponsibleLen {
		return fmt.Errorf("config: default responsible is longer than %d bytes", kin.MaxResponsibleLen)
	}
	if _, err := storeopen.ParseDSN(c.Store, c.Home); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.HostLease < 0 || c.FenceAfter < 0 {
		return fmt.Errorf("config: a negative host lease or fence-after")
	}
	if err := hosts.CheckTimes(c.HostLease, c.FenceAfter); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.FenceMode != "" {
		if err := runner.CheckFenceMode(c.FenceMode); err != nil {
			return fmt.Errorf("config: fence mode %q: %w", c.FenceMode, err)
		}
	}
	if c.Ctx != "" && !filepath.IsAbs(c.Ctx) {
		return fmt.Errorf("config: ctx %q is not an absolute path", c.Ctx)
	}
	if c.Ctx != "" && strings.ContainsAny(c.Ctx, "\x00\n") {
		return fmt.Errorf("config: ctx %q holds a NUL or a newline", c.Ctx)
	}
	if c.HTTPAddr != "" && c.HTTPAddr != "off" && !strings.Contains(c.HTTPAddr, ":") {
		return fmt.Errorf("config: http address %q is not host:port (or \"off\")", c.HTTPAddr)
	}
	if c.AgentUIDs && os.Geteuid() != 0 {
		return fmt.Errorf("config: agent uids need a daemon running as root (turn them off to run agents as the daemon's user)")
	}
	if c.UIDRange != "" {
		if !c.AgentUIDs {
			return fmt.Errorf("config: uid range %s: agents run as the daemon's user here (a daemon not running as root), so a uid range has no use", c.UIDRange)
		}
		if _, err := uidrange.Parse(c.UIDRange); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if c.UIDRangeDir != "" && !filepath.IsAbs(c.UIDRangeDir) {
		return fmt.Errorf("config: uid range directory %q is not an absolute path", c.UIDRangeDir)
	}
	switch c.Synchronous {
	case "", "FULL", "NORMAL":
	default:
		return fmt.Errorf("config: synchronous %q is not FULL or NORMAL", c.Synchronous)
	}
	if _, _, err := c.traces(); err != nil {
		return err
	}
	if c.LogCheckpointEvents < 0 {
		return fmt.Errorf("config: log checkpoint events %d is negative", c.LogCheckpointEvents)
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > MaxShutdownTimeout {
		return fmt.Errorf("config: shutdown timeout %v is outside 0..%v (0: %v)", c.ShutdownTimeout, MaxShutdownTimeout, DefaultShutdownTimeout)
	}
	if c.LogCheckpointInterval < 0 {
		return fmt.Errorf("config: log checkpoint interval %v is negative", c.LogCheckpointInterval)
	}
	if c.ReplayCapacity < 0 {
		return fmt.Errorf("config: replay capacity %d is negative", c.ReplayCapacity)
	}
	if err := gateway.Check(c.ModelUpstreams); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Trace exporters of Config.Traces.
const (
	TracesOff  = "off"
	TracesOTLP = "otlp"
	TracesFile = "file"
)

// traces parses Traces into the exporter (TracesOff, TracesOTLP or
// TracesFile) and, for a file, its path.
func (c *Config) traces() (mode, path string, err error) {
	switch t := c.Traces; {
	case t == "" || t == TracesOff:
		return TracesOff, "", nil
	case t == TracesOTLP:
		return TracesOTLP, "", nil
	case strings.HasPrefix(t, TracesFile+":"):
		path = strings.TrimPrefix(t, TracesFile+":")
		if path == "" || strings.ContainsAny(path, "\x00\n") {
			return "", "", fmt.Errorf("config: traces %q: name the file (file:PATH)", t)
		}
		return TracesFile, path, nil
	}
	return "", "", fmt.Errorf("config: traces %q is not off, otlp or file:PATH", c.Traces)
}

// tracesMode is what the log says of Traces: as set, "off" when unset.
func (c *Config) tracesMode() string {
	if c.Traces == "" {
		return TracesOff
	}
	return c.Traces
}

// ctxDir is the agent filesystem's root.
func (c *Config) ctxDir() string {
	if c.Ctx != "" {
		return filepath.Clean(c.Ctx)
	}
	return filepath.Join(c.Home, "ctx")
}

// loginName is the login name of the user the daemon runs as: the operator
// who answers for roots registered without a responsible party.
func loginName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, v := range []string{"USER", "LOGNAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}
