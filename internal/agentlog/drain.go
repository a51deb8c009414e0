package agentlog

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// PipeSize is the capacity asked for an agent's pipe: what it can write
// while no daemon drains it before its writes block. Where the kernel
// refuses (an ordinary user past fs.pipe-user-pages-soft), the pipe keeps
// the default 64 KiB.
const PipeSize = 1 << 20

// maxKeep bounds the rotated files looked for (the profile's log_keep is
// at most 100).
const maxKeep = 100

// Config says where a log is and how large it may grow.
type Config struct {
	// Path is the log file; the pipe is Path+".pipe" (PipePath), rotated
	// files Path+".1" ...
	Path string
	// Bytes is the size at which the log is rotated; Keep how many rotated
	// files are kept. At most Bytes × (1 + Keep) is on disk.
	Bytes int64
	Keep  int
	Log   *slog.Logger
	// OnEnd, when set, is called once the drain has ended.
	OnEnd func()
}

// PipePath is the named pipe of the log at path.
func PipePath(path string) string { return path + ".pipe" }

// Drain copies an agent's pipe into its log, rotating it. A drain holds
// no goroutine while its pipe is empty: its Poller waits for every pipe
// at once, and gives a drain a goroutine (step) only while there is
// output to copy.
type Drain struct {
	c    Config
	p    *Poller
	key  uint64   // in p.drains and in the epoll events
	r    int      // the pipe's read end, non-blocking; -1 while a held drain is idle
	f    *os.File // the log being written, nil while no step copies
	fd   int      // f's descriptor
	size int64    // f's size: where the next byte goes
	// A held drain (Poller.holdPipe): its pipe is held by the poller's
	// holder in slot, watched as wd, and is the file dev, ino. Parked, it
	// has closed its read end (the poller's sweep parks a drain quiet for
	// a sweep's interval) until the watch says output came.
	held bool
	// Only the running step touches swept, failed and discard (the two
	// flags sit here, by held, so that a Drain fits the 176-byte size
	// class: some 32 KiB at 2,000 agents, issue 22's memory).
	swept    bool
	failed   bool // a write failed: logged once, output dropped since
	wd       int32
	slot     uint32
	dev, ino uint64
	discard  []byte

	mu       sync.Mutex
	running  bool // a step runs, or is about to
	parked   bool // held, and r closed until output comes
	active   bool // a step ran since the last sweep
	detached bool // Detach was called: the step ends the drain
	ended    bool
	hup      bool // not woken for output (a first step, a writer gone): the next step peeks
	// retireHeld: the pipe stays at its path, held, when the drain ends,
	// until Retire (HoldRetire); retirePending: it ended meanwhile, and
	// Retire lets go of it.
	retireHeld, retirePending bool
	done                      chan struct{}
}

// Open makes the named pipe of a new agent's log and starts draining it.
// out is the agent's end (for its stdout and stderr): the caller closes it
// once the process has its copy.
func (p *Poller) Open(c Config) (d *Drain, out *os.File, err error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	pipe := PipePath(c.Path)
	if !p.reuse(pipe) { // an ended agent's, kept (spare.go), else a new one
		// A stale file there (a crash's) is removed only when mkfifo
		// finds one: an unlink that finds nothing cost a path lookup.
		err = unix.Mkfifo(pipe, 0o600)
		if errors.Is(err, unix.EEXIST) {
			if err := os.Remove(pipe); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, err
			}
			err = unix.Mkfifo(pipe, 0o600)
		}
		if err != nil {
			return nil, nil, &os.PathError{Op: "mkfifo", Path: pipe, Err: err}
		}
	}
	// The reader first: opening it non-blocking never waits for a writer.
	r, err := unix.Open(pipe, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(pipe)
		return nil, nil, &os.PathError{Op: "open", Path: pipe, Err: err}
	}
	// The agent's end, read-write and blocking: a raw descriptor, so that
	// Go never makes it non-blocking (the flag is shared with the agent's
	// copy, and a full pipe would fail its writes with EAGAIN).
	fd, err := unix.Open(pipe, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		unix.Close(r)
		os.Remove(pipe)
		return nil, nil, &os.PathError{Op: "open", Path: pipe, Err: err}
	}
	unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, PipeSize) // best effort (see PipeSize)
	out = os.NewFile(uintptr(fd), pipe)
	d, err = p.start(c, r)
	if err != nil {
		out.Close()
		os.Remove(pipe)
		return nil, nil, err
	}
	return d, out, nil
}

// Reattach drains the named pipe of an agent an earlier daemon started.
// An error wrapping os.ErrNotExist means there is none: the agent writes
// its log file itself (started by a kin before issue 21).
func (p *Poller) Reattach(c Config) (*Drain, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	pipe := PipePath(c.Path)
	fi, err := os.Lstat(pipe)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("%s is not a named pipe", pipe)
	}
	r, err := unix.Open(pipe, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: pipe, Err: err}
	}
	return p.start(c, r)
}

func (c *Config) check() error {
	if c.Path == "" || c.Bytes < 1 || c.Keep < 0 || c.Keep > maxKeep {
		return fmt.Errorf("agentlog: bad config: path %q, bytes %d, keep %d", c.Path, c.Bytes, c.Keep)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// start registers the pipe's read end r with the poller and runs a first
// step at once (it copies what already waits, opening the log for it).
func (p *Poller) start(c Config, r int) (*Drain, error) {
	d := &Drain{c: c, p: p, r: r, running: true, active: true, hup: true, done: make(chan struct{})}
	if p.hold != nil {
		p.holdPipe(d, PipePath(c.Path))
	}
	if err := p.add(d); err != nil {
		p.unholdPipe(d)
		unix.Close(r)
		return nil, err
	}
	go d.step()
	return d, nil
}

// Done is closed once the drain has ended: every writer of the pipe (the
// agent and whatever it forked) is gone and everything was copied (the
// pipe retired, unless HoldRetire holds it), or Detach was called.
func (d *Drain) Done() <-chan struct{} { return d.done }

// Detach stops draining and leaves the pipe for the next daemon (kin serve
// --leave-running, or a shutdown): what is in the pipe stays there while
// the agent runs. It waits for the drain to end.
func (d *Drain) Detach() {
	d.mu.Lock()
	d.detached = true
	idle := !d.running && !d.ended
	d.mu.Unlock()
	if idle {
		d.end() // else the running step ends it
	}
	<-d.done
}

// step copies what waits in the pipe into the log until the pipe is empty
// (then it waits in the poller again), no writer is left (the end), or
// Detach was called.
func (d *Drain) step() {
	defer d.p.wg.Done()
	full := false
	d.mu.Lock()
	hup := d.hup
	d.hup = false
	d.mu.Unlock()
	for {
		if d.stopping() {
			d.end()
			return
		}
		if d.r < 0 {
			if err := d.reopen(); err != nil {
				d.c.Log.Error("agent log: reopen the pipe", "path", d.c.Path, "err", err)
				d.end()
				return
			}
		}
		if hup && d.f == nil && !full {
			// The log file is opened (made, the first time) only once a
			// byte waits to go into it: an agent that writes nothing has
			// no log file, its spawn makes one inode in logs/, not two (on
			// this ext4 without a journal each new inode there scans past
			// the inodes the ended agents' pipes freed), and a drain woken
			// for its last writer's close ends without opening the log (a
			// cascade's thousand ends each saved an open, two fstats and a
			// close). peek, not poll: poll shows no hang-up on a pipe
			// opened again after its writer left (a parked drain's).
			hup = false
			n, err := d.p.peek(d.r)
			switch {
			case err == nil && n == 0:
				d.drained()
				return
			case err == unix.EAGAIN:
				if d.wait() {
					return
				}
				continue
			case err == unix.EINTR:
				continue
			}
			// A byte waits (or peek could not tell): copy as always.
		}
		if d.f == nil || full {
			if err := d.open(full); err != nil {
				d.fail(err)
			}
			full = false
		}
		// splice moves the bytes from the pipe into the file in the
		// kernel: a byte is in one or the other, so even a kill -9 of the
		// daemon loses none of the agent's output.
		var n int
		var err error
		switch {
		case d.f != nil && d.size >= d.c.Bytes:
			// A full log is rotated only once a byte waits to go into it:
			// output that ends at the size stays in the log (with
			// log_keep 0 an eager rotation left it empty).
			full, err = waiting(d.r)
			if err == nil && full {
				continue
			}
		case d.f == nil: // the log cannot be written: drain, drop
			if d.discard == nil {
				d.discard = make([]byte, 64<<10)
			}
			n, err = unix.Read(d.r, d.discard)
		default:
			var moved int64
			moved, err = unix.Splice(d.r, nil, d.fd, &d.size, int(d.c.Bytes-d.size), unix.SPLICE_F_NONBLOCK)
			n = int(moved)
		}
		switch {
		case err == unix.EAGAIN:
			if d.wait() {
				return
			}
		case err == nil && n == 0:
			d.drained()
			return
		case err == nil, err == unix.EINTR:
		case d.f != nil:
			// The file refused (a full disk): drop output until it takes
			// some again, rather than block the agent.
			d.fail(err)
			d.f.Close()
			d.f = nil
		default:
			d.c.Log.Error("agent log: read", "path", d.c.Path, "err", err)
			d.end()
			return
		}
	}
}

// drained ends a drain whose pipe has no writer left and is empty: no
// writer will ever come (nobody else opens the pipe), so the pipe is let
// go of and kept for another agent or removed, at once or, while
// HoldRetire holds it, at Retire; unless Detach came meanwhile.
func (d *Drain) drained() {
	if !d.stopping() && !d.retireLater() {
		// Kept for another agent (spare.go) once this drain holds it no
		// more, if no one else does.
		d.release()
		d.p.retire(PipePath(d.c.Path))
	}
	d.end()
}

// retireLater reports whether the ended drain's release and its pipe's
// retire wait for Retire (HoldRetire), noting that they do.
func (d *Drain) retireLater() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retirePending = d.retireHeld
	return d.retireHeld
}

// HoldRetire keeps d's pipe, and d's hold of it, when the drain ends
// (Done), until Retire: its end then waits only for its output to be
// copied, not for the pipe to be let go of (release: its epoll
// registration, its holder's slot and inotify watch, its read end) and
// kept for another agent or removed (retire: an open and a rename,
// serialised on the directory). A cancellation holds its agents' pipes
// before it kills them and retires them together once their ends are
// recorded: a thousand releases and renames off the way from the kill to
// the record, where they took the CPU from the dying processes.
func (d *Drain) HoldRetire() {
	d.mu.Lock()
	d.retireHeld = true
	d.mu.Unlock()
}

// Retire ends HoldRetire: a drain that ended meanwhile lets go of its
// pipe, which is kept or removed, now; one that has not ended does when it
// ends.
func (d *Drain) Retire() {
	if d.takePending() {
		d.p.releaseLate(d)
		d.p.retire(PipePath(d.c.Path))
	}
}

// takePending ends HoldRetire, reporting whether the drain ended
// meanwhile without letting go of its pipe: the caller then does, once.
// A drain that saw the hold but has not ended yet lets go of its pipe
// itself when it ends (end), the hold being over.
func (d *Drain) takePending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retireHeld = false
	if d.retirePending && d.ended {
		d.retirePending = false
		return true
	}
	return false
}

func (d *Drain) stopping() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.detached
}

// wait hands the drain back to the poller until its pipe has output:
// false when Detach came meanwhile (the step goes on, to end it). The log
// file is closed meanwhile: it is open only while a step copies.
func (d *Drain) wait() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.detached {
		return false
	}
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	if err := d.p.rearm(d); err != nil {
		d.c.Log.Error("agent log: poll", "path", d.c.Path, "err", err)
		return false
	}
	d.running = false
	return true
}

// end ends the drain once: out of the poller, its descriptors closed, Done
// closed, then OnEnd called.
//
// A drain that ended held (drained under HoldRetire) closes its read end
// now, which costs little and holds no descriptor of the daemon's for
// every agent of a large cascade until its record, and leaves the rest of
// its release (its holder's slot and watch) and its pipe's retire to
// Retire; if Retire came since drained saw the hold, it does both itself.
func (d *Drain) end() {
	d.mu.Lock()
	if d.ended {
		d.mu.Unlock()
		return
	}
	d.ended = true
	pending, held := d.retirePending, d.retireHeld
	switch {
	case pending && held:
		// Under d.mu: a Retire that finds the drain ended finds this done.
		d.closeReadEnd()
	case pending:
		d.retirePending = false // Retire came meanwhile: it is ours
	}
	d.mu.Unlock()
	switch {
	case !pending:
		d.release()
	case held: // the rest at Retire (or the poller's Close)
	default:
		d.release()
		d.p.retire(PipePath(d.c.Path))
	}
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	close(d.done)
	if d.c.OnEnd != nil {
		d.c.OnEnd()
	}
}

// closeReadEnd takes d's read end, while it has one (not parked, not
// ended held), out of the epoll set and closes it: a held pipe stays open
// in the holder.
func (d *Drain) closeReadEnd() {
	if d.r >= 0 {
		unix.EpollCtl(d.p.epfd, unix.EPOLL_CTL_DEL, d.r, nil)
		unix.Close(d.r)
		d.r = -1
	}
}

// release lets go of d's pipe: its place in the poller, its holder's slot
// and watch, its read end. Only d's step, its end, or, for a drain that
// ended held, Retire or the poller's Close calls it, once.
func (d *Drain) release() {
	d.p.remove(d)
	d.p.unholdPipe(d)
	d.closeReadEnd()
}

// reopen opens a held drain's pipe again by its path, refusing any other
// file found there.
func (d *Drain) reopen() error {
	pipe := PipePath(d.c.Path)
	fd, err := unix.Open(pipe, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: pipe, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: pipe, Err: err}
	}
	if uint64(st.Dev) != d.dev || st.Ino != d.ino {
		unix.Close(fd)
		return fmt.Errorf("%s is no longer the agent's pipe", pipe)
	}
	// Back in the epoll set, not armed: wait arms it.
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT}
	putKey(&ev, d.key)
	if err := unix.EpollCtl(d.p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return fmt.Errorf("agent logs: epoll_ctl: %w", err)
	}
	d.r = fd
	return nil
}

// fail logs the first failure to write; the output is dropped (the pipe
// is still drained: an agent must not block because its log cannot grow).
func (d *Drain) fail(err error) {
	if !d.failed {
		d.c.Log.Error("agent log: write failed; its output is dropped until a write succeeds", "path", d.c.Path, "err", err)
	}
	d.failed = true
}

// waiting reports, without reading the pipe, whether a byte waits in it.
// Neither a byte nor an error: no writer is left and it is empty (the end
// of the output); EAGAIN: nothing waits yet.
func waiting(fd int) (bool, error) {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(p, 0); err != nil {
		return false, err
	}
	switch {
	case p[0].Revents&unix.POLLIN != 0:
		return true, nil
	case p[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0:
		return false, nil
	}
	return false, unix.EAGAIN
}

// open opens the log to append to; with full, it rotates it first when
// it is full.
func (d *Drain) open(full bool) error {
	if d.f == nil {
		// Not O_APPEND, which splice refuses: the drain is the only
		// writer, at its own offset.
		f, err := os.OpenFile(d.c.Path, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		d.f, d.fd, d.size = f, int(f.Fd()), fi.Size()
		if !full || d.size < d.c.Bytes {
			d.failed = false
			return nil
		}
	}
	d.f.Close()
	d.f = nil
	if err := rotate(d.c.Path, d.c.Keep, !d.swept); err != nil {
		return err
	}
	d.swept = true
	f, err := os.OpenFile(d.c.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	d.f, d.fd, d.size, d.failed = f, int(f.Fd()), 0, false
	return nil
}

// rotate shifts path.K-1 to path.K ... path to path.1, dropping the oldest
// (with keep 0, path itself). sweep also removes files past keep (a profile
// that kept more before).
func rotate(path string, keep int, sweep bool) error {
	if sweep {
		for i := keep + 1; i <= maxKeep+1; i++ {
			os.Remove(rotated(path, i))
		}
	}
	if keep == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.Remove(rotated(path, keep)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(path, i), rotated(path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Rename(path, rotated(path, 1))
}

func rotated(path string, i int) string { return fmt.Sprintf("%s.%d", path, i) }
