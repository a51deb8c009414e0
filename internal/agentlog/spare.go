package agentlog

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// An ended agent's pipe is kept, renamed, for the next agent's Open in
// the same directory to rename into place, instead of being removed and
// another one made: on ext4 without a journal (the machines kin is
// measured on; see ctxfs.SpreadSubdirs) a new inode in a directory whose
// block group freed many recently costs up to a millisecond of CPU, and
// every agent's end freed one in the logs' directory; a rename allocates
// and frees nothing. A pipe is kept only once its drain read end of file
// and no one else holds it open for reading (unread): no writer is left,
// and none can come (only kin opens it, by its path, and a spare's name is
// no agent's), so its next agent finds it empty, as a new one, and no one
// but kin reads it. Spares are named spareTag<random>.log.pipe: a daemon that
// starts removes the pipes of no agent (runner.removeStalePipes), and
// Close removes those it kept.

// spareTag starts the name of a kept pipe.
const spareTag = ".spare-"

// maxSpares bounds the pipes kept per directory: a burst of ends larger
// than that removes the rest, as before.
const maxSpares = 4096

// unread reports whether the named pipe at path is open for reading
// nowhere: a non-blocking open for writing fails with ENXIO exactly when
// the pipe has no reader. Its drain read end of file, so it has no writer
// either (a read-write descriptor counts as both): no process holds it,
// and none can open it but by its path, in a directory only kin reaches.
// A process that kept a read end of it (the agent's own end reopened
// through /proc/<pid>/fd, say, and handed to another process) would read
// the next agent's output from a kept pipe: such a pipe is removed, and
// that descriptor is left on a dead inode, as before spares.
func unread(path string) bool {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return false
	}
	return errors.Is(err, unix.ENXIO)
}

// isSpare reports whether name (a base name) is a kept pipe's.
func isSpare(name string) bool { return strings.HasPrefix(name, spareTag) }

// retire keeps the ended pipe at path for a later Open, or removes it.
// The caller has let go of it: it holds no descriptor of it. The check and
// the rename run under spareMu: a cascade's ends would otherwise wait on
// the directory's lock in the kernel, each on a thread of its own.
func (p *Poller) retire(path string) {
	dir := filepath.Dir(path)
	p.spareMu.Lock()
	defer p.spareMu.Unlock()
	if !p.sparesClosed && len(p.spares[dir]) < maxSpares && unread(path) {
		spare := spareName(dir)
		if err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, spare, unix.RENAME_NOREPLACE); err == nil {
			p.spares[dir] = append(p.spares[dir], spare)
			return
		}
	}
	os.Remove(path)
}

// spareName is a new name for a kept pipe in dir:
// spareTag<16 hex digits>.log.pipe (without fmt: a cascade names 1,000).
func spareName(dir string) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, len(spareTag)+16+len(".log.pipe"))
	b = append(b, spareTag...)
	v := rand.Uint64()
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>shift&0xf])
	}
	return filepath.Join(dir, string(append(b, ".log.pipe"...)))
}

// reuse renames a kept pipe of path's directory to path, replacing
// whatever file was there; false where none is kept (or none could be
// renamed: the caller makes a new one).
func (p *Poller) reuse(path string) bool {
	dir := filepath.Dir(path)
	for {
		p.spareMu.Lock()
		list := p.spares[dir]
		if len(list) == 0 {
			p.spareMu.Unlock()
			return false
		}
		spare := list[len(list)-1]
		p.spares[dir] = list[:len(list)-1]
		p.spareMu.Unlock()
		err := unix.Rename(spare, path)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.ENOENT) {
			// Not a file rename may replace (a directory): the caller's
			// removal says so.
			os.Remove(spare)
			return false
		}
		// Removed meanwhile (a starting daemon's removal of stale pipes).
	}
}

// closeSpares removes the kept pipes; later ends remove theirs.
func (p *Poller) closeSpares() {
	p.spareMu.Lock()
	defer p.spareMu.Unlock()
	p.sparesClosed = true
	for _, list := range p.spares {
		for _, s := range list {
			os.Remove(s)
		}
	}
	p.spares = nil
}
