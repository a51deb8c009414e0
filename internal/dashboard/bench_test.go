package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkDashboardReload measures what the dashboard does on every burst of
// events: GET /v1/agents of a 2,011-agent family over loopback HTTP with the
// session cookie, decoded as the page would (JSON). The floor, in the same
// run, is the daemon's own Agents call in its process (no HTTP, no JSON), so
// the ratio is the price of the wire. And one scrape of /metrics.
func BenchmarkDashboardReload(b *testing.B) {
	d := kintest.StartDaemon(b, kintest.WithHTTP(), kintest.WithProfile(wideProfile(b)))
	total := registerFamily(b, d)
	base := "http://" + d.HTTPAddr()
	cookie := sessionCookie(b, base, d.OperatorToken())
	ctx := context.Background()
	var floor float64
	b.Run("floor-in-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			as, err := d.Agents(ctx, kin.AgentFilter{})
			if err != nil || len(as) != total {
				b.Fatalf("%d agents, %v", len(as), err)
			}
		}
		floor = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	get := func(b *testing.B, path string) []byte {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return body
	}
	b.Run("http-agents", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var as []json.RawMessage
			if err := json.Unmarshal(get(b, "/v1/agents"), &as); err != nil || len(as) != total {
				b.Fatalf("%d agents, %v", len(as), err)
			}
		}
		if floor > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/floor, "x-floor")
		}
	})
	b.Run("http-metrics", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if !strings.Contains(string(get(b, "/metrics")), "kin_agents{") {
				b.Fatal("no kin_agents in /metrics")
			}
		}
		if floor > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/floor, "x-floor")
		}
	})
}

// registerFamily registers 1 + 10 + 100 + 1,900 agents, each generation
// concurrently, and returns how many.
func registerFamily(tb testing.TB, d *kintest.Daemon) int {
	tb.Helper()
	reg := func(name string, parent kin.AgentID) kin.AgentID {
		req := kin.RegisterRequest{Name: name, Parent: parent, Role: "worker"}
		if parent == 0 {
			req.Responsible, req.Role = "Dr. Schmidt, COAI Research", "coordinator"
		}
		a, err := d.Client.Register(context.Background(), req)
		if err != nil {
			tb.Errorf("register %s: %v", name, err)
			return 0
		}
		return a.ID
	}
	each := func(parents []kin.AgentID, n int, name func(p, i int) string) []kin.AgentID {
		out := make([]kin.AgentID, len(parents)*n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for p, parent := range parents {
			for i := range n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					out[p*n+i] = reg(name(p, i), parent)
				}()
			}
		}
		wg.Wait()
		return out
	}
	roots := []kin.AgentID{reg("Coordinator", 0)}
	leads := each(roots, 10, func(_, i int) string { return fmt.Sprintf("lead-%d", i) })
	teams := each(leads, 10, func(p, i int) string { return fmt.Sprintf("team-%d-%d", p, i) })
	workers := each(teams, 19, func(p, i int) string { return fmt.Sprintf("worker-%d-%d-%d", p/10, p%10, i) })
	if tb.Failed() {
		tb.FailNow()
	}
	return len(roots) + len(leads) + len(teams) + len(workers)
}

// sessionCookie logs in as the login form does and returns the cookie.
func sessionCookie(tb testing.TB, base, token string) *http.Cookie {
	tb.Helper()
	resp, _ := postLogin(tb, base, token)
	for _, c := range resp.Cookies() {
		if c.Name == httpapi.SessionCookie {
			return c
		}
	}
	tb.Fatalf("login gave no session cookie (%d)", resp.StatusCode)
	return nil
}
