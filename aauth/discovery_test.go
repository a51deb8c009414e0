package aauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
)

func TestDiscovery_FakePersonServer_UnknownKidRefetchRateLimited(t *testing.T) {
	clock := newTestClock()
	ps := newFakePersonServer(t, clock)
	d := &Discovery{Now: clock.Now}
	keys := d.Keys(context.Background(), ps.URL, DWKPerson)

	if _, err := keys("ps-key-1"); err != nil {
		t.Fatal(err)
	}
	if n := ps.jwksFetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1", n)
	}
	// A rotated key appears at the person server.
	rotated := newTestKey(t, "ps-key-2")
	ps.publish(rotated)

	// Within a minute of the last fetch an unknown kid does not refetch.
	clock.Advance(30 * time.Second)
	for range 5 {
		_, err := keys("ps-key-2")
		if !errors.Is(err, &SignatureError{Code: httpsig.CodeUnknownKey}) {
			t.Fatalf("err %v, want unknown_key", err)
		}
	}
	if n := ps.jwksFetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches within the minute, want 1", n)
	}
	// Once a minute has passed, one refetch finds it.
	clock.Advance(31 * time.Second)
	if _, err := keys("ps-key-2"); err != nil {
		t.Fatal(err)
	}
	if n := ps.jwksFetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches, want 2", n)
	}
	// A kid that never appears costs one fetch a minute at most.
	for range 3 {
		_, _ = keys("nope")
	}
	clock.Advance(61 * time.Second)
	for range 3 {
		_, _ = keys("nope")
	}
	if n := ps.jwksFetches.Load(); n != 3 {
		t.Fatalf("%d JWKS fetches, want 3", n)
	}
	// Known kids come from the cache until it is 10 minutes old.
	clock.Advance(CacheTTL - time.Second)
	_, _ = keys("ps-key-1")
	if n := ps.jwksFetches.Load(); n != 3 {
		t.Fatalf("%d JWKS fetches before the TTL, want 3", n)
	}
	clock.Advance(2 * time.Second)
	_, _ = keys("ps-key-1")
	if n := ps.jwksFetches.Load(); n != 4 {
		t.Fatalf("%d JWKS fetches after the TTL, want 4", n)
	}
}

func TestDiscovery_MetadataChecks(t *testing.T) {
	var meta, jwks string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/aauth-agent.json":
			_, _ = w.Write([]byte(meta))
		case "/jwks":
			_, _ = w.Write([]byte(jwks))
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat(" ", MaxDocumentBytes+1)))
		case "/redirect":
			http.Redirect(w, r, "/jwks", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	goodJWKS := `{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"Ed25519","kid":"a","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`
	for _, tt := range []struct {
		name, meta, jwks string
		code             httpsig.Code // "" with unavailable
		unavailable      bool
	}{
		{"ok", `{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/jwks"}`, goodJWKS, "", false},
		{"issuer mismatch", `{"issuer":"` + srv.URL + `/x","jwks_uri":"` + srv.URL + `/jwks"}`, goodJWKS, httpsig.CodeIssuerMismatch, false},
		{"issuer missing", `{"jwks_uri":"` + srv.URL + `/jwks"}`, goodJWKS, httpsig.CodeIssuerMissing, false},
		{"jwks on another host", `{"issuer":"` + srv.URL + `","jwks_uri":"http://evil.example/jwks"}`, goodJWKS, httpsig.CodeInvalidKey, false},
		{"jwks on another scheme", `{"issuer":"` + srv.URL + `","jwks_uri":"` + strings.Replace(srv.URL, "http:", "https:", 1) + `/jwks"}`, goodJWKS, httpsig.CodeInvalidKey, false},
		{"jwks key without alg", `{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/jwks"}`, strings.Replace(goodJWKS, `"alg":"Ed25519",`, "", 1), httpsig.CodeInvalidKey, false},
		{"jwks too big", `{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/big"}`, "", "", true},
		{"jwks redirect not followed", `{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/redirect"}`, goodJWKS, "", true},
		{"metadata not JSON", `<html>`, goodJWKS, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			meta, jwks = tt.meta, tt.jwks
			d := &Discovery{}
			_, err := d.Keys(context.Background(), srv.URL, DWKAgent)("a")
			switch {
			case tt.unavailable:
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", err)
				}
			case tt.code == "":
				if err != nil {
					t.Fatal(err)
				}
			case !errors.Is(err, &SignatureError{Code: tt.code}):
				t.Fatalf("err %v, want %s", err, tt.code)
			}
		})
	}
	d := &Discovery{}
	if _, err := d.Metadata(context.Background(), srv.URL+"/", DWKAgent); !errors.Is(err, &SignatureError{Code: httpsig.CodeInvalidJWT}) {
		t.Fatalf("issuer with a trailing slash: %v", err)
	}
}
