package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The kernel's socket diagnostics (sock_diag(7), NETLINK_SOCK_DIAG): one
// request names a TCP connection by its four addresses and the kernel
// answers with that one socket, its owner's uid among its fields. Reading
// /proc/net/tcp instead costs a line per socket of the network namespace
// (thousands on a busy machine: a tenth of the gateway benchmark's CPU).

// errNoDiag: the kernel (or a sandbox around the daemon) refuses socket
// diagnostics; the caller reads /proc/net/tcp.
var errNoDiag = errors.New("socket diagnostics unavailable")

// diagOff is set once socket diagnostics failed for want of support, so
// that later lookups go to /proc at once.
var diagOff atomic.Bool

// Sizes and offsets of struct inet_diag_req_v2 and inet_diag_msg
// (linux/inet_diag.h).
const (
	nlmsgHdrLen     = 16
	inetDiagReqLen  = 56 // family, protocol, ext, pad, states, inet_diag_sockid (48)
	inetDiagMsgLen  = 72 // family, state, timer, retrans, sockid (48), expires, rqueue, wqueue, uid, inode
	inetDiagUIDOff  = 64
	inetDiagNoCook  = ^uint32(0)
	nlmsgError      = 2 // NLMSG_ERROR
	nlmsgDone       = 3 // NLMSG_DONE
	diagAllStates   = ^uint32(0)
	diagRecvBufSize = 8192
)

// diagTCPUID asks the kernel for the TCP socket of this network namespace
// whose local address is local and remote address remote, and returns its
// owner's uid; errNotLocal when there is none, errNoDiag when the kernel
// will not say.
func diagTCPUID(local, remote netip.AddrPort) (uint32, error) {
	if diagOff.Load() {
		return 0, errNoDiag
	}
	l, r := local.Addr().Unmap(), remote.Addr().Unmap()
	families := []uint8{unix.AF_INET6}
	if l.Is4() && r.Is4() {
		// An IPv4 connection, or a dual-stack socket's v4-mapped one,
		// which the kernel finds in the IPv4 table either way.
		families = []uint8{unix.AF_INET}
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			diagOff.Store(true)
			return 0, errNoDiag
		}
		return 0, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	// The kernel answers at once; a bound on the wait all the same.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return 0, os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("bind", err)
	}
	for _, fam := range families {
		uid, err := diagOne(fd, fam, l, r, local.Port(), remote.Port())
		if !errors.Is(err, errNotLocal) {
			return uid, err
		}
	}
	return 0, errNotLocal
}

// diagOne sends one inet_diag request for family fam and reads its answer.
func diagOne(fd int, fam uint8, local, remote netip.Addr, lport, rport uint16) (uint32, error) {
	req := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // seq
	b := req[nlmsgHdrLen:]
	b[0], b[1] = fam, unix.IPPROTO_TCP
	ne.PutUint32(b[4:], diagAllStates)
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], lport)
	binary.BigEndian.PutUint16(id[2:], rport)
	putDiagAddr(id[4:20], local, fam)
	putDiagAddr(id[20:36], remote, fam)
	// id[36:40] the interface: any; the cookie: none to check.
	ne.PutUint32(id[40:], inetDiagNoCook)
	ne.PutUint32(id[44:], inetDiagNoCook)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("sendto", err)
	}
	buf := make([]byte, diagRecvBufSize)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, os.NewSyscallError("recvfrom", err)
		}
		msgs := buf[:n]
		for len(msgs) >= nlmsgHdrLen {
			mlen := int(ne.Uint32(msgs[0:]))
			typ := ne.Uint16(msgs[4:])
			if mlen < nlmsgHdrLen || mlen > len(msgs) {
				return 0, fmt.Errorf("sock_diag: a message of %d bytes in %d", mlen, len(msgs))
			}
			body := msgs[nlmsgHdrLen:mlen]
			switch typ {
			case nlmsgError:
				if len(body) < 4 {
					return 0, errors.New("sock_diag: a short error")
				}
				errno := -int32(ne.Uint32(body))
				switch unix.Errno(errno) {
				case 0:
				case unix.ENOENT:
					return 0, errNotLocal
				case unix.EPERM, unix.EACCES, unix.EOPNOTSUPP, unix.EINVAL:
					diagOff.Store(true)
					return 0, errNoDiag
				default:
					return 0, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
				}
				return 0, errNotLocal
			case nlmsgDone:
				return 0, errNotLocal
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(body) < inetDiagMsgLen {
					return 0, fmt.Errorf("sock_diag: an answer of %d bytes", len(body))
				}
				return ne.Uint32(body[inetDiagUIDOff:]), nil
			}
			mlen = (mlen + 3) &^ 3 // NLMSG_ALIGN
			if mlen > len(msgs) {
				break
			}
			msgs = msgs[mlen:]
		}
	}
}

// putDiagAddr writes a into an inet_diag_sockid address field: the four
// bytes of an IPv4 address first, an IPv6 (or v4-mapped) one whole.
func putDiagAddr(dst []byte, a netip.Addr, fam uint8) {
	if fam == unix.AF_INET {
		v4 := a.As4()
		copy(dst, v4[:])
		return
	}
	v6 := a.As16()
	copy(dst, v6[:])
}
