package aauth

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
)

type vectors struct {
	PSJWKS  json.RawMessage `json:"ps_jwks"`
	Request struct {
		RequestLine    string `json:"request_line"`
		Signature      string `json:"Signature"`
		SignatureInput string `json:"Signature-Input"`
		SignatureKey   string `json:"Signature-Key"`
	} `json:"http_sig_subagent_resource_call"`
}

// vectorTransport stands in for the network between the resource and
// https://ps.example, whose metadata the vectors imply: it answers the
// person server's aauth-person.json and its JWKS (ps_jwks) in-process.
type vectorTransport struct {
	jwks  []byte
	calls []string
}

func (v *vectorTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	v.calls = append(v.calls, r.URL.String())
	var body string
	switch r.URL.String() {
	case "https://ps.example/.well-known/aauth-person.json":
		body = `{"issuer":"https://ps.example","jwks_uri":"https://ps.example/.well-known/jwks.json"}`
	case "https://ps.example/.well-known/jwks.json":
		body = string(v.jwks)
	default:
		return &http.Response{StatusCode: 404, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{"Content-Type": {"application/json"}}, Request: r}, nil
}

// The vectors' sub-agent call (GET https://resource.example/api/documents,
// signed with an auth token from https://ps.example) is accepted as sent.
func TestMiddleware_Vector_SubagentResourceCall(t *testing.T) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Unix(1730217600, 0) }
	tr := &vectorTransport{jwks: v.PSJWKS}
	r, err := NewResource(ResourceConfig{
		Issuer:       "https://resource.example",
		Key:          newTestKey(t, "rs-key-1").Private,
		PersonServer: "https://ps.example",
		Scope:        func(*http.Request) string { return "data.read" },
		Discovery:    &Discovery{Client: &http.Client{Transport: tr}, Now: clock},
		Now:          clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	var gotSub string
	srv := httptest.NewServer(r.Middleware(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, _ := AuthFromContext(req.Context())
		gotSub = c.Sub
	})))
	t.Cleanup(srv.Close)

	send := func(sig string) answer {
		method, target, _ := strings.Cut(v.Request.RequestLine, " ")
		path := strings.TrimPrefix(target, "https://resource.example")
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "resource.example" // @authority as signed
		req.Header.Set(httpsig.HeaderSignature, sig)
		req.Header.Set(httpsig.HeaderSignatureInput, v.Request.SignatureInput)
		req.Header.Set(httpsig.HeaderSignatureKey, v.Request.SignatureKey)
		resp, err := srv.Client().Do(req)
		return readAnswer(t, resp, err)
	}
	if a := send(v.Request.Signature); a.status != http.StatusOK {
		t.Fatalf("vector request: %d %s", a.status, a.body)
	}
	if gotSub != "8f14e45fceea167a5a36dedd4bea2543" {
		t.Fatalf("sub %q", gotSub)
	}
	if len(tr.calls) != 2 {
		t.Fatalf("discovery calls %v", tr.calls)
	}
	// One changed signature byte is refused.
	bad := []byte(v.Request.Signature)
	bad[10] ^= 1
	if bad[10] == ':' || bad[10] == '=' {
		bad[10] = 'A'
	}
	wantSignatureError(t, send(string(bad)), httpsig.CodeInvalidSignature)
}
