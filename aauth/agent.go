package aauth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

// DefaultAgentTimeout is the timeout of the client an Agent without one uses.
const DefaultAgentTimeout = 30 * time.Second

// Agent signs requests as an AAuth agent. Key is the key its agent token's
// cnf.jwk names; Token returns the current agent token. Client nil is a
// client with a 30 s timeout; Discovery nil is one over Client; Now nil is
// time.Now. An Agent must not be copied after first use.
type Agent struct {
	Key       ed25519.PrivateKey
	Token     func(ctx context.Context) (string, error)
	Client    *http.Client
	Discovery *Discovery
	Now       func() time.Time

	once   sync.Once
	client *http.Client
	disc   *Discovery
}

func (a *Agent) init() {
	a.once.Do(func() {
		a.client = a.Client
		if a.client == nil {
			a.client = &http.Client{Timeout: DefaultAgentTimeout}
		}
		a.disc = a.Discovery
		if a.disc == nil {
			a.disc = &Discovery{Client: a.Client, Now: a.Now}
		}
	})
}

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Do signs req with the agent token, or with authToken when not "", and
// sends it. A request with a body needs a Content-Type. req is consumed: to
// retry (say with an auth token after a 401), build a new request.
func (a *Agent) Do(req *http.Request, authToken string) (*http.Response, error) {
	a.init()
	token := authToken
	if token == "" {
		if a.Token == nil {
			return nil, errors.New("aauth: Agent.Token is nil")
		}
		t, err := a.Token(req.Context())
		if err != nil {
			return nil, fmt.Errorf("aauth: agent token: %w", err)
		}
		token = t
	}
	if err := httpsig.Sign(req, a.Key, httpsig.Params{Created: a.now(), JWT: token}); err != nil {
		return nil, fmt.Errorf("aauth: signing: %w", err)
	}
	return a.client.Do(req)
}

// Transport returns an http.RoundTripper that signs each request with the
// agent token (as Do does) before base sends it (nil: http.DefaultTransport).
// It is for clients that take an *http.Client and send requests of their
// own, such as an MCP client over streamable HTTP calling kin's /mcp as
// the agent.
func (a *Agent) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &signingTransport{agent: a, base: base}
}

type signingTransport struct {
	agent *Agent
	base  http.RoundTripper
}

func (t *signingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody := func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}
	if t.agent.Token == nil {
		closeBody()
		return nil, errors.New("aauth: Agent.Token is nil")
	}
	token, err := t.agent.Token(req.Context())
	if err != nil {
		closeBody()
		return nil, fmt.Errorf("aauth: agent token: %w", err)
	}
	// A RoundTripper must not change the request it is given: sign a copy
	// (Sign reads the body and gives the copy its own).
	signed := req.Clone(req.Context())
	if err := httpsig.Sign(signed, t.agent.Key, httpsig.Params{Created: t.agent.now(), JWT: token}); err != nil {
		closeBody()
		return nil, fmt.Errorf("aauth: signing: %w", err)
	}
	return t.base.RoundTrip(signed)
}

// RequestAuthToken asks the person server ps for an auth token: it discovers
// auth_token_endpoint from ps's metadata and POSTs req there, signed with the
// agent token. Errors: *Problem for a problem+json answer, *SignatureError for
// a 401 with Signature-Error.
func (a *Agent) RequestAuthToken(ctx context.Context, ps string, req AuthTokenRequest) (*AuthTokenResponse, error) {
	a.init()
	if req.ResourceToken == "" {
		return nil, errors.New("aauth: AuthTokenRequest.ResourceToken is required")
	}
	m, err := a.disc.Metadata(ctx, ps, identity.DWKPerson)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(m.AuthTokenEndpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("aauth: %s's auth_token_endpoint %s is not an http(s) URL", ps, quote(m.AuthTokenEndpoint))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	resp, err := a.Do(hreq, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("aauth: reading the token endpoint's answer: %w", err)
	}
	if len(rb) > MaxDocumentBytes {
		return nil, fmt.Errorf("aauth: the token endpoint's answer is over %d bytes", MaxDocumentBytes)
	}
	if resp.StatusCode == http.StatusOK {
		var out AuthTokenResponse
		if err := json.Unmarshal(rb, &out); err != nil {
			return nil, fmt.Errorf("aauth: the token endpoint's answer is not JSON: %w", err)
		}
		if out.AuthToken == "" {
			return nil, errors.New("aauth: the token endpoint's answer has no auth_token")
		}
		return &out, nil
	}
	return nil, responseError(resp, rb)
}

// responseError turns an error answer into a *SignatureError (401 with
// Signature-Error), a *Problem (problem+json), or a plain error.
func responseError(resp *http.Response, body []byte) error {
	var p Problem
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	isProblem := ct == "application/problem+json" && json.Unmarshal(body, &p) == nil && p.Code != ""
	if resp.StatusCode == http.StatusUnauthorized {
		if se := parseSignatureError(resp.Header.Values(httpsig.HeaderSignatureError)); se != nil {
			se.Detail = p.Detail
			return se
		}
	}
	if isProblem {
		p.Status = resp.StatusCode
		return &p
	}
	return fmt.Errorf("aauth: %s %s: HTTP %d", resp.Request.Method, resp.Request.URL.Redacted(), resp.StatusCode)
}

// parseSignatureError reads a Signature-Error header's error member.
func parseSignatureError(values []string) *SignatureError {
	if len(values) == 0 {
		return nil
	}
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return nil
	}
	m, ok := d.Get("error")
	if !ok {
		return nil
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return nil
	}
	tok, ok := it.Value.(httpsfv.Token)
	if !ok {
		return nil
	}
	return &SignatureError{Code: httpsig.Code(tok)}
}
