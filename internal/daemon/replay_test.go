package daemon_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/kin"
)

// capturedRequest is a signed request as it went over the wire: what
// someone who saw it can send again, byte for byte.
type capturedRequest struct {
	url    string
	host   string // the Host header when it is not url's (a request sent elsewhere than it was signed for)
	header http.Header
	body   []byte
}

// signPost signs a POST of body to url as kin's own signer does (a fresh
// nonce each time) at created, and keeps it to be sent, and sent again.
func signPost(t testing.TB, url string, body []byte, key ed25519.PrivateKey, token string, created time.Time) capturedRequest {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if err := httpsig.Sign(req, key, httpsig.Params{Created: created, JWT: token}); err != nil {
		t.Fatal(err)
	}
	return capturedRequest{url: url, header: req.Header.Clone(), body: body}
}

// send posts the captured request on a new connection and returns the
// status and the Signature-Error header.
func (c capturedRequest) send() (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return 0, "", err
	}
	req.Header = c.header.Clone()
	if c.host != "" {
		req.Host = c.host
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get(httpsig.HeaderSignatureError), nil
}

// TestReplayedSignedRequestsAreRefused is issue 21's attack on a real
// daemon over real sockets: a signed request to /mcp (spawn_agent) and one
// to /auth-token, captured and sent again 55 s later (inside the 60 s
// window, on the daemon's injected clock), are refused with
// replayed_request and change nothing, while the same body signed afresh
// is accepted. Eight copies of one signed request sent at once: exactly
// one is accepted.
func TestReplayedSignedRequestsAreRefused(t *testing.T) {
	// The agents' tokens are checked against the wall clock as well
	// (spawnWithToken), so the daemon's clock starts there.
	clock := kintest.NewClockAt(time.Now())
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithClock(clock.Now))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ps := "http://" + d.HTTPAddr()
	apKeys := kinJWKS(t, ps, personserver.PathAgentJWKS)
	replayed := string(httpsig.CodeReplayedRequest)

	t.Run("mcp spawn_agent", func(t *testing.T) {
		lead := spawnWithToken(t, d, "lead", 0, apKeys)
		url := ps + daemon.PathMCP
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"spawn_agent","arguments":{"command":["/bin/sh","-c","exec sleep 600"],"grace":"0s"}}}`)
		children := func() int {
			t.Helper()
			as, err := d.Client.Agents(ctx, kin.AgentFilter{Parent: lead.ID})
			if err != nil {
				t.Fatal(err)
			}
			return len(as)
		}

		captured := signPost(t, url, body, lead.signer.Key, lead.token, clock.Now())
		if status, sigErr, err := captured.send(); err != nil || status != http.StatusOK {
			t.Fatalf("the signed spawn_agent: %d %q %v; want 200", status, sigErr, err)
		}
		if n := children(); n != 1 {
			t.Fatalf("lead has %d children after its spawn_agent; want 1", n)
		}

		clock.Advance(55 * time.Second)
		if status, sigErr, err := captured.send(); err != nil || status != http.StatusUnauthorized || !strings.Contains(sigErr, replayed) {
			t.Errorf("the same signed request 55 s later: %d, Signature-Error %q, %v; want 401 %s", status, sigErr, err, replayed)
		}
		if n := children(); n != 1 {
			t.Errorf("lead has %d children after the replay; want still 1", n)
		}

		fresh := signPost(t, url, body, lead.signer.Key, lead.token, clock.Now())
		if status, sigErr, err := fresh.send(); err != nil || status != http.StatusOK {
			t.Fatalf("the same body signed afresh: %d %q %v; want 200", status, sigErr, err)
		}
		if n := children(); n != 2 {
			t.Fatalf("lead has %d children after a fresh spawn_agent; want 2", n)
		}

		racing := signPost(t, url, body, lead.signer.Key, lead.token, clock.Now())
		statuses, sigErrs := make([]int, 8), make([]string, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i], sigErrs[i], errs[i] = racing.send()
			}()
		}
		wg.Wait()
		accepted := 0
		for i := range statuses {
			switch {
			case errs[i] != nil:
				t.Fatal(errs[i])
			case statuses[i] == http.StatusOK:
				accepted++
			case statuses[i] != http.StatusUnauthorized || !strings.Contains(sigErrs[i], replayed):
				t.Errorf("a racing copy: %d, Signature-Error %q; want 200 or 401 %s", statuses[i], sigErrs[i], replayed)
			}
		}
		if accepted != 1 {
			t.Errorf("%d of 8 racing copies of one signed request were accepted; want exactly 1", accepted)
		}
		if n := children(); n != 3 {
			t.Errorf("lead has %d children after the race; want 3", n)
		}
	})

	t.Run("auth-token", func(t *testing.T) {
		res := newTestResource(t, ps)
		top := spawnWithToken(t, d, "planner", 0, apKeys)
		sub := spawnWithToken(t, d, "search1", top.ID, apKeys)
		if _, err := d.Client.Grant(ctx, kin.GrantRequest{Agent: top.ID, Resource: res.url, Scope: "data.read"}); err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token})
		if err != nil {
			t.Fatal(err)
		}
		issued := func() int {
			t.Helper()
			toks, err := d.Client.AuthTokens(ctx, kin.AuthTokenFilter{Agent: sub.ID})
			if err != nil {
				t.Fatal(err)
			}
			return len(toks)
		}
		refusals := func() int {
			t.Helper()
			es, err := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventTokenRefused}})
			if err != nil {
				t.Fatal(err)
			}
			return len(es)
		}
		url := ps + personserver.PathAuthToken

		captured := signPost(t, url, body, top.signer.Key, top.token, clock.Now())
		if status, sigErr, err := captured.send(); err != nil || status != http.StatusOK {
			t.Fatalf("the signed auth-token request: %d %q %v; want 200", status, sigErr, err)
		}
		before := refusals()
		clock.Advance(55 * time.Second)
		if status, sigErr, err := captured.send(); err != nil || status != http.StatusUnauthorized || !strings.Contains(sigErr, replayed) {
			t.Errorf("the same signed request 55 s later: %d, Signature-Error %q, %v; want 401 %s", status, sigErr, err, replayed)
		}
		if n := issued(); n != 1 {
			t.Errorf("%d auth tokens issued after the replay; want 1", n)
		}
		// Whoever replays a request need not be its signer: kin logs the
		// refusal and writes nothing.
		if n := refusals(); n != before {
			t.Errorf("%d aauth.token.refused events after the replay; want %d (a replay names nobody)", n, before)
		}
		fresh := signPost(t, url, body, top.signer.Key, top.token, clock.Now())
		if status, sigErr, err := fresh.send(); err != nil || status != http.StatusOK {
			t.Fatalf("the same body signed afresh: %d %q %v; want 200", status, sigErr, err)
		}
		if n := issued(); n != 2 {
			t.Errorf("%d auth tokens issued after a fresh request; want 2", n)
		}
	})
}

// TestRestartedDaemonRefusesSignaturesFromBeforeItsStart: the replay
// cache is in memory, so a restarted daemon does not know what the
// previous one accepted; it refuses a signature created before its start
// instead. The same request, signed afresh, is accepted.
func TestRestartedDaemonRefusesSignaturesFromBeforeItsStart(t *testing.T) {
	// One address for both daemons: it is their issuer, in the agent's token.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	home := kintest.TempHome(t)
	clock := kintest.NewClockAt(time.Now())
	opts := []kintest.Option{kintest.WithHome(home), kintest.WithClock(clock.Now), func(c *daemon.Config) { c.HTTPAddr = addr }}
	d1 := kintest.StartDaemon(t, append(opts, kintest.WithLeaveRunning())...)
	ps := "http://" + addr
	lead := spawnWithToken(t, d1, "lead", 0, kinJWKS(t, ps, personserver.PathAgentJWKS))
	url := ps + daemon.PathMCP
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_children","arguments":{}}}`)

	captured := signPost(t, url, body, lead.signer.Key, lead.token, clock.Now())
	if status, sigErr, err := captured.send(); err != nil || status != http.StatusOK {
		t.Fatalf("the signed request: %d %q %v; want 200", status, sigErr, err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	d2 := kintest.StartDaemon(t, opts...)
	if a, err := d2.Client.Agent(context.Background(), lead.ID); err != nil || !a.Running() {
		t.Fatalf("lead after the restart: %+v, %v; want it re-adopted", a, err)
	}
	replayed := string(httpsig.CodeReplayedRequest)
	if status, sigErr, err := captured.send(); err != nil || status != http.StatusUnauthorized || !strings.Contains(sigErr, replayed) {
		t.Errorf("the request signed before the restart, sent again: %d, Signature-Error %q, %v; want 401 %s", status, sigErr, err, replayed)
	}
	fresh := signPost(t, url, body, lead.signer.Key, lead.token, clock.Now())
	if status, sigErr, err := fresh.send(); err != nil || status != http.StatusOK {
		t.Errorf("the same request signed after the restart: %d %q %v; want 200", status, sigErr, err)
	}
}

// TestFullReplayCacheRefusesNewSignaturesWith503: with room for one
// signature, a second fresh one is refused on /mcp and on /auth-token with
// 503 and Retry-After (when the first leaves the window), not by
// forgetting the first, whose replay is still refused; once the clock has
// passed the window there is room again. A negative capacity is refused.
func TestFullReplayCacheRefusesNewSignaturesWith503(t *testing.T) {
	if err := (&daemon.Config{Home: "/h", ReplayCapacity: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "replay capacity") {
		t.Errorf("a negative replay capacity: %v; want refused, naming it", err)
	}
	clock := kintest.NewClockAt(time.Now())
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithClock(clock.Now), func(c *daemon.Config) { c.ReplayCapacity = 1 })
	ps := "http://" + d.HTTPAddr()
	lead := spawnWithToken(t, d, "lead", 0, kinJWKS(t, ps, personserver.PathAgentJWKS))
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_children","arguments":{}}}`)
	mcpURL := ps + daemon.PathMCP

	first := signPost(t, mcpURL, body, lead.signer.Key, lead.token, clock.Now())
	if status, sigErr, err := first.send(); err != nil || status != http.StatusOK {
		t.Fatalf("the first signed request: %d %q %v; want 200", status, sigErr, err)
	}
	clock.Advance(10 * time.Second)
	for _, url := range []string{mcpURL, ps + personserver.PathAuthToken} {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if err := httpsig.Sign(req, lead.signer.Key, httpsig.Params{Created: clock.Now(), JWT: lead.token}); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p aauth.Problem
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		// The first was created 10 s ago: it leaves the window in 51 s.
		if resp.StatusCode != http.StatusServiceUnavailable || p.Code != aauth.CodeUnavailable || resp.Header.Get("Retry-After") != "51" {
			t.Errorf("%s, a second signature with room for one: %s %+v, Retry-After %q; want 503 %s, Retry-After 51",
				url, resp.Status, p, resp.Header.Get("Retry-After"), aauth.CodeUnavailable)
		}
	}
	if status, sigErr, err := first.send(); err != nil || status != http.StatusUnauthorized || !strings.Contains(sigErr, string(httpsig.CodeReplayedRequest)) {
		t.Errorf("the first request again, while full: %d %q %v; want 401 %s", status, sigErr, err, httpsig.CodeReplayedRequest)
	}
	clock.Advance(51 * time.Second)
	if status, sigErr, err := signPost(t, mcpURL, body, lead.signer.Key, lead.token, clock.Now()).send(); err != nil || status != http.StatusOK {
		t.Errorf("a signed request once the first left the window: %d %q %v; want 200", status, sigErr, err)
	}
}

// lineLog keeps the daemon's JSON log lines.
type lineLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines are the logged lines whose msg is one of msgs.
func (l *lineLog) lines(t testing.TB, msgs ...string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line: %v: %q", err, line)
		}
		for _, msg := range msgs {
			if m["msg"] == msg {
				out = append(out, m)
			}
		}
	}
	return out
}

// TestAuthTokenAndMCPRefusalLogIsBounded: requests whose signature names
// nobody, sent to /auth-token and /mcp faster than a second apart, are
// logged ten at once at most, then one a second, and the line after some
// were left out says how many; each line's detail is bounded.
func TestAuthTokenAndMCPRefusalLogIsBounded(t *testing.T) {
	var logged lineLog
	clock := kintest.NewClockAt(time.Now())
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithClock(clock.Now), func(c *daemon.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	send := func(path string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+d.HTTPAddr()+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Signature-Input", `sig=("@method");created=1`)
		req.Header.Set("Signature", "sig=:"+base64.StdEncoding.EncodeToString(make([]byte, 64))+":")
		req.Header.Set("Signature-Key", "sig="+strings.Repeat("a", 4096))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: %s; want 401", path, resp.Status)
		}
	}
	msgs := []string{"auth-token refused", "mcp request refused"}
	for i := range 30 {
		send([]string{personserver.PathAuthToken, daemon.PathMCP}[i%2])
	}
	lines := logged.lines(t, msgs...)
	if len(lines) != 10 {
		t.Fatalf("30 refusals at once logged %d lines; want 10", len(lines))
	}
	for _, l := range lines {
		if detail, _ := l["detail"].(string); len(detail) > httpsig.MaxDetail+32 || !strings.HasSuffix(detail, "(4103 bytes)") {
			t.Errorf("a refusal's detail of %d bytes: …%q; want it bounded, saying the length", len(detail), detail[max(0, len(detail)-30):])
		}
	}
	clock.Advance(time.Second)
	send(daemon.PathMCP)
	lines = logged.lines(t, msgs...)
	if len(lines) != 11 || lines[10]["left_out"] != float64(20) {
		t.Fatalf("a refusal a second later: %d lines, the last %v; want 11, the last saying left_out 20", len(lines), lines[len(lines)-1])
	}
}
