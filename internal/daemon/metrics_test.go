package daemon_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape GETs /metrics on the daemon's HTTP address with token ("" sends
// none) and returns the status and the samples.
func scrape(t *testing.T, d *kintest.Daemon, token string) (int, []sample) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+d.HTTPAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("content type %q", ct)
	}
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		s := sample{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[j+1:], "}"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				s.labels[k] = strings.Trim(v, `"`)
			}
			s.name = s.name[:j]
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// find returns the value of the sample name with (at least) labels, and
// whether there is one.
func find(ss []sample, name string, labels ...string) (float64, bool) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

func wantSample(t *testing.T, ss []sample, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := find(ss, name, labels...)
	if !ok {
		t.Errorf("no %s%v in /metrics", name, labels)
	} else if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestMetricsAfterCascade spawns a three-generation tree, provokes a
// governor rejection, heartbeats, stops the root (a cascade of three), then
// scrapes /metrics over HTTP with the operator token.
func TestMetricsAfterCascade(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	root := spawnAgent(t, d.Client, "root", 0, "sleep")
	mid := spawnAgent(t, d.Client, "mid", root.ID, "sleep")
	leaf := spawnAgent(t, d.Client, "leaf", mid.ID, "sleep")

	// An external agent of its own tree, heartbeating twice.
	ext := register(t, d.Client, kin.RegisterRequest{Name: "ext", Responsible: "x"})
	for range 2 {
		if _, err := d.Client.Heartbeat(ctx, kin.HeartbeatRequest{ID: ext.ID}); err != nil {
			t.Fatal(err)
		}
	}

	// The governor refuses a fourth generation.
	if _, err := d.Client.SetGovernor(ctx, "max_generation_depth", strconv.Itoa(leaf.Generation)); err != nil {
		t.Fatal(err)
	}
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "too-deep", Parent: leaf.ID})
	wantCode(t, err, kin.ECodeSpawnDepth)

	zero := kin.Duration(0)
	stopped, err := d.Client.Stop(ctx, kin.StopRequest{ID: root.ID, Grace: &zero})
	if err != nil || len(stopped) != 3 {
		t.Fatalf("stop = %v, %v", stopped, err)
	}

	// An API request refused before routing (no token) and one no route
	// matches (with it): both are route "unmatched".
	for _, token := range []string{"", d.OperatorToken()} {
		req, _ := http.NewRequest("GET", "http://"+d.HTTPAddr()+"/v1/no-such-route", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	if code, _ := scrape(t, d, ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	if code, _ := scrape(t, d, strings.Repeat("0", 64)); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d, want 401", code)
	}
	code, ss := scrape(t, d, d.OperatorToken())
	if code != http.StatusOK {
		t.Fatalf("/metrics with the token: %d", code)
	}

	wantSample(t, ss, 1, "kin_cascade_agents_count", "reason", "stopped")
	wantSample(t, ss, 3, "kin_cascade_agents_sum", "reason", "stopped")
	wantSample(t, ss, 1, "kin_cascade_duration_seconds_count", "reason", "stopped")
	if v, _ := find(ss, "kin_cascade_duration_seconds_sum", "reason", "stopped"); v <= 0 {
		t.Errorf("cascade duration sum %v", v)
	}
	wantSample(t, ss, 3, "kin_spawns_total", "kind", "spawn")
	wantSample(t, ss, 1, "kin_spawns_total", "kind", "register")
	wantSample(t, ss, 1, "kin_spawn_rejections_total", "reason", string(kin.ECodeSpawnDepth))
	wantSample(t, ss, 3, "kin_agents", "state", string(kin.StateCancelled), "role", "none")
	wantSample(t, ss, 1, "kin_agents", "state", string(kin.StateActive), "role", "none")
	if _, ok := find(ss, "kin_agents", "state", string(kin.StateRegistered)); ok {
		t.Error("kin_agents counts a registered agent; there is none")
	}
	wantSample(t, ss, 0, "kin_agent_processes")
	wantSample(t, ss, 1, "kin_heartbeat_interval_seconds_count")
	if _, ok := find(ss, "kin_heartbeat_oldest_age_seconds"); !ok {
		t.Error("no kin_heartbeat_oldest_age_seconds")
	}
	if v, _ := find(ss, "kin_event_log_size"); v <= 0 {
		t.Errorf("kin_event_log_size = %v", v)
	}
	wantSample(t, ss, 0, "kin_metrics_store_errors")
	// One host: itself, up, with its one live agent (the fleet's view:
	// internal/fleettest's TestFleetSeenFromAnyHost).
	host, _ := os.Hostname()
	wantSample(t, ss, 1, "kin_host_up", "host", host)
	wantSample(t, ss, 1, "kin_host_agents", "host", host)
	if v, _ := find(ss, "kin_http_request_duration_seconds_count", "route", "POST /v1/spawn", "code", "201"); v < 3 {
		t.Errorf("latency of POST /v1/spawn counted %v times, want 3 or more", v)
	}
	wantSample(t, ss, 1, "kin_http_request_duration_seconds_count", "route", "unmatched", "code", "401")
	wantSample(t, ss, 1, "kin_http_request_duration_seconds_count", "route", "unmatched", "code", "404")
	for _, s := range ss {
		if r := s.labels["route"]; s.name == "kin_http_request_duration_seconds_count" && (r == "" || r == "/" || r == "/v1/") {
			t.Errorf("latency filed under route %q, not unmatched", r)
		}
	}
	refused := 0.0 // the register refused by the governor, with whatever status the API gives it
	for _, s := range ss {
		if s.name == "kin_http_request_duration_seconds_count" && s.labels["route"] == "POST /v1/agents" && s.labels["code"] >= "400" {
			refused += s.value
		}
	}
	if refused != 1 {
		t.Errorf("refused POST /v1/agents counted %v times in the latency histogram, want 1", refused)
	}
	// The Go runtime's and the process's collectors.
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := find(ss, name); !ok {
			t.Errorf("no %s", name)
		}
	}
}
