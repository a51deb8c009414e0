package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/gateway"
	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/hosts"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/store/storeopen"
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

// serveFlags are serve's flag values, "" where not given.
type serveFlags struct {
	home, http, profile, store, ctx, containment, leaveRunning string
	policyConfig, bestEffort                                   string
	issuer, personServer, tokenLifetime                        string
	checkpointEvery, checkpointInterval                        string
	traces, defaultResponsible, logFile                        string
	uidRange, shutdownTimeout, hostName, logKeyDir             string
	hostLease, fenceAfter, fenceMode                           string
	modelUpstreams, modelAPIs, modelKeys                       []string
}

// Containment choices of --containment; "auto" is the daemon's "".
var containments = []string{"auto", "cgroup2", "pid-namespaces", "process-groups"}

func (a *app) serveCommand() *cobra.Command {
	var (
		fl           serveFlags
		leaveRunning bool
		bestEffort   bool
	)
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the kin daemon",
		Long: `Run the kin daemon: the lineage registry and governor every other command
talks to. It runs until interrupted (SIGINT or SIGTERM), then shuts down
cleanly. Logs are JSON lines on stderr.

kin keeps its state in its home directory (--home, else $KIN_HOME, else ~/.kin;
as root /var/lib/kin/home, which agents, run as their own uids, can reach),
created with mode 0700:

  kin.sock        the operator socket, mode 0600. Whoever can open it is the
                  operator: the kin CLI on this machine talks through it and
                  needs no token.
  operator.token  the operator token, mode 0600, made on first start. HTTP
                  clients send it as "Authorization: Bearer <token>"; the CLI
                  uses it when KIN_ADDR=host:port and KIN_TOKEN=<token> are set.
  kin.db          the SQLite database: agents, events, governor settings
                  (unless --store names another file or a PostgreSQL
                  database: --store postgres://USER@HOST/DB, or a Unix
                  socket: postgres://USER@/DB?host=/run/postgresql).
  kin.lock        held while a daemon runs, so that two never share a home.
  logs/           each spawned agent's output, ID.log ("kin logs").
  ctx/            the agent filesystem of seed 001 (--ctx moves it, e.g. to
                  /ctx): agent/NAME.d/ control files and agent/NAME.sock
                  sockets, home/UID/agent/NAME/session/SID/ sessions, and in
                  each parent's session context/child/CHILD/ its children's
                  handoffs and checked results. See "The agent filesystem" in
                  the README.

Agents' processes ("kin spawn") run each in its own cgroup, nested like the
lineage under a kin root cgroup, when a writable cgroup v2 exists; else in
process groups (--containment forces one or the other). The line kin serve
prints once it listens says which is in force. When kin serve stops cleanly
it stops every agent, unless --leave-running: then they go on, and the next
kin serve on the same home takes them back.

Stopping: on SIGTERM or SIGINT every independent subtree is stopped at once
(SIGTERM, each agent's grace, then SIGKILL), and the whole shutdown is
bounded by --shutdown-timeout (default ` + daemon.DefaultShutdownTimeout.String() + `, below the 90 s systemd
waits before it kills a service): when it passes, every agent process still
running is killed at once and recorded (cancelled, reason shutdown). A grace
longer than the timeout is cut to it. Restarting: kin serve answers at once
and checks the agents an earlier kin serve left running in the background
(re-adopting the live ones, recording the dead ones lost); until each is
checked, kin show and kin ps mark it "unchecked", kin status counts them, and
a stop or freeze of one waits for its check.

Agent uids: a root kin serve runs agent N as uid and gid START+N of its
home's uid range, START:COUNT, so that agents cannot read one another's
files or signal one another. Every home has a range of its own, so that
the agents of two daemons on one host never share a uid. At first start
the daemon allocates the lowest free range of ` + strconv.Itoa(uidrange.DefaultCount) + ` uids from
` + strconv.Itoa(uidrange.DefaultStart) + ` (about a million: a home never reuses an agent id, so this
bounds how many agents it can ever spawn, while leaving room for some 2000
daemons below uid 2^31); --uid-range START:COUNT chooses it instead. The
range is recorded in the home (uid-range) and in the host's allocation file
` + uidrange.DefaultDir + `/` + uidrange.HostFileName + ` (another directory with
KIN_UID_RANGE_DIR), changed under a lock; a restart keeps it. A range that
overlaps another daemon's, or a user or group of /etc/passwd or /etc/group,
or a subordinate range of /etc/subuid or /etc/subgid, is refused at start,
naming both. An entry whose home is gone (or no longer records that range
in its uid-range file) is stale: the next daemon to start reclaims it, so
removing a home, or its uid-range file while none of its agents runs, frees
its range. Agent ids past the range are refused, never wrapped. A home's
range cannot be changed once recorded.

Metrics: GET /metrics serves Prometheus metrics (kin_*, and the Go runtime's
and the process's) on the socket, and on the HTTP address to holders of the
operator token. Traces: --traces otlp sends an OpenTelemetry span for each
spawn, registration and crash replacement, nested like the lineage, over
OTLP/HTTP (set OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_EXPORTER_OTLP_*
variables);
--traces file:PATH appends them to PATH as JSON lines. See
docs/OBSERVABILITY.md.

Fleet: every kin serve on one PostgreSQL store is a host of the fleet
(--host-name), holding a lease on its name that it renews every third of
its length (--host-lease). A host whose lease runs out unrenewed (its daemon
killed, or cut off from the store) has its agents marked offline by the
other hosts, with an agent.offline alert to each one's parent; their owned
descendants on other hosts run on, for the parent to decide. A daemon
restarted on its home re-adopts what still runs and brings it back from
offline. A host that has not renewed its lease for --fence-after fences
itself: it stops (or, with "--fence-mode freeze", freezes) every agent it
runs, without waiting on the store, so that no owned subtree runs
unsupervised; when the store answers again it renews its lease, records
what ended and thaws what it froze. See docs/ARCHITECTURE.md, "The fleet:
hosts, leases, failure and fencing".

Model gateway: --model-upstream NAME=URL (repeatable) makes kin the agents'
only way to their models. kin then serves the OpenAI API
(/v1/chat/completions, /v1/responses, /v1/embeddings, /v1/models) and
Anthropic's (/v1/messages, /v1/messages/count_tokens) on each agent's socket
and on the HTTP address, and forwards each call to the upstream with the
operator's key, which no agent ever sees. Each agent's environment gets
OPENAI_BASE_URL (http://<the --http address>/v1), ANTHROPIC_BASE_URL
(without /v1), and OPENAI_API_KEY, ANTHROPIC_API_KEY and KIN_MODEL_KEY set
to a credential of its own, honoured only from that agent and only while it
runs; a spawn whose environment holds an upstream's key is refused. Each
call is admitted against the agent's budget (max_tokens, max_cost: a spent
subtree gets HTTP 429 in the provider's error shape) and its policy's models
list (403), its output tokens capped to what is left, and metered from the
upstream's answer (streams included): tokens and cost (the policy config's
prices, per million tokens) added to the agent and every ancestor in one
transaction with a model.call event. An upstream named openai or anthropic
speaks that API; any other needs --model-api NAME=openai|anthropic. Its key:
--model-key NAME=@FILE (the file's content) or NAME=$VARIABLE (the daemon's
environment), or NAME=none; never the key itself on the command line. The
URL is the provider's base, with or without /v1. A request goes to the first
upstream of its API, or to upstream NAME when its model is "NAME/model"
(sent on as "model"). See docs/POLICY.md, "Models".

MCP: the HTTP address serves kin's MCP tools at /mcp (streamable HTTP) to
the operator's token and to agents that sign their requests with their own
key; see "kin mcp --help".

Configuration: built-in defaults, overridden by KIN_HOME, KIN_HTTP,
KIN_PROFILE, KIN_STORE, KIN_HOST_NAME, KIN_HOST_LEASE, KIN_FENCE_AFTER,
KIN_FENCE_MODE, KIN_LOG_KEY_DIR, KIN_CTX, KIN_CONTAINMENT, KIN_LEAVE_RUNNING,
KIN_POLICY_CONFIG, KIN_SANDBOX_BEST_EFFORT, KIN_TRACES, KIN_UID_RANGE,
KIN_UID_RANGE_DIR, KIN_SHUTDOWN_TIMEOUT and KIN_MODEL_UPSTREAMS,
KIN_MODEL_APIS, KIN_MODEL_KEYS (each a list separated by spaces or commas
of what the repeatable flag takes), overridden by
the flags. The HTTP API listens on
` + daemon.DefaultHTTPAddr + ` unless --http says otherwise ("--http off" serves
the socket only). Shipped profiles: ` + strings.Join(governor.ShippedProfiles(), ", ") + `; see
"kin governor show".`,
		Example: `  kin serve
  kin serve --home /var/lib/kin --http off
  kin serve --profile hierarchy --http 127.0.0.1:8080
  KIN_PROFILE=./my-profile.json kin serve --store sqlite:/data/kin.db
  kin serve --store 'postgres://kin@db.example/kin?sslmode=verify-full'
  KIN_STORE=postgres://kin@/kin?host=/run/postgresql kin serve
  kin serve --containment process-groups --leave-running
  kin serve --shutdown-timeout 20s
  kin serve --ctx /ctx
  kin serve --policy-config /etc/kin/policy.yaml
  OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 kin serve --traces otlp
  kin serve --traces file:/var/log/kin/spans.jsonl
  kin serve --uid-range 300000:65536
  kin serve --model-upstream openai=https://api.openai.com --model-key 'openai=$OPENAI_API_KEY'
  kin serve --model-upstream anthropic=https://api.anthropic.com --model-key anthropic=@/etc/kin/anthropic.key
  kin serve --model-upstream local=http://127.0.0.1:8000 --model-api local=openai --model-key local=none`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			fl.home = a.home
			if cmd.Flags().Changed("leave-running") {
				fl.leaveRunning = strconv.FormatBool(leaveRunning)
			}
			if cmd.Flags().Changed("sandbox-best-effort") {
				fl.bestEffort = strconv.FormatBool(bestEffort)
			}
			cfg, err := serveConfig(a.env.Getenv, fl)
			if err != nil {
				return err
			}
			logOut, closeLog, err := a.openServeLog(fl.logFile)
			if err != nil {
				return err
			}
			defer closeLog()
			cfg.Logger = slog.New(slog.NewJSONHandler(logOut, nil))
			cfg.Version = version()
			ctx := cmd.Context()
			// The daemon serves no heap profile: sampling its allocations
			// only grows the runtime's profile records (about 1.5 MiB with
			// 2,000 agents; issue 22's memory).
			runtime.MemProfileRate = 0
			d, err := daemon.Start(ctx, cfg)
			if err != nil {
				return kin.Errorf(kin.ECodeUnavailable, "kin serve cannot start: %v", err)
			}
			st, err := d.Status(ctx)
			if err != nil {
				d.Close()
				return kin.Errorf(kin.ECodeUnavailable, "kin serve started but cannot describe itself: %v", err)
			}
			info := serveInfo{
				Version:           cfg.Version,
				Home:              cfg.Home,
				Socket:            d.SocketPath(),
				HTTP:              d.HTTPAddr(),
				TokenFile:         filepath.Join(cfg.Home, daemon.TokenName),
				Profile:           cfg.Profile,
				Store:             storeDescription(cfg),
				Host:              st.Host,
				Containment:       st.Containment,
				ContainmentReason: st.ContainmentReason,
				CgroupRoot:        st.CgroupRoot,
				AgentUIDRange:     st.AgentUIDRange,
				Sandbox:           st.Sandbox,
				Missing:           st.Missing,
				Ctx:               d.CtxRoot(),
				LeaveRunning:      cfg.LeaveRunning,
			}
			if a.jsonOut {
				err = a.printJSON(info)
			} else {
				_, err = fmt.Fprintln(a.env.Stderr, info.line())
			}
			if err == nil {
				<-ctx.Done()
				// Said in the log (JSON on stderr, where every line but the
				// start-up line is a log record), and plainly on stderr
				// when the log goes to a file.
				stopping := stoppingLine(d, cfg.LeaveRunning, cfg.ShutdownTimeout)
				cfg.Logger.Info(stopping)
				if logOut != a.env.Stderr {
					fmt.Fprintln(a.env.Stderr, stopping)
				}
			}
			if cerr := d.Close(); cerr != nil {
				return fmt.Errorf("kin serve: shutting down: %w", cerr)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&fl.http, "http", "", "TCP `address` of the HTTP API, or \"off\" (default $KIN_HTTP, else "+daemon.DefaultHTTPAddr+")")
	f.StringVar(&fl.profile, "profile", "", "governor profile: a shipped profile's `name` ("+strings.Join(governor.ShippedProfiles(), ", ")+") or a JSON file's path (default $KIN_PROFILE, else default)")
	f.StringVar(&fl.ctx, "ctx", "", "root `directory` of the agent filesystem, an absolute path (default $KIN_CTX, else <home>/ctx)")
	f.StringVar(&fl.hostName, "host-name", "", "this daemon's `NAME` in the fleet of daemons sharing its store (default $KIN_HOST_NAME, else the machine's host name); another daemon holding the name's lease is refused")
	f.StringVar(&fl.logKeyDir, "log-key-dir", "", "the verifiable log's key `DIR` (default $KIN_LOG_KEY_DIR, else <home>/keys/log; made there if missing): every host of a fleet must sign with a copy of the same key")
	f.StringVar(&fl.hostLease, "host-lease", "", "the `duration` of this host's lease on its name unless renewed (every third of it), 1s to 1h: other hosts mark its agents offline once it has run out (default $KIN_HOST_LEASE, else "+hosts.DefaultLease.String()+")")
	f.StringVar(&fl.fenceAfter, "fence-after", "", "the `duration` this host goes on without renewing its lease (the store out of reach) before it fences itself, stopping or freezing every agent it runs until it rejoins; longer than --host-lease, at most 24h (default $KIN_FENCE_AFTER, else "+hosts.DefaultFenceAfter.String()+" or twice the lease)")
	f.StringVar(&fl.fenceMode, "fence-mode", "", "what a fenced host does to its agents (`mode`): stop (SIGTERM, each agent's grace, then cgroup.kill; their ends recorded when it rejoins) or freeze (cgroup.freeze; thawed when it rejoins) (default $KIN_FENCE_MODE, else stop)")
	f.StringVar(&fl.store, "store", "", "store `DSN`: sqlite (<home>/kin.db), sqlite:PATH, or postgres://USER@HOST/DB (default $KIN_STORE, else sqlite)")
	f.StringVar(&fl.containment, "containment", "", "`how` to hold agents' processes: "+strings.Join(containments, ", ")+" (auto: cgroup2 when a writable cgroup v2 exists, else pid-namespaces where user and PID namespaces work, else process-groups) (default $KIN_CONTAINMENT, else auto)")
	f.StringVar(&fl.shutdownTimeout, "shutdown-timeout", "", "how long stopping every agent at shutdown may take, 1s to 1h: every grace ends by then, and then whatever still runs is killed at once (default $KIN_SHUTDOWN_TIMEOUT, else "+daemon.DefaultShutdownTimeout.String()+")")
	f.BoolVar(&leaveRunning, "leave-running", false, "leave agents running when kin serve stops, for the next kin serve to take back (default $KIN_LEAVE_RUNNING, else false)")
	f.StringVar(&fl.policyConfig, "policy-config", "", "the permission authority's `file` (JSON or YAML): global_deny (tools no preset can grant) and presets (stages beyond restricted, supervised, full) (default $KIN_POLICY_CONFIG, else the shipped presets)")
	f.BoolVar(&bestEffort, "sandbox-best-effort", false, "where the kernel has no Landlock, run agents whose policy restricts mounts UNRESTRICTED instead of refusing them (default $KIN_SANDBOX_BEST_EFFORT, else false)")
	f.StringVar(&fl.defaultResponsible, "default-responsible", "", "the responsible `party` of a root registered without --responsible (default $KIN_DEFAULT_RESPONSIBLE, else the login name kin serve runs as)")
	f.StringVar(&fl.issuer, "issuer", "", "AAuth issuer `URL` of the tokens kin signs as agent provider and person server (default $KIN_ISSUER, else http://<the --http address>)")
	f.StringVar(&fl.personServer, "person-server", "", "the ps claim of agent tokens: a person server's `URL`, or \"off\" (default $KIN_PERSON_SERVER, else kin itself)")
	f.StringVar(&fl.tokenLifetime, "agent-token-lifetime", "", "how long agent tokens live, 1m to 24h (default $KIN_AGENT_TOKEN_LIFETIME, else 1h)")
	f.StringVar(&fl.checkpointEvery, "log-checkpoint-every", "", "sign a checkpoint of the event log once this many `events` were recorded since the last, 1 to 1000000 (default $KIN_LOG_CHECKPOINT_EVERY, else 1000)")
	f.StringVar(&fl.checkpointInterval, "log-checkpoint-interval", "", "and at this `interval` while events arrive, 1s to 24h (default $KIN_LOG_CHECKPOINT_INTERVAL, else 10s); always on shutdown")
	f.StringVar(&fl.traces, "traces", "", "where OpenTelemetry spans of spawns, registrations and replacements go (`mode`): off, otlp (OTLP over HTTP, set by the OTEL_EXPORTER_OTLP_* environment) or file:PATH (JSON lines appended to PATH) (default $KIN_TRACES, else off)")
	f.StringVar(&fl.logFile, "log-file", "", "append the daemon's log (JSON lines) to this `file` (created 0600) instead of stderr; the start-up and stopping lines stay on stderr (default $KIN_LOG_FILE, else stderr)")
	f.StringVar(&fl.uidRange, "uid-range", "", "a root daemon's agent uid `range`, START:COUNT, recorded in the home at first start (default $KIN_UID_RANGE, else the range the home recorded, else a free one of "+strconv.Itoa(uidrange.DefaultCount)+" uids)")
	f.StringArrayVar(&fl.modelUpstreams, "model-upstream", nil, "serve the model gateway, forwarding to this upstream: `NAME=URL` (repeatable; NAME openai or anthropic speaks that API, any other needs --model-api) (default $KIN_MODEL_UPSTREAMS, else no gateway)")
	f.StringArrayVar(&fl.modelAPIs, "model-api", nil, "the API upstream NAME speaks: `NAME=openai|anthropic` (repeatable) (default $KIN_MODEL_APIS)")
	f.StringArrayVar(&fl.modelKeys, "model-key", nil, "upstream NAME's key: `NAME=@FILE` (read from FILE), NAME=$VARIABLE (from the daemon's environment) or NAME=none; never the key itself (repeatable) (default $KIN_MODEL_KEYS)")
	return cmd
}

// modelSetting is one of the model gateway's list settings: the flag's
// values, else the environment variable's list (spaces or commas).
func modelSetting(getenv func(string) string, env, flag string, values []string) ([]string, string) {
	if len(values) > 0 {
		return values, "--" + flag
	}
	if v := getenv(env); v != "" {
		return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }), env
	}
	return nil, ""
}

// serveConfig builds the daemon's configuration: defaults, then the KIN_*
// environment, then the flags. A bad value is reported with where it came
// from: a usage error for a flag, an invalid error for the environment.
func serveConfig(getenv func(string) string, fl serveFlags) (daemon.Config, error) {
	cfg := daemon.DefaultConfig()
	type setting struct{ value, source string }
	pick := func(def, env, flag, flagValue string) setting {
		if flagValue != "" {
			return setting{flagValue, "--" + flag}
		}
		if v := getenv(env); v != "" {
			return setting{v, env}
		}
		return setting{def, "default"}
	}
	bad := func(s setting, err error) error {
		msg := strings.TrimPrefix(err.Error(), "config: ")
		if strings.HasPrefix(s.source, "--") {
			return usageErrorf("%s %q: %s", s.source, s.value, msg)
		}
		return kin.Errorf(kin.ECodeInvalid, "%s=%q: %s", s.source, s.value, msg)
	}
	home := pick(cfg.Home, "KIN_HOME", "home", fl.home)
	httpAddr := pick(cfg.HTTPAddr, "KIN_HTTP", "http", fl.http)
	profile := pick(cfg.Profile, "KIN_PROFILE", "profile", fl.profile)
	store := pick(cfg.Store, "KIN_STORE", "store", fl.store)
	ctxRoot := pick("", "KIN_CTX", "ctx", fl.ctx)
	containment := pick("auto", "KIN_CONTAINMENT", "containment", fl.containment)
	leaveRunning := pick("false", "KIN_LEAVE_RUNNING", "leave-running", fl.leaveRunning)
	cfg.Home, cfg.HTTPAddr, cfg.Profile, cfg.Store = home.value, httpAddr.value, profile.value, store.value
	if kd := pick("", "KIN_LOG_KEY_DIR", "log-key-dir", fl.logKeyDir); kd.value != "" {
		if !filepath.IsAbs(kd.value) {
			return cfg, bad(kd, fmt.Errorf("not an absolute path"))
		}
		cfg.LogKeyDir = kd.value
	}
	if hn := pick("", "KIN_HOST_NAME", "host-name", fl.hostName); hn.value != "" {
		if err := kin.ValidateHostName(hn.value); err != nil {
			return cfg, bad(hn, err)
		}
		cfg.HostName = hn.value
	}
	if hl := pick("", "KIN_HOST_LEASE", "host-lease", fl.hostLease); hl.value != "" {
		d, err := time.ParseDuration(hl.value)
		if err != nil || d < time.Second || d > time.Hour {
			return cfg, bad(hl, fmt.Errorf("not a duration from 1s to 1h"))
		}
		cfg.HostLease = d
	}
	if fa := pick("", "KIN_FENCE_AFTER", "fence-after", fl.fenceAfter); fa.value != "" {
		d, err := time.ParseDuration(fa.value)
		if err != nil || d < time.Second || d > 24*time.Hour {
			return cfg, bad(fa, fmt.Errorf("not a duration from 1s to 24h"))
		}
		if err := hosts.CheckTimes(cfg.HostLease, d); err != nil {
			return cfg, bad(fa, err)
		}
		cfg.FenceAfter = d
	}
	if fm := pick("", "KIN_FENCE_MODE", "fence-mode", fl.fenceMode); fm.value != "" {
		if fm.value != "stop" && fm.value != "freeze" {
			return cfg, bad(fm, fmt.Errorf("not stop or freeze"))
		}
		cfg.FenceMode = fm.value
	}
	if !slices.Contains(containments, containment.value) {
		return cfg, bad(containment, fmt.Errorf("not one of %s", strings.Join(containments, ", ")))
	}
	if containment.value != "auto" {
		cfg.Containment = containment.value
	}
	lr, err := strconv.ParseBool(leaveRunning.value)
	if err != nil {
		return cfg, bad(leaveRunning, fmt.Errorf("not true or false"))
	}
	cfg.LeaveRunning = lr
	if st := pick("", "KIN_SHUTDOWN_TIMEOUT", "shutdown-timeout", fl.shutdownTimeout); st.value != "" {
		d, err := time.ParseDuration(st.value)
		if err != nil || d < time.Second || d > daemon.MaxShutdownTimeout {
			return cfg, bad(st, fmt.Errorf("not a duration from 1s to %s", daemon.MaxShutdownTimeout))
		}
		cfg.ShutdownTimeout = d
	}
	bestEffort := pick("false", "KIN_SANDBOX_BEST_EFFORT", "sandbox-best-effort", fl.bestEffort)
	if cfg.SandboxBestEffort, err = strconv.ParseBool(bestEffort.value); err != nil {
		return cfg, bad(bestEffort, fmt.Errorf("not true or false"))
	}
	cfg.DefaultResponsible = pick("", "KIN_DEFAULT_RESPONSIBLE", "default-responsible", fl.defaultResponsible).value
	issuer := pick("", "KIN_ISSUER", "issuer", fl.issuer)
	cfg.Issuer = issuer.value
	if cfg.Issuer != "" {
		if u, err := url.Parse(cfg.Issuer); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return cfg, bad(issuer, fmt.Errorf("not an http(s) URL with a host and no path"))
		}
	}
	ps := pick("", "KIN_PERSON_SERVER", "person-server", fl.personServer)
	cfg.PersonServer = ps.value
	if ps.value != "" && ps.value != "off" {
		if u, err := url.Parse(ps.value); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, bad(ps, fmt.Errorf("not an http(s) URL, nor off"))
		}
	}
	if life := pick("", "KIN_AGENT_TOKEN_LIFETIME", "agent-token-lifetime", fl.tokenLifetime); life.value != "" {
		d, err := time.ParseDuration(life.value)
		if err != nil || d < time.Minute || d > 24*time.Hour {
			return cfg, bad(life, fmt.Errorf("not a duration from 1m to 24h"))
		}
		cfg.AgentTokenLifetime = d
	}
	if every := pick("", "KIN_LOG_CHECKPOINT_EVERY", "log-checkpoint-every", fl.checkpointEvery); every.value != "" {
		n, err := strconv.Atoi(every.value)
		if err != nil || n < 1 || n > 1000000 {
			return cfg, bad(every, fmt.Errorf("not a whole number from 1 to 1000000"))
		}
		cfg.LogCheckpointEvents = n
	}
	if iv := pick("", "KIN_LOG_CHECKPOINT_INTERVAL", "log-checkpoint-interval", fl.checkpointInterval); iv.value != "" {
		d, err := time.ParseDuration(iv.value)
		if err != nil || d < time.Second || d > 24*time.Hour {
			return cfg, bad(iv, fmt.Errorf("not a duration from 1s to 24h"))
		}
		cfg.LogCheckpointInterval = d
	}
	traces := pick("off", "KIN_TRACES", "traces", fl.traces)
	cfg.Traces = traces.value
	if probe := (daemon.Config{Home: cfg.Home, Traces: cfg.Traces}); probe.Validate() != nil {
		return cfg, bad(traces, probe.Validate())
	}
	policyConfig := pick("", "KIN_POLICY_CONFIG", "policy-config", fl.policyConfig)
	if policyConfig.value != "" {
		b, err := os.ReadFile(policyConfig.value)
		if err == nil {
			_, err = policy.ParseConfig(b)
		}
		if err != nil {
			return cfg, bad(policyConfig, err)
		}
		cfg.PolicyConfig = policyConfig.value
	}
	if probe := (daemon.Config{Home: cfg.Home, HTTPAddr: cfg.HTTPAddr}); probe.Validate() != nil {
		return cfg, bad(httpAddr, probe.Validate())
	}
	if probe := (daemon.Config{Home: cfg.Home, Store: cfg.Store}); probe.Validate() != nil {
		return cfg, bad(setting{storeopen.Redact(store.value), store.source}, probe.Validate()) // a DSN may hold a password
	}
	cfg.Ctx = ctxRoot.value
	if probe := (daemon.Config{Home: cfg.Home, Ctx: cfg.Ctx}); probe.Validate() != nil {
		return cfg, bad(ctxRoot, probe.Validate())
	}
	uidRange := pick("", "KIN_UID_RANGE", "uid-range", fl.uidRange)
	if uidRange.value != "" {
		if !cfg.AgentUIDs {
			return cfg, bad(uidRange, fmt.Errorf("agents run as the daemon's user when kin serve does not run as root, so a uid range has no use"))
		}
		if _, err := uidrange.Parse(uidRange.value); err != nil {
			return cfg, bad(uidRange, err)
		}
		cfg.UIDRange = uidRange.value
	}
	if dir := getenv("KIN_UID_RANGE_DIR"); dir != "" {
		cfg.UIDRangeDir = dir
		if probe := (daemon.Config{Home: cfg.Home, UIDRangeDir: dir}); probe.Validate() != nil {
			return cfg, bad(setting{dir, "KIN_UID_RANGE_DIR"}, probe.Validate())
		}
	}
	if _, _, err := governor.Load(cfg.Profile); err != nil {
		return cfg, bad(profile, err)
	}
	ups, upsFrom := modelSetting(getenv, "KIN_MODEL_UPSTREAMS", "model-upstream", fl.modelUpstreams)
	apis, apisFrom := modelSetting(getenv, "KIN_MODEL_APIS", "model-api", fl.modelAPIs)
	keys, keysFrom := modelSetting(getenv, "KIN_MODEL_KEYS", "model-key", fl.modelKeys)
	if len(ups) > 0 || len(apis) > 0 || len(keys) > 0 {
		if len(ups) == 0 {
			return cfg, usageErrorf("--model-api and --model-key name upstreams, and no --model-upstream (nor KIN_MODEL_UPSTREAMS) is given")
		}
		cfg.ModelUpstreams, err = gateway.Build(ups, apis, keys, getenv, os.ReadFile)
		if err != nil {
			// The message names the upstream, never a key's value.
			from := strings.Join(slices.DeleteFunc([]string{upsFrom, apisFrom, keysFrom}, func(s string) bool { return s == "" }), ", ")
			if strings.HasPrefix(from, "--") {
				return cfg, usageErrorf("%v (from %s)", err, from)
			}
			return cfg, kin.Errorf(kin.ECodeInvalid, "%v (from %s)", err, from)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, kin.Errorf(kin.ECodeInvalid, "%v", err)
	}
	return cfg, nil
}

// storeDescription says where the store is, as the daemon resolves the DSN
// (without secrets).
func storeDescription(cfg daemon.Config) string {
	d, err := storeopen.ParseDSN(cfg.Store, cfg.Home)
	if err != nil {
		return storeopen.Redact(cfg.Store) // not reached: the config was validated
	}
	return d.String()
}

// version is the module version kin was built as, or "dev".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// openServeLog opens where the daemon logs: the --log-file (or
// $KIN_LOG_FILE) appended to, else stderr.
func (a *app) openServeLog(flag string) (io.Writer, func(), error) {
	path, source := flag, "--log-file"
	if path == "" {
		path, source = a.env.Getenv("KIN_LOG_FILE"), "KIN_LOG_FILE"
	}
	if path == "" {
		return a.env.Stderr, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		msg := fmt.Sprintf("%s %q: cannot append the log there: %v", source, path, errors.Unwrap(err))
		if source == "--log-file" {
			return nil, nil, usageErrorf("%s", msg)
		}
		return nil, nil, kin.Errorf(kin.ECodeInvalid, "%s", msg)
	}
	return f, func() { f.Close() }, nil
}

// stoppingLine is what kin serve says when asked to stop (Ctrl-C,
// SIGTERM): what it stops and how long that may take, since a clean stop
// gives every running agent its grace before killing it, within the
// shutdown timeout.
func stoppingLine(d *daemon.Daemon, leaveRunning bool, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	agents, err := d.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		return "kin serve: stopping"
	}
	n, grace := 0, time.Duration(0)
	for _, ag := range agents {
		if !ag.Running() {
			continue
		}
		n++
		g := kin.DefaultGrace
		if ag.Grace != 0 {
			g = time.Duration(ag.Grace)
		}
		grace = max(grace, g)
	}
	switch {
	case n == 0:
		return "kin serve: stopping (no agent is running)"
	case leaveRunning:
		return fmt.Sprintf("kin serve: stopping, leaving %d running agent(s) for the next kin serve on this home (--leave-running)", n)
	}
	if timeout == 0 {
		timeout = daemon.DefaultShutdownTimeout
	}
	return fmt.Sprintf("kin serve: stopping %d running agent(s), every subtree at once: SIGTERM, then SIGKILL after each one's grace (up to %s here), all within %s (--shutdown-timeout), then the store is closed", n, min(grace, timeout), timeout)
}

// serveInfo is what `kin serve --json` prints once it listens.
type serveInfo struct {
	Version           string `json:"version"`
	Home              string `json:"home"`
	Socket            string `json:"socket"`
	HTTP              string `json:"http,omitempty"`
	TokenFile         string `json:"token_file"`
	Profile           string `json:"profile"`
	Store             string `json:"store"`
	Host              string `json:"host"`
	Containment       string `json:"containment"`
	ContainmentReason string `json:"containment_reason,omitempty"`
	CgroupRoot        string `json:"cgroup_root,omitempty"`
	AgentUIDRange     string `json:"agent_uid_range,omitempty"`
	// Sandbox and Missing: what confines every agent, and the guarantees
	// this kernel and containment cannot give (kin.DaemonStatus's).
	Sandbox      string   `json:"sandbox,omitempty"`
	Missing      []string `json:"missing,omitempty"`
	Ctx          string   `json:"ctx"`
	LeaveRunning bool     `json:"leave_running"`
}

// line is the one readable line serve prints on stderr once it listens.
func (s serveInfo) line() string {
	httpPart := "http://" + s.HTTP
	if s.HTTP == "" {
		httpPart = "no TCP address (--http off)"
	}
	contained := "agents contained by " + containmentString(s.Containment, s.ContainmentReason)
	if s.CgroupRoot != "" {
		contained += " under " + s.CgroupRoot
	}
	uids := "agents run as the daemon's user"
	if s.AgentUIDRange != "" {
		uids = "agents run as uids " + agentUIDsString(s.AgentUIDRange)
	}
	if s.Sandbox != "" {
		uids += "; every agent sandboxed (" + s.Sandbox + ")"
	}
	stop := "Ctrl-C to stop (and stop every agent)"
	if s.LeaveRunning {
		stop = "Ctrl-C to stop (agents keep running)"
	}
	line := fmt.Sprintf("kin serve: listening on socket %s (operator access, mode 0600) and %s; operator token for HTTP in %s; profile %s; store %s; agent filesystem %s; %s; %s; %s",
		s.Socket, httpPart, s.TokenFile, s.Profile, s.Store, s.Ctx, contained, uids, stop)
	if len(s.Missing) > 0 {
		// The log has a "guarantee missing" line for each; kin status lists them.
		line += fmt.Sprintf("; %d guarantee(s) this host cannot give: see kin status", len(s.Missing))
	}
	return line
}
