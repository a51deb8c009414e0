package fleettest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile serializes choosing a subnet and claiming it (the bridge's
// address) among test binaries: the check and the claim are one step.
const lockFile = "/run/kinfleet.lock"

// netnsDir is where `ip netns add` mounts named namespaces.
const netnsDir = "/run/netns"

// makeBridge picks a /24 of 10.0.0.0/8 no interface or route of the root
// namespace overlaps, makes the bridge kbTAG and gives it the subnet's
// first address.
func (f *Fleet) makeBridge() error {
	f.Bridge = "kb" + f.Tag
	if len(f.Bridge) > unix.IFNAMSIZ-1 {
		return fmt.Errorf("bridge name %s is longer than %d bytes", f.Bridge, unix.IFNAMSIZ-1)
	}
	lock, err := os.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close() // and so unlocked
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %v", lockFile, err)
	}
	used, err := usedPrefixes()
	if err != nil {
		return err
	}
	h := fnv.New32a()
	fmt.Fprint(h, f.Tag)
	seed := h.Sum32()
	for try := range uint32(4096) {
		n := (seed + try*7919) % (1 << 16) // 10.X.Y.0/24: 16 bits to choose
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 0}), 24)
		if n>>8 == 0 || overlapsAny(p, used) { // 10.0.*: too often someone's
			continue
		}
		f.Subnet, f.Gateway = p, nthAddr(p, 1)
		if err := ipCmd("link", "add", f.Bridge, "type", "bridge"); err != nil {
			return err
		}
		if err := ipCmd("addr", "add", netip.PrefixFrom(f.Gateway, 24).String(), "dev", f.Bridge); err != nil {
			return err
		}
		return ipCmd("link", "set", f.Bridge, "up")
	}
	return errors.New("no free /24 in 10.0.0.0/8")
}

// makeNetwork makes the host's namespace and its veth pair: eth0 inside,
// with the host's address and a default route through the bridge, and
// h.Veth on the bridge.
func (h *Host) makeNetwork() error {
	f := h.fleet
	if len(h.Veth) > unix.IFNAMSIZ-1 {
		return fmt.Errorf("veth name %s is longer than %d bytes", h.Veth, unix.IFNAMSIZ-1)
	}
	steps := [][]string{
		{"netns", "add", h.Netns},
		{"link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
		{"link", "set", h.Veth, "master", f.Bridge, "up"},
		{"-n", h.Netns, "addr", "add", netip.PrefixFrom(h.IP, 24).String(), "dev", "eth0"},
		{"-n", h.Netns, "link", "set", "lo", "up"},
		{"-n", h.Netns, "link", "set", "eth0", "up"},
		{"-n", h.Netns, "route", "add", "default", "via", f.Gateway.String()},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// removeNetwork removes the veth pair (both ends at once: a namespace's
// own devices go only once the kernel frees it, later) and the namespace.
func (h *Host) removeNetwork() error {
	var errs []error
	if err := ipCmd("link", "del", h.Veth); err != nil && !notFound(err) {
		errs = append(errs, err)
	}
	if _, err := os.Stat(netnsDir + "/" + h.Netns); err == nil {
		if err := ipCmd("netns", "del", h.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ipCmd runs ip with args, its output in the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// notFound says whether an ip error is about a device that is not there.
func notFound(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Cannot find device") || strings.Contains(s, "does not exist")
}

// nthAddr is the n-th address of p.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) + uint32(n)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}

// usedPrefixes are the IPv4 prefixes of the root namespace's addresses and
// routes.
func usedPrefixes() ([]netip.Prefix, error) {
	var used []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if p, err := netip.ParsePrefix(n.String()); err == nil && p.Addr().Is4() {
				used = append(used, p.Masked())
			}
		}
	}
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(fl[1], 16, 32)
		mask, err2 := strconv.ParseUint(fl[7], 16, 32)
		if err1 != nil || err2 != nil || mask == 0 { // the default route overlaps everything
			continue
		}
		var d, m [4]byte
		binary.LittleEndian.PutUint32(d[:], uint32(dst))
		binary.LittleEndian.PutUint32(m[:], uint32(mask))
		bits, _ := net.IPMask(m[:]).Size()
		used = append(used, netip.PrefixFrom(netip.AddrFrom4(d), bits).Masked())
	}
	return used, sc.Err()
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if p.Overlaps(u) {
			return true
		}
	}
	return false
}

// Dial connects to addr over TCP from inside the host's network
// namespace, as a program on that host would (the socket is made there and
// stays there).
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The socket is made on this thread, moved into the namespace
		// for the call; if it cannot be moved back it is never unlocked,
		// and so ends with this goroutine.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer home.Close()
		ns, err := os.Open(netnsDir + "/" + h.Netns)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("enter %s: %v", h.Netns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// CanDial says whether a TCP connection to addr from the host's namespace
// succeeds within ctx (and closes it), and why not.
func (h *Host) CanDial(ctx context.Context, addr string) error {
	c, err := h.Dial(ctx, addr)
	if err != nil {
		return err
	}
	return c.Close()
}
