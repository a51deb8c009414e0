package agentlog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poller waits for output on every drain's pipe with one goroutine, so
// that an agent whose pipe is empty costs no goroutine: the pipes are in
// an epoll instance of the poller's own (one-shot: a pipe is reported
// once, then again only after its drain emptied it), whose descriptor
// waits in Go's netpoller. A pipe with output gets a goroutine (the
// drain's step) until it is empty again.
//
// Where io_uring and inotify allow, a drain holds no descriptor at all
// while its pipe is empty: the pipe is held open by the holder (holder.go),
// an inotify watch on it says when output comes (a write, or a writer's
// close), and the drain's step opens it by its path while it copies.
// Elsewhere (or when the holder or the watches are full) a drain keeps its
// pipe's read end open in the epoll instance. Either way the log file is
// open only while a step copies into it.
type Poller struct {
	epfd int
	file *os.File        // epfd, in the netpoller
	raw  syscall.RawConn // file's

	hold *holder // nil: every drain keeps its read end open
	ino  int     // the inotify instance, when hold is set: key 0 in the epoll set

	sweepNs atomic.Int64 // the sweep's interval (sweepEvery; tests shorten it)

	mu     sync.Mutex
	wds    map[int32]*Drain // held drains by watch
	drains map[uint64]*Drain
	next   uint64
	closed bool

	loop sync.WaitGroup // the wait loop
	wg   sync.WaitGroup // the steps

	// pauseMu guards resumed: while not nil, the loop hands no pipe to
	// its drain (Pause) until it is closed.
	pauseMu sync.Mutex
	resumed chan struct{}

	// peekMu guards peekR and peekW, a pipe of the poller's own that
	// peek tees into (see peek); -1 where none could be made.
	peekMu       sync.Mutex
	peekR, peekW int

	// lateMu guards tornDown, which Close sets (holding lateMu, so after
	// any Retire's late release in flight: releaseLate) before it ends the
	// epoll instance, the inotify instance and the holder: a late release
	// after that has nothing left to let go of.
	lateMu   sync.RWMutex
	tornDown bool

	spareMu      sync.Mutex
	spares       map[string][]string // kept pipes by directory (spare.go)
	sparesClosed bool
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
	p := &Poller{epfd: epfd, file: f, raw: raw, drains: map[uint64]*Drain{}, wds: map[int32]*Drain{}, peekR: -1, peekW: -1, spares: map[string][]string{}}
	var pp [2]int
	if err := unix.Pipe2(pp[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err == nil {
		p.peekR, p.peekW = pp[0], pp[1]
	}
	p.sweepNs.Store(int64(sweepEvery))
	p.setupHolder()
	p.loop.Add(1)
	go p.run()
	return p, nil
}

// setupHolder makes the pipe holder and its inotify instance; without
// either the drains keep their read ends (best effort: the limit it lifts
// is the number of agents, not their correctness).
func (p *Poller) setupHolder() {
	h, err := newHolder()
	if err != nil {
		return
	}
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		h.close()
		return
	}
	// Key 0 (drains' keys start at 1), level-triggered: run reads it.
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, ino, &ev); err != nil {
		unix.Close(ino)
		h.close()
		return
	}
	p.hold, p.ino = h, ino
}

// Holding reports whether idle drains hold no descriptor (the pipe holder
// works here).
func (p *Poller) Holding() bool { return p.hold != nil }

// watchEvents are what wake a held drain: output, or a writer gone.
const watchEvents = unix.IN_MODIFY | unix.IN_CLOSE_WRITE

// holdPipe gives d's pipe at path (read end d.r) to the holder and
// watches it, so that the sweep may park d; where either is full, d just
// keeps its read end.
func (p *Poller) holdPipe(d *Drain, path string) {
	var st unix.Stat_t
	if err := unix.Fstat(d.r, &st); err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	wd, err := unix.InotifyAddWatch(p.ino, path, watchEvents|unix.IN_DONT_FOLLOW)
	if err != nil {
		return
	}
	if p.wds[int32(wd)] != nil {
		return // the same pipe twice (a second Reattach): the first one parks
	}
	slot, err := p.hold.hold(d.r)
	if err != nil {
		unix.InotifyRmWatch(p.ino, uint32(wd))
		return
	}
	d.held, d.wd, d.slot, d.dev, d.ino = true, int32(wd), slot, uint64(st.Dev), st.Ino
	p.wds[d.wd] = d
}

// unholdPipe undoes holdPipe.
func (p *Poller) unholdPipe(d *Drain) {
	if !d.held {
		return
	}
	p.mu.Lock()
	delete(p.wds, d.wd)
	unix.InotifyRmWatch(p.ino, uint32(d.wd))
	p.mu.Unlock()
	p.hold.release(d.slot)
	d.held = false
}

// sweepEvery is how often the poller parks the held drains that had no
// output since its last sweep, and looks into the parked ones' pipes.
const sweepEvery = 5 * time.Second

// sweep parks the held drains quiet since the last sweep (their read end
// closed: the holder keeps the pipe, the watch wakes them), and wakes a
// parked one whose pipe has output nobody was told of. A write is reported
// (IN_MODIFY) only once it has returned: a writer stopped or frozen in the
// middle of a write larger than the pipe would otherwise wait forever.
func (p *Poller) sweep() {
	p.mu.Lock()
	held := make([]*Drain, 0, len(p.wds))
	for _, d := range p.wds {
		held = append(held, d)
	}
	p.mu.Unlock()
	for _, d := range held {
		d.mu.Lock()
		switch {
		case d.running || d.ended || d.detached:
		case d.parked:
			if pending(PipePath(d.c.Path)) {
				p.wakeLocked(d)
			}
		case d.active:
			d.active = false
		default:
			d.closeReadEnd()
			d.parked = true
		}
		d.mu.Unlock()
	}
}

// pending reports whether bytes wait in the pipe at path.
func pending(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ)
	return err == nil && n > 0
}

// readWatches reads the events on the held pipes and wakes their drains.
func (p *Poller) readWatches(buf []byte) {
	for {
		n, err := unix.Read(p.ino, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return // EAGAIN: all read
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				// Events were lost: every held drain looks.
				p.mu.Lock()
				all := make([]*Drain, 0, len(p.wds))
				for _, d := range p.wds {
					all = append(all, d)
				}
				p.mu.Unlock()
				for _, d := range all {
					p.wake(d)
				}
				continue
			}
			p.mu.Lock()
			d := p.wds[ev.Wd]
			p.mu.Unlock()
			if d != nil {
				d.mu.Lock()
				if !d.running {
					d.hup = ev.Mask&unix.IN_CLOSE_WRITE != 0 && ev.Mask&unix.IN_MODIFY == 0
				}
				p.wakeLocked(d)
				d.mu.Unlock()
			}
		}
	}
}

// wake runs a step of a parked drain (its step opens the pipe again); an
// unparked one's epoll registration reports the output.
func (p *Poller) wake(d *Drain) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p.wakeLocked(d)
}

func (p *Poller) wakeLocked(d *Drain) {
	switch {
	case d.ended || d.detached:
	case !d.parked:
		d.active = true // not parked by the next sweep
	case !d.running:
		d.parked, d.running, d.active = false, true, true
		p.wg.Add(1)
		go d.step()
	}
}

// Pause holds back the drains' steps until resume is called (at most one
// batch of the pipes ready when it was called still gets its steps): their
// output and their ends wait in their pipes meanwhile. A shutdown pauses
// the drains while it sends its agents SIGTERM: each agent dead of it was
// a step (its log's end, its pipe kept or removed) taking the CPU from the
// signals of the subtrees not yet signalled. resume may be called more
// than once; Close resumes.
func (p *Poller) Pause() (resume func()) {
	p.pauseMu.Lock()
	defer p.pauseMu.Unlock()
	if p.resumed != nil {
		return func() {} // paused already: its own resume resumes
	}
	ch := make(chan struct{})
	p.resumed = ch
	return sync.OnceFunc(func() { p.resume(ch) })
}

func (p *Poller) resume(ch chan struct{}) {
	p.pauseMu.Lock()
	defer p.pauseMu.Unlock()
	if p.resumed == ch {
		close(ch)
		p.resumed = nil
	}
}

// waitResumed waits while the poller is paused.
func (p *Poller) waitResumed() {
	p.pauseMu.Lock()
	ch := p.resumed
	p.pauseMu.Unlock()
	if ch != nil {
		<-ch
	}
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
	p.pauseMu.Lock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
	p.pauseMu.Unlock()
	for _, d := range left {
		d.Detach()
		// Ended under HoldRetire, its Retire not come: its pipe is let go
		// of here, and kept for the next daemon (no drain reads it).
		if d.takePending() {
			d.release()
		}
	}
	p.lateMu.Lock() // a Retire's release in flight ends first
	p.tornDown = true
	p.lateMu.Unlock()
	p.file.Close() // ends run's wait
	p.loop.Wait()
	p.wg.Wait()
	p.closeSpares()
	if p.hold != nil {
		unix.Close(p.ino)
		p.hold.close()
	}
	if p.peekR >= 0 {
		unix.Close(p.peekR)
		unix.Close(p.peekW)
	}
}

// errNoPeek: the poller has no pipe to peek with.
var errNoPeek = errors.New("agent logs: no pipe to peek with")

// peek says, without taking anything out of the pipe r, whether a byte
// waits in it (1), or no writer is left and it is empty (0, nil: the end
// of the output), or it is empty with a writer left (unix.EAGAIN). It
// tees (tee(2), which copies without consuming) at most one byte into
// the poller's own pipe and reads it back from there, under peekMu. Unlike
// poll(2) it tells the end of a named pipe opened again after its last
// writer closed (a parked drain's), which poll reports as merely empty.
func (p *Poller) peek(r int) (int64, error) {
	if p.peekW < 0 {
		return 0, errNoPeek
	}
	p.peekMu.Lock()
	defer p.peekMu.Unlock()
	n, err := unix.Tee(r, p.peekW, 1, unix.SPLICE_F_NONBLOCK)
	if n > 0 {
		var b [1]byte
		unix.Read(p.peekR, b[:]) // keep it empty: the next peek's byte must fit
	}
	return n, err
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

// remove takes d out of the poller's drains. Its read end is
// closeReadEnd's to take out of the epoll set, and a held drain's watch and
// holder slot are unholdPipe's to release (once: the slot goes back to the
// free list, and a second release would hand it to two drains).
func (p *Poller) remove(d *Drain) {
	p.mu.Lock()
	delete(p.drains, d.key)
	p.mu.Unlock()
}

// releaseLate is d.release for a drain that ended under HoldRetire, at its
// Retire. Its read end was closed at its end; once Close has ended the
// poller's instances nothing is left to let go of (their descriptors'
// numbers may be another file's by then).
func (p *Poller) releaseLate(d *Drain) {
	p.lateMu.RLock()
	defer p.lateMu.RUnlock()
	if !p.tornDown {
		d.release()
	}
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
	var watchBuf []byte
	nextSweep := time.Now().Add(time.Duration(p.sweepNs.Load()))
	for {
		if p.hold != nil {
			if time.Now().After(nextSweep) {
				p.sweep()
				nextSweep = time.Now().Add(time.Duration(p.sweepNs.Load()))
			}
			p.file.SetReadDeadline(nextSweep)
		}
		var n int
		var werr error
		err := p.raw.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events, 0)
			if werr == unix.EINTR {
				n, werr = 0, nil
			}
			return n > 0 || werr != nil
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // the sweep is due
		}
		if err != nil || werr != nil {
			return // closed
		}
		p.waitResumed()
		for i := range n {
			if p.hold != nil && keyOf(&events[i]) == 0 {
				if watchBuf == nil {
					watchBuf = make([]byte, 16<<10)
				}
				p.readWatches(watchBuf)
				continue
			}
			p.mu.Lock()
			d := p.drains[keyOf(&events[i])]
			p.mu.Unlock()
			if d == nil {
				continue
			}
			d.mu.Lock()
			ready := !d.running && !d.detached && !d.ended && !d.parked
			d.running = ready || d.running
			d.active = true
			if ready {
				// No writer left, nothing to read: the step peeks
				// before it opens the log.
				d.hup = events[i].Events&unix.EPOLLHUP != 0 && events[i].Events&unix.EPOLLIN == 0
			}
			d.mu.Unlock()
			if ready {
				p.wg.Add(1)
				go d.step()
			}
		}
	}
}
