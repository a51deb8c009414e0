package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/kin-agents/kin/kin"
)

// credPrefix starts every agent credential: "kin-gw1-<id>-<mac>".
const credPrefix = "kin-gw1-"

// credentials makes and checks agents' credentials: an agent's is an
// HMAC of its id under a key only the daemon (and the hosts of its fleet)
// hold, so that it names one agent, cannot be forged for another, and
// needs no storage. It is honoured only while its agent runs on this host
// (Config.Runs): an ended agent's is refused.
type credentials struct {
	key []byte
	// macs are HMACs under key, reused: a call checks its credential on
	// every request.
	macs *sync.Pool
}

func newCredentials(key []byte) credentials {
	return credentials{key: key, macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

func (c credentials) mac(id kin.AgentID) string {
	m := c.macs.Get().(hash.Hash)
	defer c.macs.Put(m)
	m.Reset()
	var buf [64]byte
	b := append(append(buf[:0], "kin model gateway credential v1\x00"...), strconv.FormatInt(int64(id), 10)...)
	m.Write(b)
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
}

// For is agent id's credential.
func (c credentials) For(id kin.AgentID) string {
	return credPrefix + strconv.FormatInt(int64(id), 10) + "-" + c.mac(id)
}

// Check returns the agent a credential names, or 0 when it is not one
// of this gateway's.
func (c credentials) Check(tok string) kin.AgentID {
	rest, ok := strings.CutPrefix(tok, credPrefix)
	if !ok || len(rest) > 80 {
		return 0
	}
	ids, mac, ok := strings.Cut(rest, "-")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(ids, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != ids {
		return 0
	}
	id := kin.AgentID(n)
	if !hmac.Equal([]byte(mac), []byte(c.mac(id))) {
		return 0
	}
	return id
}

// baseURL is the http URL of the daemon's HTTP address as an agent on
// this host reaches it: a wildcard host (0.0.0.0, [::]) becomes loopback.
func baseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}
