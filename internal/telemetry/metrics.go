package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Prometheus metrics (docs/OBSERVABILITY.md lists them). Each daemon has a
// registry of its own, so that two daemons in one process (tests) do not
// share counters. Counters and histograms are updated where things happen;
// what the store knows (agents by state, the event log's size, the oldest
// heartbeat) is read when /metrics is scraped.

// Spawn kinds: the kind label of kin_spawns_total.
const (
	spawnKindSpawn    = "spawn"    // kin spawn: registered with a process
	spawnKindRegister = "register" // kin register: an external agent
	spawnKindRestart  = "restart"  // a replacement started by a restart policy
)

// Histogram buckets.
var (
	cascadeSizeBuckets    = []float64{1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}
	cascadeSecondsBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	heartbeatBuckets      = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600}
)

// Source is what the metrics read at scrape time.
type Source interface {
	// Store is the store the counts come from.
	Store() store.Store
	// Profile is the governor's profile in force (its roles label agents).
	Profile() kin.Profile
	// Running is how many agent processes run now.
	Running() int
	// Containment is how agents are contained ("" before the supervisor
	// started), and MissingGuarantees what this kernel cannot give them.
	Containment() string
	MissingGuarantees() []string
}

// Metrics are kin's Prometheus metrics, on a registry of their own.
type Metrics struct {
	handler    http.Handler
	spawned    prometheus.Counter // kin_spawns_total's children, by kind
	registered prometheus.Counter
	restarted  prometheus.Counter
	rejections *prometheus.CounterVec
	cascadeN   *prometheus.HistogramVec
	cascadeDur *prometheus.HistogramVec
	heartbeat  prometheus.Histogram
	httpDur    *prometheus.HistogramVec
	httpObs    sync.Map // httpKey → httpDur's child (prometheus.Observer)
	// The model gateway's calls (issue 25), by model: at most maxModels
	// distinct names are labelled (agents name models), the rest "other".
	modelCalls  *prometheus.CounterVec
	modelTokens *prometheus.CounterVec
	modelCost   *prometheus.CounterVec
	modelDur    *prometheus.HistogramVec
	// The same tokens and cost by the calling agent's tree (its root's
	// id): at most maxRoots roots labelled, the rest "other".
	rootTokens *prometheus.CounterVec
	rootCost   *prometheus.CounterVec
	modelMu    sync.Mutex
	models     map[string]bool
	roots      map[kin.AgentID]bool
}

// maxRoots bounds the distinct root labels of the model metrics.
const maxRoots = 100

// maxModels bounds the distinct model labels: agents choose the names.
const maxModels = 100

// httpKey is what a request's latency is filed under, before labelling.
type httpKey struct {
	pattern string
	status  int
}

// NewMetrics makes the metrics; src is read at scrape time.
func NewMetrics(src Source, clock func() time.Time, log *slog.Logger) *Metrics {
	spawns := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kin_spawns_total",
		Help: "Agents admitted by the governor and recorded, by kind: spawn (with a process), register (external) or restart (a replacement).",
	}, []string{"kind"})
	m := &Metrics{
		spawned:    spawns.WithLabelValues(spawnKindSpawn),
		registered: spawns.WithLabelValues(spawnKindRegister),
		restarted:  spawns.WithLabelValues(spawnKindRestart),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_spawn_rejections_total",
			Help: "Spawns and registrations refused in the registering transaction, by reason: the kin error code (spawn_depth_exceeded, spawn_circuit_open, conflict, ...).",
		}, []string{"reason"}),
		cascadeN: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kin_cascade_agents",
			Help:    "Agents stopped and recorded by one stop or cascade (an owned subtree's cancellation), by reason (stopped, terminated, parent_dead, shutdown, ...).",
			Buckets: cascadeSizeBuckets,
		}, []string{"reason"}),
		cascadeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kin_cascade_duration_seconds",
			Help:    "Seconds from a stop or cascade's start until every process of the subtree was reaped and its end recorded, by reason.",
			Buckets: cascadeSecondsBuckets,
		}, []string{"reason"}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kin_heartbeat_interval_seconds",
			Help:    "Seconds between an agent's heartbeat and its previous one (the daemon's clock); an agent's first heartbeat is not observed.",
			Buckets: heartbeatBuckets,
		}),
		httpDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kin_http_request_duration_seconds",
			Help:    "Seconds to answer an API request (operator socket, agent sockets and the HTTP address), by route pattern and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "code"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_model_calls_total",
			Help: "Calls through kin's model gateway, by API (openai, anthropic), model (as agents named it; past 100 distinct names, other) and the upstream's HTTP status (0: no answer).",
		}, []string{"api", "model", "code"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_model_tokens_total",
			Help: "Tokens the model upstreams' answers reported, by model and kind: input (every prompt token), cached (those of them read from the provider's cache), output.",
		}, []string{"model", "kind"}),
		modelCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_model_cost_total",
			Help: "What the model gateway's calls cost at the policy config's prices (the unit of budget.max_cost), by model.",
		}, []string{"model"}),
		modelDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kin_model_call_duration_seconds",
			Help:    "Seconds from a model call's arrival at the gateway to the end of the upstream's answer (a stream's last event), by API.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"api"}),
		rootTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_model_root_tokens_total",
			Help: "Tokens of the model gateway's calls by the calling agent's tree (its root's id; past 100 roots, other) and kind: input, cached, output.",
		}, []string{"root", "kind"}),
		rootCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kin_model_root_cost_total",
			Help: "What the model gateway's calls cost, by the calling agent's tree (its root's id; past 100 roots, other).",
		}, []string{"root"}),
		models: map[string]bool{},
		roots:  map[kin.AgentID]bool{},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.modelCalls, m.modelTokens, m.modelCost, m.modelDur, m.rootTokens, m.rootCost)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		spawns, m.rejections, m.cascadeN, m.cascadeDur, m.heartbeat, m.httpDur,
		&stateCollector{src: src, clock: clock, log: log},
		containmentCollector{src: src},
	)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError, // what could be read is served
		Timeout:       30 * time.Second,
	})
	return m
}

// Handler serves /metrics (Prometheus text format).
func (m *Metrics) Handler() http.Handler { return m.handler }

// countSpawn counts an admitted agent: register's extra says its kind.
func (m *Metrics) countSpawn(extra *registry.SpawnExtra) {
	switch {
	case extra == nil:
		m.registered.Inc()
	case extra.Replaces != 0:
		m.restarted.Inc()
	default:
		m.spawned.Inc()
	}
}

// countRejection counts a refused spawn or registration by its error code.
func (m *Metrics) countRejection(err error) {
	m.rejections.WithLabelValues(string(kin.ErrorCodeOf(err))).Inc()
}

// observeCascade records one stop or cascade: how many agents it ended and
// how long it took since began.
func (m *Metrics) observeCascade(reason string, agents int, began time.Time) {
	m.cascadeN.WithLabelValues(reason).Observe(float64(agents))
	m.cascadeDur.WithLabelValues(reason).Observe(time.Since(began).Seconds())
}

// observeHeartbeat records the time since an agent's previous heartbeat.
func (m *Metrics) observeHeartbeat(prev, now time.Time) {
	if prev.IsZero() || now.Before(prev) {
		return
	}
	m.heartbeat.Observe(now.Sub(prev).Seconds())
}

// ObserveHTTP is httpapi.Server.Observe. Each (pattern, status) is
// labelled once, on its first request; later ones find the child cached.
func (m *Metrics) ObserveHTTP(pattern string, status int, d time.Duration) {
	k := httpKey{pattern, status}
	o, ok := m.httpObs.Load(k)
	if !ok {
		o, _ = m.httpObs.LoadOrStore(k, m.httpDur.WithLabelValues(routeLabel(pattern), strconv.Itoa(status)))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// ObserveModelCall counts one call through the model gateway, made by an
// agent of the tree whose root is root.
func (m *Metrics) ObserveModelCall(c kin.ModelCallData, root kin.AgentID) {
	model := c.Model
	rootLabel := "other"
	m.modelMu.Lock()
	if !m.models[model] {
		if len(m.models) < maxModels && c.Status/100 == 2 {
			m.models[model] = true
		} else {
			model = "other"
		}
	}
	if m.roots[root] || len(m.roots) < maxRoots && root != 0 {
		m.roots[root] = true
		rootLabel = root.String()
	}
	m.modelMu.Unlock()
	for kind, n := range map[string]int64{"input": c.InputTokens, "cached": c.CachedTokens, "output": c.OutputTokens} {
		if n > 0 {
			m.rootTokens.WithLabelValues(rootLabel, kind).Add(float64(n))
		}
	}
	if c.Cost > 0 {
		m.rootCost.WithLabelValues(rootLabel).Add(c.Cost)
	}
	m.modelCalls.WithLabelValues(c.API, model, strconv.Itoa(c.Status)).Inc()
	if c.InputTokens > 0 {
		m.modelTokens.WithLabelValues(model, "input").Add(float64(c.InputTokens))
	}
	if c.CachedTokens > 0 {
		m.modelTokens.WithLabelValues(model, "cached").Add(float64(c.CachedTokens))
	}
	if c.OutputTokens > 0 {
		m.modelTokens.WithLabelValues(model, "output").Add(float64(c.OutputTokens))
	}
	if c.Cost > 0 {
		m.modelCost.WithLabelValues(model).Add(c.Cost)
	}
	m.modelDur.WithLabelValues(c.API).Observe(c.LatencyMS / 1000)
}

// routeLabel is the route label of a request the mux matched with pattern:
// the pattern of an API route, else "unmatched" (the API's catch-all "/",
// or "" or "/v1/" when refused before the API's own mux matched).
func routeLabel(pattern string) string {
	for _, rt := range httpapi.Routes() {
		if len(pattern) == len(rt.Method)+1+len(rt.Pattern) && pattern == rt.Method+" "+rt.Pattern {
			return pattern
		}
	}
	return "unmatched"
}

// stateCollector reads what the store knows at scrape time.
type stateCollector struct {
	src   Source
	clock func() time.Time
	log   *slog.Logger
}

var (
	descAgents = prometheus.NewDesc("kin_agents",
		"Agents in the registry by state and role (role \"none\" when it has none), of any status; terminal states (terminated, cancelled, exited, failed) keep counting every agent that ever ended so.",
		[]string{"state", "role"}, nil)
	descRunning = prometheus.NewDesc("kin_agent_processes",
		"Agent processes the daemon supervises now.", nil, nil)
	descLogSize = prometheus.NewDesc("kin_event_log_size",
		"Events in the verifiable event log (the Merkle tree's size).", nil, nil)
	descOldestHeartbeat = prometheus.NewDesc("kin_heartbeat_oldest_age_seconds",
		"Seconds since the least recent heartbeat among active agents in state active or stale (0 when there is none): how close the laggiest agent is to going stale or offline.",
		nil, nil)
	descHostAgents = prometheus.NewDesc("kin_host_agents",
		"Live agents (not terminated) of each host of the fleet, by the host that runs or registered them: every host's scrape shows the whole fleet's.",
		[]string{"host"}, nil)
	descHostUp = prometheus.NewDesc("kin_host_up",
		"1 while the host's lease in the store is live (its daemon renews it), 0 once it expired or was released at a clean stop.",
		[]string{"host"}, nil)
	descScrapeError = prometheus.NewDesc("kin_metrics_store_errors",
		"1 when this scrape could not read some of the store's metrics (the daemon's log says why), else 0.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAgents
	ch <- descRunning
	ch <- descLogSize
	ch <- descOldestHeartbeat
	ch <- descHostAgents
	ch <- descHostUp
	ch <- descScrapeError
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Store()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failed := 0.0
	fail := func(what string, err error) {
		c.log.Warn("metrics: read the store", "metric", what, "err", err)
		failed = 1
	}
	counts := map[[2]string]int{}
	var oldest time.Time
	var seen bool
	err := st.AgentCountByStateRole(ctx, func(state, role string, n int) {
		if role == "" {
			role = "none"
		}
		counts[[2]string{state, role}] += n
	})
	if err != nil {
		fail("kin_agents", err)
	}
	if oldest, seen, err = st.OldestHeartbeat(ctx); err != nil {
		fail("kin_heartbeat_oldest_age_seconds", err)
	}
	for k, n := range capRoles(counts, c.src.Profile()) {
		ch <- prometheus.MustNewConstMetric(descAgents, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	age := 0.0
	if seen {
		age = max(c.clock().Sub(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(descOldestHeartbeat, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(c.src.Running()))
	if hosts, err := st.HostList(ctx); err != nil {
		fail("kin_host_agents", err)
	} else {
		now := c.clock()
		for _, h := range hosts {
			up := 0.0
			if h.Live(now) {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descHostAgents, prometheus.GaugeValue, float64(h.Agents), h.Name)
			ch <- prometheus.MustNewConstMetric(descHostUp, prometheus.GaugeValue, up, h.Name)
		}
	}
	if size, err := st.LogSize(ctx); err != nil {
		fail("kin_event_log_size", err)
	} else {
		ch <- prometheus.MustNewConstMetric(descLogSize, prometheus.GaugeValue, float64(size))
	}
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, failed)
}

// maxRoleLabels bounds the role label's values: roles are free-form (any
// agent may name one for its children), so past the profile's roles and
// the first maxRoleLabels others (by name), agents count as role "other".
const maxRoleLabels = 50

// capRoles folds roles beyond the profile's and the first maxRoleLabels
// others into "other".
func capRoles(counts map[[2]string]int, prof kin.Profile) map[[2]string]int {
	var free []string
	seen := map[string]bool{}
	for k := range counts {
		role := k[1]
		if _, ok := prof.Roles[role]; ok || role == "none" || seen[role] {
			continue
		}
		seen[role] = true
		free = append(free, role)
	}
	if len(free) <= maxRoleLabels {
		return counts
	}
	slices.Sort(free)
	fold := map[string]bool{}
	for _, r := range free[maxRoleLabels:] {
		fold[r] = true
	}
	out := make(map[[2]string]int, len(counts))
	for k, n := range counts {
		if fold[k[1]] {
			k[1] = "other"
		}
		out[k] += n
	}
	return out
}

// promLogger sends promhttp's errors to the daemon's log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics", "err", fmt.Sprint(v...))
}

var (
	containmentDesc = prometheus.NewDesc("kin_containment_info",
		"1, labelled with how agents are contained: mode (cgroup2, pid-namespaces, process-groups) and the kernel's Landlock ABI (0: none).",
		[]string{"mode", "landlock_abi"}, nil)
	missingDesc = prometheus.NewDesc("kin_guarantees_missing",
		"How many of kin's containment guarantees this kernel and mode cannot give (kin status lists them).", nil, nil)
)

// containmentCollector reports the containment in force (issue 18: the
// start-up line, kin status and /metrics say which).
type containmentCollector struct{ src Source }

func (c containmentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- containmentDesc
	ch <- missingDesc
}

func (c containmentCollector) Collect(ch chan<- prometheus.Metric) {
	mode := c.src.Containment()
	if mode == "" {
		return
	}
	ch <- prometheus.MustNewConstMetric(containmentDesc, prometheus.GaugeValue, 1, mode, strconv.Itoa(sandbox.ABI()))
	ch <- prometheus.MustNewConstMetric(missingDesc, prometheus.GaugeValue, float64(len(c.src.MissingGuarantees())))
}
