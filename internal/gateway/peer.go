package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
)

// peerKey carries a TCP connection's peer, looked up once per connection.
type peerKey struct{}

type connPeer struct {
	local, remote netip.AddrPort
	once          sync.Once
	uid           uint32
	err           error
}

// ConnContext is the HTTP address's http.Server.ConnContext: it keeps the
// connection's addresses so that the gateway can ask the kernel, once per
// connection, which uid holds the other end (PeerUID).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	p := &connPeer{}
	if l, ok := c.LocalAddr().(*net.TCPAddr); ok {
		p.local = l.AddrPort()
	}
	if r, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		p.remote = r.AddrPort()
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// errNotLocal: the connection's other end is not a socket of this
// machine's network namespace (another machine, or another namespace).
var errNotLocal = errors.New("the connection does not come from this machine")

// peerUID is the uid owning the client's end of r's TCP connection, as the
// kernel tells it (the connection whose local address is the client's and
// remote address is ours: lookupTCPUID), looked up once per connection.
func peerUID(r *http.Request) (uint32, error) {
	p, _ := r.Context().Value(peerKey{}).(*connPeer)
	if p == nil || !p.local.IsValid() || !p.remote.IsValid() {
		return 0, errors.New("the connection's addresses are unknown")
	}
	p.once.Do(func() {
		p.uid, p.err = lookupTCPUID(p.remote, p.local)
	})
	return p.uid, p.err
}

// lookupTCPUID finds the socket of this network namespace whose local
// address is local and remote address remote, and returns its owner's uid:
// the kernel's socket diagnostics answer for that one socket, else (where
// they are refused) /proc/net/tcp and tcp6 are read through.
func lookupTCPUID(local, remote netip.AddrPort) (uint32, error) {
	if uid, err := diagTCPUID(local, remote); !errors.Is(err, errNoDiag) {
		return uid, err
	}
	return scanTCPUID(local, remote)
}

// scanTCPUID is lookupTCPUID by reading /proc/net/tcp and tcp6.
func scanTCPUID(local, remote netip.AddrPort) (uint32, error) {
	files := []string{"/proc/net/tcp6", "/proc/net/tcp"}
	if local.Addr().Unmap().Is4() {
		files = []string{"/proc/net/tcp", "/proc/net/tcp6"}
	}
	for _, f := range files {
		uid, found, err := scanTCP(f, local, remote)
		if err != nil {
			return 0, err
		}
		if found {
			return uid, nil
		}
	}
	return 0, errNotLocal
}

func scanTCP(path string, local, remote netip.AddrPort) (uint32, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil // no IPv6 here
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	sc.Scan() // the header
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 8 {
			continue
		}
		l, err1 := parseProcAddr(fields[1])
		rm, err2 := parseProcAddr(fields[2])
		if err1 != nil || err2 != nil || !sameAddrPort(l, local) || !sameAddrPort(rm, remote) {
			continue
		}
		uid, err := strconv.ParseUint(string(fields[7]), 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("%s: a uid %q: %v", path, fields[7], err)
		}
		return uint32(uid), true, nil
	}
	return 0, false, sc.Err()
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseProcAddr parses /proc/net/tcp's "0100007F:4971": the address as the
// kernel holds it (32-bit words in the host's byte order), the port in hex.
func parseProcAddr(b []byte) (netip.AddrPort, error) {
	a, p, ok := bytes.Cut(b, []byte(":"))
	if !ok {
		return netip.AddrPort{}, errors.New("no port")
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	raw := make([]byte, hex.DecodedLen(len(a)))
	if _, err := hex.Decode(raw, a); err != nil {
		return netip.AddrPort{}, err
	}
	if len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, errors.New("not an address")
	}
	// Each 32-bit word is in host order: turn it into network order.
	out := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(out[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(out)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
