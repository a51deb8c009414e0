package aauth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

type answer struct {
	status  int
	header  http.Header
	problem Problem
	body    []byte
}

func readAnswer(t *testing.T, resp *http.Response, err error) answer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	if resp.StatusCode != http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("error answer Content-Type %q, want application/problem+json", ct)
		}
		if err := json.Unmarshal(b, &a.problem); err != nil {
			t.Fatalf("problem body %q: %v", b, err)
		}
	}
	return a
}

// answerOf sends req through a (an *Agent, signing with token, or a plain
// *http.Client) and reads the answer.
func answerOf(t *testing.T, a any, req *http.Request, token ...string) answer {
	t.Helper()
	var resp *http.Response
	var err error
	switch a := a.(type) {
	case *Agent:
		resp, err = a.Do(req, token[0])
	case *testAgent:
		resp, err = a.Do(req, token[0])
	case *http.Client:
		resp, err = a.Do(req)
	default:
		t.Fatalf("answerOf: %T", a)
	}
	return readAnswer(t, resp, err)
}

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// wantSignatureError checks a 401 whose Signature-Error and problem name code.
func wantSignatureError(t *testing.T, a answer, code httpsig.Code) {
	t.Helper()
	if a.status != http.StatusUnauthorized {
		t.Fatalf("status %d (%s), want 401 %s", a.status, a.body, code)
	}
	se := parseSignatureError(a.header.Values(httpsig.HeaderSignatureError))
	if se == nil || se.Code != code {
		t.Fatalf("Signature-Error %q, want error=%s (body %s)", a.header.Get(httpsig.HeaderSignatureError), code, a.body)
	}
	if a.problem.Code != string(code) {
		t.Fatalf("problem error %q, want %q", a.problem.Code, code)
	}
}

func TestMiddleware_FakePersonServer_HappyPath(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	ag := newTestAgent(t, ps, clock.Now)

	// 1. The agent calls with its agent token and is told to get an auth token.
	a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), "")
	if a.status != http.StatusUnauthorized || a.problem.Code != CodeAuthTokenRequired {
		t.Fatalf("first call: %d %s", a.status, a.body)
	}
	if a.header.Get(httpsig.HeaderSignatureError) != "" {
		t.Fatal("a challenge carries Signature-Error")
	}
	rt, ok := ResourceToken(a.header)
	if !ok {
		t.Fatalf("no resource token in %q", a.header.Get(HeaderRequirement))
	}

	// 2. The resource token verifies with the resource's published keys and
	// is bound to the agent's key.
	d := &Discovery{Now: clock.Now}
	rc, err := identity.VerifyResourceToken(rt, clock.Now(), d.Keys(context.Background(), rs.URL, DWKResource))
	if err != nil {
		t.Fatal(err)
	}
	jti, err := base64.RawURLEncoding.DecodeString(rc.JTI)
	switch {
	case err != nil || len(jti) != 16:
		t.Errorf("jti %q is not 16 random bytes", rc.JTI)
	case rc.Iss != rs.URL || rc.Aud != ps.URL || rc.PS != ps.URL:
		t.Errorf("iss/aud/ps = %q %q %q", rc.Iss, rc.Aud, rc.PS)
	case rc.AgentJKT != identity.Thumbprint(identity.PublicJWK(ag.pub, "")):
		t.Errorf("agent_jkt %q is not the agent's key", rc.AgentJKT)
	case rc.PresentedJTI != ag.claims.JTI:
		t.Errorf("presented_jti %q, want the agent token's %q", rc.PresentedJTI, ag.claims.JTI)
	case rc.Scope != "data.read" || rc.Sub != "":
		t.Errorf("scope %q sub %q", rc.Scope, rc.Sub)
	case rc.Exp-rc.IAT != 300 || rc.IAT != clock.Now().Unix():
		t.Errorf("iat %d exp %d", rc.IAT, rc.Exp)
	}

	// 3. The person server (the test, standing in for kin) issues an auth
	// token; the agent calls again with it.
	at, ac := ps.authToken(t, ag.pub, rc.Iss, rc.Scope, nil)
	clock.Advance(2 * time.Second)
	a = answerOf(t, ag, get(t, rs.URL+"/api/documents"), at)
	if a.status != http.StatusOK {
		t.Fatalf("call with auth token: %d %s", a.status, a.body)
	}
	var got map[string]string
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["sub"] != ac.Sub || got["jti"] != ac.JTI || got["scope"] != "data.read" {
		t.Fatalf("claims in context: %v", got)
	}
	if ps.statusQueries.Load() != 1 {
		t.Fatalf("token status asked %d times, want 1", ps.statusQueries.Load())
	}

	// A body is covered too and reaches the handler intact.
	req, _ := http.NewRequest(http.MethodPost, rs.URL+"/api/documents", strings.NewReader(`{"q":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	a = answerOf(t, ag, req, at)
	if a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`{\"q\":\"x\"}`)) {
		t.Fatalf("POST with auth token: %d %s", a.status, a.body)
	}
}

func TestMiddleware_FakePersonServer_Unsigned(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	a := answerOf(t, &http.Client{}, get(t, rs.URL+"/api/documents"))
	if a.status != http.StatusUnauthorized || a.problem.Code != CodeAgentTokenRequired {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if got := a.header.Get(HeaderRequirement); got != "requirement=agent-token" {
		t.Fatalf("AAuth-Requirement %q", got)
	}
	if a.header.Get(httpsig.HeaderSignatureError) != "" {
		t.Fatal("unsigned answer carries Signature-Error")
	}
}

func TestMiddleware_FakePersonServer_AuthTokenRefused(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	ag := newTestAgent(t, ps, clock.Now)
	other := newTestKey(t, "other")
	otherPub := other.Private.Public().(ed25519.PublicKey)

	tests := []struct {
		name   string
		token  func() string
		signer ed25519.PrivateKey // nil: the agent's key
		code   httpsig.Code
	}{
		{"person token", func() string { return ps.personToken(t, ag.pub, rs.URL) }, nil, httpsig.CodeInvalidJWT},
		{"wrong aud", func() string {
			tok, _ := ps.authToken(t, ag.pub, "https://elsewhere.example", "data.read", nil)
			return tok
		}, nil, httpsig.CodeInvalidJWT},
		{"cnf is another key than the signer's", func() string {
			tok, _ := ps.authToken(t, otherPub, rs.URL, "data.read", nil)
			return tok
		}, nil, httpsig.CodeInvalidSignature},
		{"presented by a different key", func() string {
			tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
			return tok
		}, other.Private, httpsig.CodeInvalidSignature},
		{"expired", func() string {
			tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", func(c *AuthClaims) { c.IAT -= 700; c.Exp -= 700 })
			return tok
		}, nil, httpsig.CodeExpiredJWT},
		{"issued by another server", func() string {
			k := newTestKey(t, "ps-key-1")
			return signJWS(t, k, identity.TypAuth, map[string]any{"iss": "https://evil.example"})
		}, nil, httpsig.CodeInvalidJWT},
		{"agent token from an untrusted provider", func() string {
			return signJWS(t, newTestKey(t, "x"), identity.TypAgent, map[string]any{"iss": "https://evil.example"})
		}, nil, httpsig.CodeInvalidJWT},
		{"resource token", func() string {
			return signJWS(t, ps.key, identity.TypResource, map[string]any{"iss": ps.URL})
		}, nil, httpsig.CodeInvalidJWT},
		{"unknown kid", func() string {
			tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
			return resign(t, tok, newTestKey(t, "ps-key-unpublished"))
		}, nil, httpsig.CodeUnknownKey},
		{"signed by another key under the published kid", func() string {
			tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
			return resign(t, tok, newTestKey(t, "ps-key-1"))
		}, nil, httpsig.CodeInvalidJWT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := ag.Key
			if tt.signer != nil {
				signer = tt.signer
			}
			a := &Agent{Key: signer, Now: clock.Now, Client: ag.Client}
			wantSignatureError(t, answerOf(t, a, get(t, rs.URL+"/api/documents"), tt.token()), tt.code)
		})
	}
}

// resign re-signs tok's header and payload with key, under key's kid.
func resign(t *testing.T, tok string, key identity.Key) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	var h map[string]string
	if err := json.Unmarshal(hb, &h); err != nil {
		t.Fatal(err)
	}
	h["kid"] = key.KID
	hb, _ = json.Marshal(h)
	in := base64.RawURLEncoding.EncodeToString(hb) + "." + parts[1]
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key.Private, []byte(in)))
}

func TestMiddleware_FakePersonServer_ScopeMissing(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, func(c *ResourceConfig) {
		c.Scope = func(*http.Request) string { return "data.read data.write" }
	})
	ag := newTestAgent(t, ps, clock.Now)
	tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
	a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok)
	if a.status != http.StatusForbidden || a.problem.Code != CodeInsufficientScope {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a.header.Get(httpsig.HeaderSignatureError) != "" {
		t.Fatal("a 403 carries Signature-Error")
	}
	tok, _ = ps.authToken(t, ag.pub, rs.URL, "data.write profile data.read", nil)
	if a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok); a.status != http.StatusOK {
		t.Fatalf("every scope present: %d %s", a.status, a.body)
	}
}

func TestMiddleware_FakePersonServer_Revoked(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	ag := newTestAgent(t, ps, clock.Now)
	tok, c := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
	if a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok); a.status != http.StatusOK {
		t.Fatalf("before revocation: %d %s", a.status, a.body)
	}
	ps.revoke(c.JTI, "parent stopped")
	wantSignatureError(t, answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok), httpsig.CodeRevokedJWT)
	if n := ps.statusQueries.Load(); n != 2 {
		t.Fatalf("token status asked %d times, want 2 (no caching)", n)
	}
}

func TestMiddleware_FakePersonServer_IssuerMismatch(t *testing.T) {
	for _, tt := range []struct {
		metaIssuer string
		code       httpsig.Code
	}{
		{"https://other.example", httpsig.CodeIssuerMismatch},
		{"", httpsig.CodeIssuerMissing},
	} {
		t.Run(string(tt.code), func(t *testing.T) {
			clock := newTestClock()
			ps := newFakePersonServer(t, clock)
			rs := newTestResource(t, ps, nil)
			ag := newTestAgent(t, ps, clock.Now)
			ps.setMetaIssuer(tt.metaIssuer)
			wantSignatureError(t, answerOf(t, ag, get(t, rs.URL+"/api/documents"), ""), tt.code)
		})
	}
	t.Run("trailing slash", func(t *testing.T) {
		clock := newTestClock()
		ps := newFakePersonServer(t, clock)
		rs := newTestResource(t, ps, nil)
		ag := newTestAgent(t, ps, clock.Now)
		ps.setMetaIssuer(ps.URL + "/")
		wantSignatureError(t, answerOf(t, ag, get(t, rs.URL+"/api/documents"), ""), httpsig.CodeIssuerMismatch)
	})
}

func TestMiddleware_FakePersonServer_Tampered(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	ag := newTestAgent(t, ps, clock.Now)
	tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
	otherTok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)

	send := func(t *testing.T, method, path, body string, tamper func(*http.Request)) answer {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, rs.URL+path, rd)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if err := httpsig.Sign(req, ag.Key, httpsig.Params{Created: clock.Now(), JWT: tok}); err != nil {
			t.Fatal(err)
		}
		tamper(req)
		return answerOf(t, ag.Client, req)
	}
	t.Run("untampered", func(t *testing.T) {
		if a := send(t, "POST", "/api/documents", `{"a":1}`, func(*http.Request) {}); a.status != http.StatusOK {
			t.Fatalf("%d %s", a.status, a.body)
		}
	})
	t.Run("path", func(t *testing.T) {
		a := send(t, "GET", "/api/documents", "", func(r *http.Request) { r.URL.Path = "/api/secrets" })
		wantSignatureError(t, a, httpsig.CodeInvalidSignature)
	})
	t.Run("method", func(t *testing.T) {
		a := send(t, "GET", "/api/documents", "", func(r *http.Request) { r.Method = "DELETE" })
		wantSignatureError(t, a, httpsig.CodeInvalidSignature)
	})
	t.Run("body", func(t *testing.T) {
		a := send(t, "POST", "/api/documents", `{"a":1}`, func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"a":2}`))
			r.GetBody = nil
		})
		wantSignatureError(t, a, httpsig.CodeInvalidSignature)
	})
	t.Run("body and digest", func(t *testing.T) {
		a := send(t, "POST", "/api/documents", `{"a":1}`, func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"a":2}`))
			r.GetBody = nil
			r.Header.Set(httpsig.HeaderContentDigest, httpsig.ContentDigest([]byte(`{"a":2}`)))
		})
		wantSignatureError(t, a, httpsig.CodeInvalidSignature)
	})
	t.Run("Signature-Key", func(t *testing.T) {
		a := send(t, "GET", "/api/documents", "", func(r *http.Request) {
			r.Header.Set(httpsig.HeaderSignatureKey, `sig=jwt;jwt="`+otherTok+`"`)
		})
		wantSignatureError(t, a, httpsig.CodeInvalidSignature)
	})
}

func TestMiddleware_FakePersonServer_CreatedWindow(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, nil)
	// The resource has been up a window: a signature 60 s old is not from
	// before its start (those it refuses as possible replays).
	clock.Advance(httpsig.Window)
	ag := newTestAgent(t, ps, clock.Now)
	tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)
	for _, tt := range []struct {
		offset time.Duration
		code   httpsig.Code
	}{
		{-61 * time.Second, httpsig.CodeInvalidSignature},
		{61 * time.Second, httpsig.CodeClockSkew},
	} {
		a := &Agent{Key: ag.Key, Client: ag.Client, Now: func() time.Time { return clock.Now().Add(tt.offset) }}
		wantSignatureError(t, answerOf(t, a, get(t, rs.URL+"/api/documents"), tok), tt.code)
	}
	for _, off := range []time.Duration{-60 * time.Second, 60 * time.Second} {
		a := &Agent{Key: ag.Key, Client: ag.Client, Now: func() time.Time { return clock.Now().Add(off) }}
		if got := answerOf(t, a, get(t, rs.URL+"/api/documents"), tok); got.status != http.StatusOK {
			t.Fatalf("created %v away: %d %s", off, got.status, got.body)
		}
	}
}

// TestMiddleware_FakePersonServer_Replay: a signed call accepted once is
// refused when sent again 55 s later (replayed_request), the same call
// signed afresh is accepted, and with no room left to remember another
// signature a new one is answered 503 with Retry-After until the oldest
// leaves the window.
func TestMiddleware_FakePersonServer_Replay(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, func(c *ResourceConfig) { c.ReplayCapacity = 2 })
	ag := newTestAgent(t, ps, clock.Now)
	tok, _ := ps.authToken(t, ag.pub, rs.URL, "data.read", nil)

	captured := get(t, rs.URL+"/api/documents")
	if err := httpsig.Sign(captured, ag.Key, httpsig.Params{Created: clock.Now(), JWT: tok}); err != nil {
		t.Fatal(err)
	}
	if a := answerOf(t, ag.Client, captured.Clone(t.Context())); a.status != http.StatusOK {
		t.Fatalf("the signed call: %d %s", a.status, a.body)
	}
	clock.Advance(55 * time.Second)
	wantSignatureError(t, answerOf(t, ag.Client, captured.Clone(t.Context())), httpsig.CodeReplayedRequest)
	if a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok); a.status != http.StatusOK {
		t.Fatalf("the same call signed afresh: %d %s", a.status, a.body)
	}

	a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok)
	if a.status != http.StatusServiceUnavailable || a.problem.Code != CodeUnavailable || a.header.Get("Retry-After") != "6" ||
		a.header.Get(httpsig.HeaderSignatureError) != "" {
		t.Fatalf("a third signature with room for two: %d, Retry-After %q, %s; want 503 %s, Retry-After 6 (the first leaves the window at +61 s)",
			a.status, a.header.Get("Retry-After"), a.body, CodeUnavailable)
	}
	clock.Advance(6 * time.Second)
	if a := answerOf(t, ag, get(t, rs.URL+"/api/documents"), tok); a.status != http.StatusOK {
		t.Fatalf("once the first signature left the window: %d %s", a.status, a.body)
	}
}

func TestMiddleware_FakePersonServer_Unavailable(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	rs := newTestResource(t, ps, func(c *ResourceConfig) {
		// Trusts a provider that does not answer: a closed loopback port.
		c.AgentProviders = []string{"http://127.0.0.1:1"}
	})
	k := newTestKey(t, "")
	tok := signJWS(t, newTestKey(t, "k"), identity.TypAgent, map[string]any{"iss": "http://127.0.0.1:1"})
	a := &Agent{Key: k.Private, Now: clock.Now}
	got := answerOf(t, a, get(t, rs.URL+"/api/documents"), tok)
	if got.status != http.StatusServiceUnavailable || got.problem.Code != CodeUnavailable || got.header.Get(httpsig.HeaderSignatureError) != "" {
		t.Fatalf("%d %v %s", got.status, got.header, got.body)
	}
}

func TestNewResource_Validation(t *testing.T) {
	key := newTestKey(t, "k").Private
	good := ResourceConfig{Issuer: "https://rs.example", Key: key, PersonServer: "https://ps.example"}
	for _, tt := range []struct {
		name string
		edit func(*ResourceConfig)
		want string
	}{
		{"issuer missing", func(c *ResourceConfig) { c.Issuer = "" }, "Issuer"},
		{"issuer trailing slash", func(c *ResourceConfig) { c.Issuer = "https://rs.example/" }, "Issuer"},
		{"issuer query", func(c *ResourceConfig) { c.Issuer = "https://rs.example?x" }, "Issuer"},
		{"issuer scheme", func(c *ResourceConfig) { c.Issuer = "ftp://rs.example" }, "Issuer"},
		{"person server missing", func(c *ResourceConfig) { c.PersonServer = "" }, "PersonServer"},
		{"key missing", func(c *ResourceConfig) { c.Key = nil }, "Key"},
		{"lifetime too long", func(c *ResourceConfig) { c.ResourceTokenLifetime = 2 * time.Hour }, "ResourceTokenLifetime"},
		{"bad provider", func(c *ResourceConfig) { c.AgentProviders = []string{"kin"} }, "AgentProviders"},
		{"negative replay capacity", func(c *ResourceConfig) { c.ReplayCapacity = -1 }, "ReplayCapacity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			_, err := NewResource(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %s", err, tt.want)
			}
		})
	}
	r, err := NewResource(good)
	if err != nil {
		t.Fatal(err)
	}
	if r.key.KID != identity.Thumbprint(identity.PublicJWK(key.Public().(ed25519.PublicKey), "")) {
		t.Fatalf("default kid %q is not the thumbprint", r.key.KID)
	}
}
