package daemon_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/identity"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// aauthAgent is a spawned agent's AAuth identity as the test reads it from
// the agent (its token) and from its session (its key: the test runs as the
// daemon's user, which may read it).
type aauthAgent struct {
	*kin.Agent
	token  string
	claims *identity.AgentClaims
	signer *aauth.Agent
}

func spawnWithToken(t testing.TB, d *kintest.Daemon, name string, parent kin.AgentID, jwks identity.JWKS) *aauthAgent {
	t.Helper()
	out := outPath(t)
	a := spawnAgent(t, d.Client, name, parent, "token", withEnv("KINTEST_OUT="+out))
	got := waitOut(t, out, "key ")
	var tok, keyPath string
	for _, l := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(l, "token "); ok {
			tok = v
		}
		if v, ok := strings.CutPrefix(l, "key "); ok {
			keyPath = v
		}
	}
	if tok == "" || keyPath == "" {
		t.Fatalf("agent %s said %q", name, got)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("agent key %s: %v, %v; want a 0600 file", keyPath, fi, err)
	}
	key, err := aauth.LoadKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := identity.VerifyAgentToken(tok, time.Now(), jwks.KeyFunc())
	if err != nil {
		t.Fatalf("agent %s's token does not verify with kin's JWKS: %v", name, err)
	}
	if c.Cnf.JWK != identity.PublicJWK(key.Public().(ed25519.PublicKey), "") {
		t.Fatalf("agent %s's token names another key than its session's", name)
	}
	return &aauthAgent{Agent: a, token: tok, claims: c, signer: &aauth.Agent{Key: key, Token: func(context.Context) (string, error) { return tok, nil }}}
}

// testResource is a resource server on loopback issuing resource tokens
// bound to whatever agent the test names.
type testResource struct {
	url string
	res *aauth.Resource
}

func newTestResource(t testing.TB, ps string) *testResource {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	tr := &testResource{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tr.res.MetadataHandler().ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	tr.url = srv.URL
	res, err := aauth.NewResource(aauth.ResourceConfig{Issuer: srv.URL, Key: key, KID: "rs-1", PersonServer: ps})
	if err != nil {
		t.Fatal(err)
	}
	tr.res = res
	return tr
}

func (tr *testResource) tokenFor(t testing.TB, a *aauthAgent, scope string) string {
	t.Helper()
	rt, err := tr.res.IssueResourceToken(a.claims, a.claims.JTI, scope)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// problemCode is the error code of a refused RequestAuthToken.
func problemCode(err error) string {
	var p *aauth.Problem
	var se *aauth.SignatureError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &p):
		return p.Code
	case errors.As(err, &se):
		return string(se.Code)
	}
	return err.Error()
}

func kinJWKS(t testing.TB, base, path string) identity.JWKS {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	set, err := identity.ParseJWKS(b)
	if err != nil {
		t.Fatalf("%s: %v (%s)", path, err, b)
	}
	return set
}

// TestAuthTokenEndpoint drives kin's person server over real HTTP with real
// agents: what it issues, and each way it refuses.
func TestAuthTokenEndpoint(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	ctx := context.Background()
	ps := "http://" + d.HTTPAddr()
	apKeys := kinJWKS(t, ps, "/.well-known/jwks.json")
	psKeys := kinJWKS(t, ps, "/.well-known/aauth-person-jwks.json")
	res := newTestResource(t, ps)

	top := spawnWithToken(t, d, "planner", 0, apKeys)
	sub := spawnWithToken(t, d, "search1", top.ID, apKeys)
	deep := spawnWithToken(t, d, "fetch1", sub.ID, apKeys)
	if sub.claims.ParentAgent != top.claims.Sub || sub.claims.Act == nil || sub.claims.Act.Agent != top.claims.Sub ||
		sub.claims.Sub != "aauth:planner+search1@127.0.0.1" || sub.claims.Exp > top.claims.Exp {
		t.Fatalf("sub-agent token claims %+v; parent %s", sub.claims, top.claims.Sub)
	}
	if _, err := d.Client.Grant(ctx, kin.GrantRequest{Agent: sub.ID, Resource: res.url, Scope: "data.read"}); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
		t.Fatalf("a grant to a sub-agent: %v; want invalid (grants are for top-level agents)", err)
	}
	if _, err := d.Client.Grant(ctx, kin.GrantRequest{Agent: top.ID, Resource: res.url, Scope: "data.read"}); err != nil {
		t.Fatal(err)
	}

	ask := func(signer *aauthAgent, req aauth.AuthTokenRequest) (*aauth.AuthTokenResponse, error) {
		return signer.signer.RequestAuthToken(ctx, ps, req)
	}
	t.Run("issued to the parent, bound to the sub-agent", func(t *testing.T) {
		got, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token, PresentedToken: sub.token})
		if err != nil {
			t.Fatal(err)
		}
		c, err := identity.VerifyAuthToken(got.AuthToken, time.Now(), psKeys.KeyFunc())
		if err != nil {
			t.Fatal(err)
		}
		if c.Cnf.JWK != sub.claims.Cnf.JWK || c.Act == nil || c.Act.Agent != top.claims.Sub || c.Agent != sub.claims.Sub ||
			c.Aud != res.url || c.Scope != "data.read" || c.Exp > sub.claims.Exp || c.Exp-c.IAT > 3600 || got.ExpiresIn <= 0 || c.Sub != "Dr. Schmidt" {
			t.Fatalf("auth token claims %+v", c)
		}
	})
	t.Run("seed's actor_token", func(t *testing.T) {
		if _, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), ActorToken: sub.token}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("deeper descendant, flattened under the top-level agent", func(t *testing.T) {
		if _, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, deep, "data.read"), SubagentToken: deep.token}); err != nil {
			t.Fatal(err)
		}
	})

	foreignKey := func() identity.Key {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		return identity.Key{KID: "other", Private: k}
	}()
	foreign := *sub.claims
	foreign.Iss = "http://other.example"
	foreignTok, err := identity.IssueSubAgentToken(foreignKey, identity.AgentClaims{Cnf: top.claims.Cnf, DWK: identity.DWK, Exp: top.claims.Exp, IAT: top.claims.IAT,
		Iss: "http://other.example", JTI: "x", PS: sub.claims.PS, Sub: "aauth:planner@127.0.0.1"}, foreign)
	if err != nil {
		t.Fatal(err)
	}
	noneTok := b64json(`{"alg":"none","typ":"aa-agent+jwt"}`) + "." + strings.Split(top.token, ".")[1] + "."
	for _, tc := range []struct {
		name   string
		signer *aauthAgent
		req    func() aauth.AuthTokenRequest
		now    time.Duration // the signer's clock skew
		want   string
	}{
		{"a request signed by a sub-agent", sub, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, deep, "data.read"), SubagentToken: deep.token}
		}, 0, "access_denied"},
		{"a child token whose iss differs from the parent's", top, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: foreignTok}
		}, 0, "invalid_subagent_token"},
		{"a resource token bound to another key", top, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, top, "data.read"), SubagentToken: sub.token}
		}, 0, "invalid_resource_token"},
		{"a scope the grant lacks", top, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.write"), SubagentToken: sub.token}
		}, 0, "access_denied"},
		{"a sub-agent token of another tree", sub, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, top, "data.read"), SubagentToken: top.token}
		}, 0, "access_denied"},
		{"created older than 60 s", top, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token}
		}, -61 * time.Second, "invalid_signature"},
		{"created in the future", top, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token}
		}, 61 * time.Second, "clock_skew"},
		{"alg none in Signature-Key", &aauthAgent{signer: &aauth.Agent{Key: top.signer.Key, Token: func(context.Context) (string, error) { return noneTok, nil }}}, func() aauth.AuthTokenRequest {
			return aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token}
		}, 0, "invalid_jwt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &aauth.Agent{Key: tc.signer.signer.Key, Token: tc.signer.signer.Token}
			if tc.now != 0 {
				s.Now = func() time.Time { return time.Now().Add(tc.now) }
			}
			_, err := s.RequestAuthToken(ctx, ps, tc.req())
			if got := problemCode(err); got != tc.want {
				t.Fatalf("refusal %q (%v); want %q", got, err, tc.want)
			}
		})
	}

	t.Run("suspending the parent revokes and refuses; stopping the sub-agent revokes its tokens", func(t *testing.T) {
		got, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := identity.VerifyAuthToken(got.AuthToken, time.Now(), psKeys.KeyFunc())
		if st := tokenStatus(t, ps, c.JTI); !st.Active {
			t.Fatalf("a fresh token's status: %+v", st)
		}
		if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: top.ID, Action: kin.ActionSuspend}); err != nil {
			t.Fatal(err)
		}
		if _, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token}); problemCode(err) != "revoked_jwt" {
			t.Fatalf("authorization by a suspended parent: %v; want revoked_jwt", err)
		}
		if st := tokenStatus(t, ps, c.JTI); st.Active || !strings.Contains(st.Reason, "suspend") {
			t.Fatalf("status of a token issued before the suspension: %+v", st)
		}
		toks, err := d.Client.AuthTokens(ctx, kin.AuthTokenFilter{Agent: sub.ID})
		if err != nil || len(toks) == 0 {
			t.Fatalf("auth tokens: %v %v", toks, err)
		}
		for _, tk := range toks {
			if tk.State != kin.TokenRevoked {
				t.Fatalf("after suspending the parent, token %+v is not revoked", tk)
			}
		}
		if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: top.ID, Action: kin.ActionResume}); err != nil {
			t.Fatal(err)
		}
		got, err = ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token})
		if err != nil {
			t.Fatalf("after resuming: %v", err)
		}
		c, _ = identity.VerifyAuthToken(got.AuthToken, time.Now(), psKeys.KeyFunc())
		if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: sub.ID}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("token status %+v", tokenStatus(t, ps, c.JTI))
				a, _ := d.Client.Agent(ctx, sub.ID)
				t.Logf("sub-agent %+v", a)
			}
		})
		var st aauth.TokenStatus
		kintest.WaitFor(t, 10*time.Second, "the stopped sub-agent's token to be revoked", func() bool {
			st = tokenStatus(t, ps, c.JTI)
			return !st.Active && strings.Contains(st.Reason, "revoked")
		})
		if _, err := ask(top, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, sub, "data.read"), SubagentToken: sub.token}); problemCode(err) != "revoked_subagent_token" {
			t.Fatalf("authorization for a stopped sub-agent: %v; want revoked_subagent_token", err)
		}
	})

	t.Run("every issuance, refusal and revocation is an event naming parent and sub-agent", func(t *testing.T) {
		es, err := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventTokenIssued, kin.EventTokenRefused, kin.EventTokenRevoked}})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range es {
			seen[e.Type] = true
			if e.Type != kin.EventTokenRefused && (e.Parent == 0 || e.Agent == 0) {
				t.Fatalf("event %s names no parent or sub-agent: %s", e.Type, e.Data)
			}
		}
		if !seen[kin.EventTokenIssued] || !seen[kin.EventTokenRefused] || !seen[kin.EventTokenRevoked] {
			t.Fatalf("events seen: %v", seen)
		}
	})
}

func b64json(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func tokenStatus(t *testing.T, ps, jti string) aauth.TokenStatus {
	t.Helper()
	resp, err := http.Get(ps + "/aauth/token-status?jti=" + jti)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st aauth.TokenStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// An agent's token is reused until half its lifetime has passed, then
// refreshed; the fresh one verifies and lives a full lifetime again.
func TestAgentTokenRefreshedAtHalfLife(t *testing.T) {
	clock := kintest.NewClock()
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithClock(clock.Now))
	apKeys := kinJWKS(t, "http://"+d.HTTPAddr(), "/.well-known/jwks.json")
	out := outPath(t)
	a := spawnAgent(t, d.Client, "refresher", 0, "tokens", withEnv("KINTEST_OUT="+out))
	next := func(n int) *identity.AgentClaims {
		t.Helper()
		if n > 0 {
			if err := syscall.Kill(a.PID, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
		}
		prefix := fmt.Sprintf("token%d ", n)
		got := waitOut(t, out, prefix)
		for _, l := range strings.Split(got, "\n") {
			if tok, ok := strings.CutPrefix(l, prefix); ok {
				c, err := identity.VerifyAgentToken(tok, clock.Now(), apKeys.KeyFunc())
				if err != nil {
					t.Fatalf("token %d: %v", n, err)
				}
				return c
			}
		}
		t.Fatalf("no token %d in %q", n, got)
		return nil
	}
	first := next(0)
	if first.Exp-first.IAT != 3600 {
		t.Fatalf("lifetime %d s; want the default hour", first.Exp-first.IAT)
	}
	clock.Advance(29 * time.Minute)
	if again := next(1); again.JTI != first.JTI {
		t.Fatalf("before half-life kin issued a new token (jti %s, was %s)", again.JTI, first.JTI)
	}
	clock.Advance(2 * time.Minute)
	fresh := next(2)
	if fresh.JTI == first.JTI || fresh.IAT != clock.Now().Unix() || fresh.Exp-fresh.IAT != 3600 || fresh.Cnf != first.Cnf {
		t.Fatalf("past half-life: %+v; want a fresh token for the same key (first %+v)", fresh, first)
	}
}

// TestRevocationFollowsTheTree: a sub-agent's token derives from its
// parent's, so revoking an agent alone (no --cascade: its child stays
// active in the registry) refuses its child's token too: the top-level
// agent can no longer obtain an auth token for either.
func TestRevocationFollowsTheTree(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	ctx := context.Background()
	ps := "http://" + d.HTTPAddr()
	apKeys := kinJWKS(t, ps, "/.well-known/jwks.json")
	res := newTestResource(t, ps)
	top := spawnWithToken(t, d, "planner", 0, apKeys)
	sub := spawnWithToken(t, d, "search1", top.ID, apKeys)
	deep := spawnWithToken(t, d, "fetch1", sub.ID, apKeys)
	if _, err := d.Client.Grant(ctx, kin.GrantRequest{Agent: top.ID, Resource: res.url, Scope: "data.read"}); err != nil {
		t.Fatal(err)
	}
	ask := func(bound *aauthAgent) error {
		_, err := top.signer.RequestAuthToken(ctx, ps, aauth.AuthTokenRequest{ResourceToken: res.tokenFor(t, bound, "data.read"), SubagentToken: bound.token})
		return err
	}
	for _, ag := range []*aauthAgent{sub, deep} {
		if err := ask(ag); err != nil {
			t.Fatalf("%s before the revocation: %v", ag.Name, err)
		}
	}
	// The middle agent alone is revoked (the top-level one still signs).
	if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: sub.ID, Action: kin.ActionRevoke}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Client.Agent(ctx, deep.ID); err != nil || got.Status != kin.StatusActive {
		t.Fatalf("the revoked agent's child: %+v, %v; want still active (no --cascade)", got, err)
	}
	if err := ask(deep); problemCode(err) != "revoked_subagent_token" || !strings.Contains(err.Error(), "ancestor") {
		t.Fatalf("an auth token for the child of a revoked sub-agent: %v; want revoked_subagent_token naming its ancestor", err)
	}
	if err := ask(sub); problemCode(err) != "revoked_subagent_token" {
		t.Fatalf("an auth token for the revoked sub-agent: %v", err)
	}
}
