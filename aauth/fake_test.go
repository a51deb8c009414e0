package aauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/identity"
)

// testClock is a settable clock: tests move time instead of sleeping.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Unix(1_800_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakePersonServer stands in for kin, which is both the agent provider and
// the person server: it serves aauth-agent.json, aauth-person.json, one
// JWKS, the token status endpoint and a configurable token endpoint over real
// loopback HTTP. The real daemon is tested in internal/daemon.
type fakePersonServer struct {
	URL   string
	key   identity.Key
	clock *testClock

	mu           sync.Mutex
	extra        []identity.JWK    // published besides key
	revoked      map[string]string // jti -> reason
	metaIssuer   *string           // overrides the metadata's issuer when set
	tokenHandler http.HandlerFunc

	jwksFetches   atomic.Int64
	statusQueries atomic.Int64
}

func newFakePersonServer(t *testing.T, clock *testClock) *fakePersonServer {
	t.Helper()
	ps := &fakePersonServer{key: newTestKey(t, "ps-key-1"), clock: clock, revoked: map[string]string{}}
	srv := httptest.NewUnstartedServer(nil)
	ps.URL = "http://" + srv.Listener.Addr().String()
	mux := http.NewServeMux()
	meta := func(w http.ResponseWriter, withPS bool) {
		ps.mu.Lock()
		iss := ps.URL
		if ps.metaIssuer != nil {
			iss = *ps.metaIssuer
		}
		ps.mu.Unlock()
		m := Metadata{Issuer: iss, JWKSURI: ps.URL + "/jwks"}
		if withPS {
			m.AuthTokenEndpoint = ps.URL + "/token"
			m.TokenStatusEndpoint = ps.URL + "/token-status"
		}
		writeJSON(w, m)
	}
	mux.HandleFunc("GET /.well-known/aauth-agent.json", func(w http.ResponseWriter, r *http.Request) { meta(w, false) })
	mux.HandleFunc("GET /.well-known/aauth-person.json", func(w http.ResponseWriter, r *http.Request) { meta(w, true) })
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		ps.jwksFetches.Add(1)
		ps.mu.Lock()
		keys := append([]identity.JWK{identity.PublicJWK(ps.key.Private.Public().(ed25519.PublicKey), ps.key.KID)}, ps.extra...)
		ps.mu.Unlock()
		writeJSON(w, identity.JWKS{Keys: keys})
	})
	mux.HandleFunc("GET /token-status", func(w http.ResponseWriter, r *http.Request) {
		ps.statusQueries.Add(1)
		jti := r.URL.Query().Get("jti")
		ps.mu.Lock()
		reason, revoked := ps.revoked[jti]
		ps.mu.Unlock()
		writeJSON(w, TokenStatus{JTI: jti, Active: !revoked, Reason: reason})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		h := ps.tokenHandler
		ps.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return ps
}

func (ps *fakePersonServer) revoke(jti, reason string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.revoked[jti] = reason
}

func (ps *fakePersonServer) setMetaIssuer(iss string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.metaIssuer = &iss
}

func (ps *fakePersonServer) publish(k identity.Key) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.extra = append(ps.extra, identity.PublicJWK(k.Private.Public().(ed25519.PublicKey), k.KID))
}

func (ps *fakePersonServer) setTokenHandler(h http.HandlerFunc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.tokenHandler = h
}

// agentToken issues an agent token for pub, as kin does for its agents.
func (ps *fakePersonServer) agentToken(t *testing.T, pub ed25519.PublicKey, local string) (string, *AgentClaims) {
	t.Helper()
	now := ps.clock.Now().Unix()
	c := AgentClaims{
		Cnf: identity.Confirmation{JWK: identity.PublicJWK(pub, "")},
		DWK: identity.DWK, Exp: now + 3600, IAT: now, Iss: ps.URL,
		JTI: randomJTI(t), PS: ps.URL, Sub: "aauth:" + local + "@kin.test",
	}
	tok, err := identity.IssueAgentToken(ps.key, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok, &c
}

// authToken issues an auth token bound to pub for the resource aud.
func (ps *fakePersonServer) authToken(t *testing.T, pub ed25519.PublicKey, aud, scope string, edit func(*AuthClaims)) (string, *AuthClaims) {
	t.Helper()
	now := ps.clock.Now().Unix()
	c := AuthClaims{
		Aud: aud, Cnf: identity.Confirmation{JWK: identity.PublicJWK(pub, "")},
		DWK: identity.DWKPerson, Exp: now + 600, IAT: now, Iss: ps.URL,
		JTI: randomJTI(t), PS: ps.URL, Scope: scope, Sub: "person-8f14e45f",
	}
	if edit != nil {
		edit(&c)
	}
	tok, err := identity.IssueAuthToken(ps.key, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok, &c
}

// personToken signs an aa-person+jwt by hand (identity issues none): the
// resource must refuse it where an auth token is required.
func (ps *fakePersonServer) personToken(t *testing.T, pub ed25519.PublicKey, aud string) string {
	t.Helper()
	now := ps.clock.Now().Unix()
	return signJWS(t, ps.key, identity.TypPerson, map[string]any{
		"aud": aud, "cnf": map[string]any{"jwk": identity.PublicJWK(pub, "")},
		"dwk": identity.DWKPerson, "exp": now + 600, "iat": now, "iss": ps.URL,
		"jti": randomJTI(t), "sub": "person-8f14e45f", "scope": "data.read",
	})
}

func signJWS(t *testing.T, key identity.Key, typ string, claims any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "Ed25519", "kid": key.KID, "typ": typ})
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key.Private, []byte(in)))
}

func newTestKey(t *testing.T, kid string) identity.Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return identity.Key{KID: kid, Private: priv}
}

func randomJTI(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// testResource runs a Resource on loopback: its metadata, and
// /api/documents behind the middleware answering the verified claims.
type testResource struct {
	*Resource
	URL string
}

func newTestResource(t *testing.T, ps *fakePersonServer, edit func(*ResourceConfig)) *testResource {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String()
	cfg := ResourceConfig{
		Issuer:          url,
		Key:             newTestKey(t, "rs").Private,
		KID:             "rs-key-1",
		PersonServer:    ps.URL,
		Scope:           func(*http.Request) string { return "data.read" },
		CheckRevocation: true,
		Discovery:       &Discovery{Now: ps.clock.Now},
		Now:             ps.clock.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	r, err := NewResource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/.well-known/", r.MetadataHandler())
	// Every /api/ path is guarded, so a tampered path reaches the middleware.
	mux.Handle("/api/", r.Middleware(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, ok := AuthFromContext(req.Context())
		if !ok {
			http.Error(w, "no claims", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(req.Body)
		writeJSON(w, map[string]any{"sub": c.Sub, "jti": c.JTI, "scope": c.Scope, "body": string(body)})
	})))
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return &testResource{Resource: r, URL: url}
}

// testAgent is an agent with its own key and a kin-issued agent token.
type testAgent struct {
	*Agent
	pub    ed25519.PublicKey
	token  string
	claims *AgentClaims
}

func newTestAgent(t *testing.T, ps *fakePersonServer, now func() time.Time) *testAgent {
	t.Helper()
	k := newTestKey(t, "")
	pub := k.Private.Public().(ed25519.PublicKey)
	tok, c := ps.agentToken(t, pub, "tester")
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return &testAgent{
		Agent: &Agent{
			Key:    k.Private,
			Token:  func(context.Context) (string, error) { return tok, nil },
			Client: client,
			Now:    now,
		},
		pub: pub, token: tok, claims: c,
	}
}
