package agentsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// mux is one net.Listener over every agent's listening socket, so that
// one http.Server.Serve loop (one goroutine) accepts for them all, however
// many agents run: the listening sockets are registered in an epoll
// instance of its own, whose descriptor waits in Go's netpoller like any
// socket (an epoll descriptor is readable while one of its sockets is
// ready), so no OS thread is parked for it.
//
// Accept takes at most one connection from each ready socket per round of
// epoll_wait: a socket flooded with connections cannot delay another's.
// A connection refused at once (its agent is gone, or holds MaxConns open)
// is closed here, before it costs a net.Conn.
type mux struct {
	ss     *Sockets
	epfd   int
	file   *os.File        // epfd, in the netpoller
	raw    syscall.RawConn // file's
	events []unix.EpollEvent
	ready  []uint64 // keys of the sockets found ready, not yet accepted from
	busy   bool     // the last Accept returned a connection without waiting

	// mu guards epfd against Close: once closed, its number may be
	// another file's.
	mu        sync.RWMutex
	isClosed  bool
	closeOnce sync.Once
	closed    chan struct{}
}

// readyBatch is how many ready sockets one epoll_wait returns at most.
const readyBatch = 128

func newMux(ss *Sockets) (*mux, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("agent sockets: epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("agent sockets: epoll descriptor: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "agent-sockets-epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("agent sockets: epoll descriptor: %w", err)
	}
	return &mux{ss: ss, epfd: epfd, file: f, raw: raw,
		events: make([]unix.EpollEvent, readyBatch), closed: make(chan struct{})}, nil
}

// add starts watching socket s (its listening descriptor fd) for
// connections.
func (m *mux) add(fd int, key uint64) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	putKey(&ev, key)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.isClosed {
		return net.ErrClosed
	}
	return unix.EpollCtl(m.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
}

// remove stops watching fd. Closing fd would do it too, unless a child
// forked meanwhile still holds a copy of it until its exec.
func (m *mux) remove(fd int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.isClosed {
		unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

// The epoll event's 64 bits of data carry the socket's key (never its
// descriptor: a closed socket's number is soon another file's).
func putKey(ev *unix.EpollEvent, key uint64) {
	ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
}

func keyOf(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// Accept returns the next connection on any agent's socket. Only Serve's
// one goroutine calls it.
func (m *mux) Accept() (net.Conn, error) {
	if m.busy {
		// The last connection's goroutine is the scheduler's next to run
		// on this P, and is pushed back by the next one this loop
		// starts: under a flood of connections that would leave every
		// other agent's waiting for the loop's time slice to end. Let them
		// run first.
		goruntime.Gosched()
	}
	m.busy = false
	for {
		for len(m.ready) > 0 {
			key := m.ready[0]
			m.ready = m.ready[1:]
			s := m.ss.byKey(key)
			if s == nil {
				continue // closed since epoll_wait
			}
			c, err := s.accept()
			if err != nil {
				return nil, err
			}
			if c != nil {
				m.busy = true
				return c, nil
			}
		}
		if err := m.wait(); err != nil {
			return nil, err
		}
	}
}

// wait fills m.ready with the sockets that have a connection waiting,
// parking in the netpoller until one has.
func (m *mux) wait() error {
	var n int
	var werr error
	err := m.raw.Read(func(fd uintptr) bool {
		n, werr = unix.EpollWait(int(fd), m.events, 0)
		if werr == unix.EINTR {
			n, werr = 0, nil
		}
		return n > 0 || werr != nil
	})
	select {
	case <-m.closed:
		return net.ErrClosed
	default:
	}
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("agent sockets: epoll_wait: %w", werr)
	}
	for i := range n {
		m.ready = append(m.ready, keyOf(&m.events[i]))
	}
	return nil
}

// Close stops Accept (Serve then returns); the agents' sockets are
// closed by their own Close.
func (m *mux) Close() error {
	m.closeOnce.Do(func() {
		close(m.closed)
		m.mu.Lock()
		m.isClosed = true
		m.mu.Unlock()
		m.file.Close()
	})
	return nil
}

// Addr is the directory of the agents' sockets.
func (m *mux) Addr() net.Addr { return &net.UnixAddr{Name: m.ss.dir, Net: "unix"} }

// acceptError is an accept4 failure the server should retry after a
// pause (out of descriptors or memory) rather than stop serving on.
type acceptError struct{ err error }

func (e acceptError) Error() string   { return "agent socket: accept: " + e.err.Error() }
func (e acceptError) Unwrap() error   { return e.err }
func (e acceptError) Timeout() bool   { return false }
func (e acceptError) Temporary() bool { return true } // http.Server backs off and retries

// acceptFD takes one waiting connection off listening socket fd: (-1, nil)
// when none is waiting any more.
func acceptFD(fd int) (int, error) {
	for {
		// Blocking, so that net.FileConn's copy is the only one in the
		// netpoller (it sets its copy, and with it this description,
		// non-blocking).
		nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		switch {
		case err == nil:
			return nfd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		case errors.Is(err, unix.EAGAIN):
			return -1, nil
		}
		return -1, acceptError{err}
	}
}

// fileConn makes a net.Conn of accepted descriptor fd (which it takes).
func fileConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("agent socket: accepted a %T", c)
	}
	return uc, nil
}
