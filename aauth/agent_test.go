package aauth

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

func TestRequestAuthToken_FakePersonServer(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	ag := newTestAgent(t, ps, clock.Now)
	want := AuthTokenRequest{ResourceToken: "rt.rt.rt", SubagentToken: "st.st.st", Justification: "summarise Q3"}

	// The endpoint checks what the real one must: the signature, with the
	// body covered, by the key the agent token binds.
	var got AuthTokenRequest
	var covered []string
	ps.setTokenHandler(func(w http.ResponseWriter, r *http.Request) {
		v, err := httpsig.Verify(r, clock.Now(), func(sk httpsig.SignatureKey) (ed25519.PublicKey, error) {
			c, err := identity.VerifyAgentToken(sk.JWT, clock.Now(), identity.JWKS{Keys: []identity.JWK{identity.PublicJWK(ps.key.Private.Public().(ed25519.PublicKey), ps.key.KID)}}.KeyFunc())
			if err != nil {
				return nil, err
			}
			return c.Cnf.JWK.PublicKey()
		})
		if err != nil {
			WriteSignatureError(w, err.(*httpsig.Error))
			return
		}
		covered = v.Covered
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			WriteProblem(w, &Problem{Status: 400, Code: "invalid_request"})
			return
		}
		writeJSON(w, AuthTokenResponse{AuthToken: "au.au.au", ExpiresIn: 600})
	})
	resp, err := ag.RequestAuthToken(context.Background(), ps.URL, want)
	if err != nil {
		t.Fatal(err)
	}
	if resp.AuthToken != "au.au.au" || resp.ExpiresIn != 600 || got != want {
		t.Fatalf("answer %+v, request seen %+v", resp, got)
	}
	for _, c := range []string{"content-digest", "content-type", "signature-key", "@path"} {
		if !slices.Contains(covered, c) {
			t.Fatalf("signature covers %v, not %s", covered, c)
		}
	}

	t.Run("problem", func(t *testing.T) {
		ps.setTokenHandler(func(w http.ResponseWriter, r *http.Request) {
			WriteProblem(w, &Problem{Status: http.StatusForbidden, Code: "access_denied", Detail: "the person declined"})
		})
		_, err := ag.RequestAuthToken(context.Background(), ps.URL, want)
		var p *Problem
		if !errors.As(err, &p) || p.Status != 403 || p.Code != "access_denied" || p.Detail != "the person declined" {
			t.Fatalf("err %#v", err)
		}
	})
	t.Run("Signature-Error", func(t *testing.T) {
		ps.setTokenHandler(func(w http.ResponseWriter, r *http.Request) {
			WriteSignatureError(w, &SignatureError{Code: httpsig.CodeExpiredJWT})
		})
		_, err := ag.RequestAuthToken(context.Background(), ps.URL, want)
		var se *SignatureError
		if !errors.As(err, &se) || se.Code != httpsig.CodeExpiredJWT {
			t.Fatalf("err %#v", err)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		ps.setTokenHandler(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusBadGateway) })
		_, err := ag.RequestAuthToken(context.Background(), ps.URL, want)
		var p *Problem
		var se *SignatureError
		if err == nil || errors.As(err, &p) || errors.As(err, &se) {
			t.Fatalf("err %#v", err)
		}
	})
	t.Run("no resource token", func(t *testing.T) {
		if _, err := ag.RequestAuthToken(context.Background(), ps.URL, AuthTokenRequest{}); err == nil {
			t.Fatal("accepted")
		}
	})
}

func TestAuthTokenRequest_JSON(t *testing.T) {
	b, err := json.Marshal(AuthTokenRequest{ResourceToken: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"resource_token":"r"}` {
		t.Fatalf("%s: empty members not omitted", b)
	}
}

// TestTransportSignsEachRequestAndLeavesTheCallersAlone: every request
// sent through Agent.Transport arrives signed by the agent's key, its
// body covered and intact, while the request the caller built keeps no
// signature headers (a RoundTripper must not change it).
func TestTransportSignsEachRequestAndLeavesTheCallersAlone(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	ag := newTestAgent(t, ps, clock.Now)
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := httpsig.Verify(r, clock.Now(), func(sk httpsig.SignatureKey) (ed25519.PublicKey, error) {
			return ag.Key.Public().(ed25519.PublicKey), nil
		})
		if err != nil {
			WriteSignatureError(w, err.(*httpsig.Error))
			return
		}
		body, _ := io.ReadAll(r.Body)
		got = append(got, string(body)+" "+strings.Join(v.Covered, ","))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: ag.Transport(nil)}
	for _, body := range []string{`{"n":1}`, `{"n":2}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("signed request: %s (%s)", resp.Status, resp.Header.Get(httpsig.HeaderSignatureError))
		}
		if req.Header.Get(httpsig.HeaderSignature) != "" || req.Header.Get(httpsig.HeaderSignatureKey) != "" {
			t.Errorf("the caller's request was changed: %v", req.Header)
		}
	}
	want := []string{`{"n":1} @method,@authority,@path,signature-key,content-digest,content-type`,
		`{"n":2} @method,@authority,@path,signature-key,content-digest,content-type`}
	if !slices.Equal(got, want) {
		t.Errorf("the server saw %q, want %q", got, want)
	}
}
