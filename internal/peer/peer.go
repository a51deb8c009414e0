// Package peer is how the hosts of a fleet call one another's HTTP API
// (issue 24): a host serving a request about an agent that runs on another
// host (its log) checks its own caller as it would on one host, then asks
// the agent's host, at the address that host recorded in the store's hosts
// table, signing the request with a key every host of the fleet derives
// from the fleet's one log key (auditlog.Key.Derive). The store holds only
// the log key's public half, so reading the store is not enough to call a
// host as a peer. The receiving host checks the signature (Auth.Verify)
// and serves the request as the operator's, on the few routes a peer may
// call (httpapi's peer routes), for its own agents only.
//
// It must never decide who may read what (the asking host did, with its
// caller), nor forward a request a peer sent it.
package peer

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// Header carries a peer's signature: "FROM TO UNIXTIME NONCE MAC", FROM
// the signing host and TO the host it is for (covered by the MAC: each
// host remembers only the nonces it accepted, so a request captured on
// its way to one host must not be accepted by another).
const Header = httpapi.PeerHeader

// Label is what the peer key is derived from the log key for.
const Label = "kin fleet peer requests v1"

// Window is how far a signed request's time may be from the receiver's
// clock, either way; a nonce is remembered that long.
const Window = 60 * time.Second

// maxNonces bounds the nonces remembered: past it, requests are refused
// until the oldest age out (a peer makes a few a second).
const maxNonces = 1 << 16

// Auth signs this host's requests to its peers and checks theirs.
type Auth struct {
	host  string
	key   []byte
	clock func() time.Time
	start int64 // unix time it was made: older requests are refused

	mu   sync.Mutex
	seen map[string]int64 // nonce -> unix time it may be forgotten
}

// NewAuth is the peer authentication of host, with key derived from the
// fleet's log key (Label); clock nil is time.Now.
func NewAuth(host string, key []byte, clock func() time.Time) *Auth {
	if clock == nil {
		clock = time.Now
	}
	return &Auth{host: host, key: key, clock: clock, start: clock().Unix(), seen: map[string]int64{}}
}

// Host is the host this Auth signs as.
func (a *Auth) Host() string { return a.host }

// Sign signs r as this host, for host to: its method, target and request
// URI, now.
func (a *Auth) Sign(r *http.Request, to string) {
	var n [12]byte
	rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	ts := strconv.FormatInt(a.clock().Unix(), 10)
	authority := r.Host
	if authority == "" {
		authority = r.URL.Host
	}
	mac := a.mac(a.host, to, ts, nonce, r.Method, authority, r.URL.RequestURI())
	r.Header.Set(Header, a.host+" "+to+" "+ts+" "+nonce+" "+mac)
}

// toKey is the context key of the host a request is for (ForHost).
type toKey struct{}

// ForHost returns ctx carrying the host a request made with it is for:
// the signing transport signs it for that host.
func ForHost(ctx context.Context, host string) context.Context {
	return context.WithValue(ctx, toKey{}, host)
}

// Verify checks r's peer signature and returns the host that made it.
func (a *Auth) Verify(r *http.Request) (string, error) {
	f := strings.Fields(r.Header.Get(Header))
	if len(f) != 5 {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: want FROM TO TIME NONCE MAC", Header)
	}
	host, to, ts, nonce, mac := f[0], f[1], f[2], f[3], f[4]
	if err := kin.ValidateHostName(host); err != nil {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: %v", Header, kin.ErrorMessageOf(err))
	}
	if to != a.host {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: signed by host %q for host %q, not this one (%q): a host accepts a peer request made for itself only", Header, host, to, a.host)
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(nonce) != 24 {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: bad time or nonce", Header)
	}
	want := a.mac(host, to, ts, nonce, r.Method, r.Host, r.RequestURI)
	if !hmac.Equal([]byte(mac), []byte(want)) {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: the signature of host %q does not verify: is it a host of this fleet, with the fleet's log key (kin serve --log-key-dir)?", Header, host)
	}
	now := a.clock()
	if d := now.Sub(time.Unix(t, 0)); d > Window || d < -Window {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: signed %s from this host's clock (at most %s): are the hosts' clocks set?", Header, d.Round(time.Second), Window)
	}
	// The nonces are remembered in memory: one signed before this Auth
	// was made (by a previous run of this daemon) may have been accepted
	// then, within the window, so it is refused now.
	if t < a.start {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: signed %d s before this host started: it may have been accepted by its previous run; sign it again", Header, a.start-t)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.seen[nonce]; dup {
		return "", kin.Errorf(kin.ECodeUnauthorized, "%s: a request replayed", Header)
	}
	if len(a.seen) >= maxNonces {
		for k, until := range a.seen {
			if until < now.Unix() {
				delete(a.seen, k)
			}
		}
		if len(a.seen) >= maxNonces {
			return "", kin.Errorf(kin.ECodeRateLimited, "%s: too many peer requests in %s", Header, Window)
		}
	}
	a.seen[nonce] = t + 2*int64(Window/time.Second)
	return host, nil
}

func (a *Auth) mac(host, to, ts, nonce, method, authority, uri string) string {
	m := hmac.New(sha256.New, a.key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s\n%s\n%s\n", host, to, ts, nonce, method, authority, uri)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// transport signs every request it carries.
type transport struct {
	auth *Auth
	base http.RoundTripper
}

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	to, _ := r.Context().Value(toKey{}).(string)
	t.auth.Sign(r, to)
	return t.base.RoundTrip(r)
}

// Serve checks r as httpapi.Server.Peer does: the context r is served
// with, as the peer's (caller.Caller.Peer), or why not.
func (a *Auth) Serve(r *http.Request) (context.Context, error) {
	host, err := a.Verify(r)
	if err != nil {
		return nil, err
	}
	return caller.With(r.Context(), caller.Caller{Peer: host}), nil
}
