package agentlog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Poller waits for output on every drain's pipe with one goroutine, so
// that an agent whose pipe is empty costs no goroutine: the pipes are in
// an epoll instance of the poller's own (one-shot: a pipe is reported
// once, then again only after its drain emptied it), whose descriptor
// waits in Go's netpoller. A pipe with output gets a goroutine (the
// drain's step) until it is empty again.
type Poller struct {
	epfd int
	file *os.File        // epfd, in the netpoller
	raw  syscall.RawConn // file's

	mu     sync.Mutex
	drains map[uint64]*Drain
	next   uint64
	closed bool

	loop sync.WaitGroup // the wait loop
	wg   sync.WaitGroup // the steps
}

// NewPoller starts a poller; Close stops it.
func NewPoller() (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("agent logs: epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("agent logs: epoll descriptor: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "agent-logs-epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("agent logs: epoll descriptor: %w", err)
	}
	p := &Poller{epfd: epfd, file: f, raw: raw, drains: map[uint64]*Drain{}}
	p.loop.Add(1)
	go p.run()
	return p, nil
}

// Close detaches the drains left (their pipes stay for the next daemon)
// and stops the poller, waiting for its goroutines. Calling it twice is
// safe.
func (p *Poller) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	left := make([]*Drain, 0, len(p.drains))
	for _, d := range p.drains {
		left = append(left, d)
	}
	p.mu.Unlock()
	for _, d := range left {
		d.Detach()
	}
	p.file.Close() // ends run's wait
	p.loop.Wait()
	p.wg.Wait()
}

const oneShot = unix.EPOLLIN | unix.EPOLLONESHOT

// add registers d's pipe, not yet armed: its first step arms it.
func (p *Poller) add(d *Drain) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("agent logs: the poller is closed")
	}
	p.next++
	d.key = p.next
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT}
	putKey(&ev, d.key)
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, d.r, &ev); err != nil {
		return fmt.Errorf("agent logs: epoll_ctl: %w", err)
	}
	p.drains[d.key] = d
	p.wg.Add(1) // the first step, which the caller starts
	return nil
}

// rearm has d's pipe reported once more when it has output (or no writer
// is left).
func (p *Poller) rearm(d *Drain) error {
	ev := unix.EpollEvent{Events: oneShot}
	putKey(&ev, d.key)
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, d.r, &ev)
}

func (p *Poller) remove(d *Drain) {
	p.mu.Lock()
	delete(p.drains, d.key)
	p.mu.Unlock()
	unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.r, nil)
}

// The epoll event's 64 bits of data carry the drain's key (never its
// descriptor: an ended drain's number is soon another file's).
func putKey(ev *unix.EpollEvent, key uint64) {
	ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
}

func keyOf(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// run waits for pipes with output and starts their drains' steps.
func (p *Poller) run() {
	defer p.loop.Done()
	events := make([]unix.EpollEvent, 128)
	for {
		var n int
		var werr error
		err := p.raw.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events, 0)
			if werr == unix.EINTR {
				n, werr = 0, nil
			}
			return n > 0 || werr != nil
		})
		if err != nil || werr != nil {
			return // closed
		}
		for i := range n {
			p.mu.Lock()
			d := p.drains[keyOf(&events[i])]
			p.mu.Unlock()
			if d == nil {
				continue
			}
			d.mu.Lock()
			ready := !d.running && !d.detached && !d.ended
			d.running = ready || d.running
			d.mu.Unlock()
			if ready {
				p.wg.Add(1)
				go d.step()
			}
		}
	}
}
