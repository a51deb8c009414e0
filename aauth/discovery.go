package aauth

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

// Discovery limits.
const (
	// CacheTTL is how long fetched metadata and JWKS are used (well under the
	// 24 h the draft allows at most).
	CacheTTL = 10 * time.Minute
	// RefetchInterval is the least time between two fetches of one issuer's
	// keys caused by an unknown kid.
	RefetchInterval = time.Minute
	// MaxDocumentBytes bounds a metadata or JWKS response.
	MaxDocumentBytes = 1 << 20
	// DefaultFetchTimeout is the timeout of the client a zero Discovery uses.
	DefaultFetchTimeout = 5 * time.Second
)

// ErrUnavailable marks a discovery failure that is the network's or the
// issuer's server's fault (not the token's): a resource answers it with 503.
var ErrUnavailable = errors.New("aauth: issuer metadata unavailable")

// Discovery fetches and caches issuers' metadata and JWKS. The zero value is
// ready: Client nil is a client with a 5 s timeout that follows no redirects,
// Now nil is time.Now. It is safe for concurrent use.
type Discovery struct {
	Client *http.Client
	Now    func() time.Time

	mu      sync.Mutex
	entries map[discoveryKey]*discoveryEntry
	client  *http.Client
}

type discoveryKey struct{ iss, dwk string }

// discoveryEntry is one issuer's documents; mu serializes its fetches so
// that concurrent misses cause one request.
type discoveryEntry struct {
	mu        sync.Mutex
	meta      *Metadata
	jwks      identity.JWKS
	fetched   time.Time // when meta and jwks were fetched (zero: never)
	attempted time.Time // last fetch attempt, successful or not
}

func (d *Discovery) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Discovery) httpClient() *http.Client {
	if d.Client != nil {
		return d.Client
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		d.client = &http.Client{
			Timeout: DefaultFetchTimeout,
			// A redirect could lead a fetch away from the issuer's host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return d.client
}

func (d *Discovery) entry(iss, dwk string) *discoveryEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.entries == nil {
		d.entries = map[discoveryKey]*discoveryEntry{}
	}
	k := discoveryKey{iss, dwk}
	e, ok := d.entries[k]
	if !ok {
		e = &discoveryEntry{}
		d.entries[k] = e
	}
	return e
}

// Metadata returns iss's metadata under dwk, from the cache while it is
// fresh. Errors: a *SignatureError with issuer_missing or issuer_mismatch
// when the document does not name iss, invalid_jwt when iss is not a usable
// issuer URL, invalid_key for an unusable JWKS; otherwise an error wrapping
// ErrUnavailable.
func (d *Discovery) Metadata(ctx context.Context, iss, dwk string) (*Metadata, error) {
	e := d.entry(iss, dwk)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := d.refresh(ctx, e, iss, dwk, false); err != nil {
		return nil, err
	}
	m := *e.meta
	return &m, nil
}

// Keys returns a kid resolver for iss's keys under dwk. An unknown kid makes
// it fetch the documents again, but not sooner than RefetchInterval after the
// last fetch of that issuer; a kid still unknown is a *SignatureError with
// unknown_key. ctx bounds the fetches the resolver makes.
func (d *Discovery) Keys(ctx context.Context, iss, dwk string) func(kid string) (ed25519.PublicKey, error) {
	return func(kid string) (ed25519.PublicKey, error) {
		e := d.entry(iss, dwk)
		e.mu.Lock()
		defer e.mu.Unlock()
		if err := d.refresh(ctx, e, iss, dwk, false); err != nil {
			return nil, err
		}
		if k, ok := findKey(e.jwks, kid); ok {
			return k.PublicKey()
		}
		if d.now().Sub(e.attempted) < RefetchInterval {
			return nil, &SignatureError{Code: httpsig.CodeUnknownKey, Detail: "kid " + quote(kid) + " not in " + iss + "'s JWKS (refetched less than a minute ago)"}
		}
		if err := d.refresh(ctx, e, iss, dwk, true); err != nil {
			return nil, err
		}
		if k, ok := findKey(e.jwks, kid); ok {
			return k.PublicKey()
		}
		return nil, &SignatureError{Code: httpsig.CodeUnknownKey, Detail: "kid " + quote(kid) + " not in " + iss + "'s JWKS"}
	}
}

func findKey(s identity.JWKS, kid string) (identity.JWK, bool) {
	for _, k := range s.Keys {
		if k.KID == kid {
			return k, true
		}
	}
	return identity.JWK{}, false
}

// refresh fetches e's documents when they are missing, stale or force is
// set. The caller holds e.mu.
func (d *Discovery) refresh(ctx context.Context, e *discoveryEntry, iss, dwk string, force bool) error {
	now := d.now()
	if !force && e.meta != nil && now.Sub(e.fetched) < CacheTTL && !now.Before(e.fetched) {
		return nil
	}
	e.attempted = now
	meta, jwks, err := d.fetch(ctx, iss, dwk)
	if err != nil {
		// A failed forced refetch keeps documents that are still fresh; a
		// failed refresh of stale ones drops them.
		if e.meta == nil || now.Sub(e.fetched) >= CacheTTL || now.Before(e.fetched) {
			e.meta, e.jwks, e.fetched = nil, identity.JWKS{}, time.Time{}
		}
		return err
	}
	e.meta, e.jwks, e.fetched = meta, jwks, now
	return nil
}

func (d *Discovery) fetch(ctx context.Context, iss, dwk string) (*Metadata, identity.JWKS, error) {
	issURL, err := issuerURL(iss)
	if err != nil {
		return nil, identity.JWKS{}, &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: err.Error()}
	}
	if dwk == "" || strings.ContainsAny(dwk, "/?#") {
		return nil, identity.JWKS{}, fmt.Errorf("aauth: bad well-known document name %q", dwk)
	}
	body, err := d.get(ctx, iss+"/.well-known/"+dwk)
	if err != nil {
		return nil, identity.JWKS{}, err
	}
	var m Metadata
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, identity.JWKS{}, fmt.Errorf("%w: %s metadata is not JSON: %v", ErrUnavailable, iss, err)
	}
	switch {
	case m.Issuer == "":
		return nil, identity.JWKS{}, &SignatureError{Code: httpsig.CodeIssuerMissing, Detail: iss + "'s metadata has no issuer"}
	case m.Issuer != iss:
		return nil, identity.JWKS{}, &SignatureError{Code: httpsig.CodeIssuerMismatch, Detail: iss + "'s metadata names issuer " + quote(m.Issuer)}
	}
	ju, err := url.Parse(m.JWKSURI)
	if err != nil || m.JWKSURI == "" || ju.Scheme != issURL.Scheme || !strings.EqualFold(ju.Host, issURL.Host) || ju.User != nil {
		return nil, identity.JWKS{}, &SignatureError{Code: httpsig.CodeInvalidKey, Detail: iss + "'s jwks_uri " + quote(m.JWKSURI) + " is not on the issuer's scheme and host"}
	}
	body, err = d.get(ctx, m.JWKSURI)
	if err != nil {
		return nil, identity.JWKS{}, err
	}
	jwks, err := identity.ParseJWKS(body)
	if err != nil {
		return nil, identity.JWKS{}, &SignatureError{Code: httpsig.CodeInvalidKey, Detail: iss + "'s JWKS: " + err.Error()}
	}
	return &m, jwks, nil
}

func (d *Discovery) get(ctx context.Context, u string) ([]byte, error) {
	return getJSON(ctx, d.httpClient(), u)
}

// getJSON GETs u and returns a 200 answer's body, at most MaxDocumentBytes.
func getJSON(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrUnavailable, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: HTTP %d", ErrUnavailable, u, resp.StatusCode)
	}
	if len(body) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: GET %s: answer over %d bytes", ErrUnavailable, u, MaxDocumentBytes)
	}
	return body, nil
}

// issuerURL checks that iss is an absolute http(s) URL with a host and no
// query, fragment, user info or trailing slash, so that {iss}/.well-known/
// names one document.
func issuerURL(iss string) (*url.URL, error) {
	u, err := url.Parse(iss)
	switch {
	case err != nil:
		return nil, fmt.Errorf("issuer %s is not a URL", quote(iss))
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("issuer %s is not an http(s) URL", quote(iss))
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(iss, "/") || strings.Contains(iss, "#"):
		return nil, fmt.Errorf("issuer %s must be scheme://host[/path] without a trailing slash, query or fragment", quote(iss))
	}
	return u, nil
}

// quote quotes an untrusted string for an error message.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}
