package personserver

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
)

// Signed for another host. A signature covers the request's @authority,
// the host and port it was sent to. Each host of a fleet remembers the
// signatures it accepted (its own replay cache), so a request captured on
// its way to one host could be accepted once more by another, which never
// saw it. A host therefore refuses a signed request whose authority is the
// address another host of the fleet announced: the signature was made for
// that host, and only that host accepts it. (Names this host is reached by
// that no host announced, a proxy's say, are left to the replay cache: the
// fleet's addresses are what this check knows.)

// hostAddrsEvery bounds how stale the fleet's addresses may be.
const hostAddrsEvery = 2 * time.Second

// hostAddrs caches the fleet's hosts' announced addresses.
type hostAddrs struct {
	mu      sync.Mutex
	read    time.Time
	reading bool              // a request is reading them from the store
	other   map[string]string // lower-case address → the other host's name
}

// signedForAnotherHost returns an *httpsig.Error when r's authority is the
// address of another host of the fleet, nil otherwise (and when the hosts
// cannot be read: the replay cache still holds on this host).
func (srv *Server) signedForAnotherHost(r *http.Request) error {
	if srv.cfg.Host == "" || r.Host == "" {
		return nil
	}
	other := srv.otherHosts(r.Context())
	name, ok := other[strings.ToLower(r.Host)]
	if !ok {
		return nil
	}
	return &httpsig.Error{Code: httpsig.CodeInvalidSignature,
		Detail: "the request was signed for host " + name + " (" + r.Host + "), not this one (" + srv.cfg.Host + "): a host of the fleet accepts a signature made for itself only; sign the request for the host you send it to"}
}

// otherHosts is the fleet's other hosts by address, read again at most
// every hostAddrsEvery.
// Once read, the addresses are read again outside the lock: a slow store
// delays the one request that reads them, not every signed request
// meanwhile (they check against the addresses read before). The first
// read is waited for.
func (srv *Server) otherHosts(ctx context.Context) map[string]string {
	c := &srv.addrs
	now := time.Now()
	c.mu.Lock()
	refresh := c.other != nil
	if refresh {
		if now.Sub(c.read) < hostAddrsEvery || c.reading {
			other := c.other
			c.mu.Unlock()
			return other
		}
		c.reading = true // a refresh: read with the lock let go
		c.mu.Unlock()
	}
	// (Never read: the lock is held, so every request waits for this one.)
	hosts, err := srv.st.HostList(ctx)
	if refresh {
		c.mu.Lock()
		c.reading = false
	}
	defer c.mu.Unlock()
	if err != nil {
		return c.other // nil before the first read: nothing refused
	}
	m := make(map[string]string, len(hosts))
	for _, h := range hosts {
		if h.Name != srv.cfg.Host && h.Address != "" {
			m[strings.ToLower(h.Address)] = h.Name
		}
	}
	c.other, c.read = m, now
	return m
}
