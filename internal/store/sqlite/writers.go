package sqlite

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// writersSuffix names the file beside a database that every handle of this
// package writing it holds a lock on (writersLock): the only writer
// (Options.OnlyWriter, whose rows are kept between reads) exclusively from
// its open, every other handle shared from its first write.
const writersSuffix = ".writers"

// ErrNotOnlyWriter is the refusal of a write through a handle on a
// database that another handle holds as its only writer (a daemon's own
// home database, whose rows it keeps in memory between reads).
var ErrNotOnlyWriter = errors.New("the database is another daemon's own")

// writers is a handle's hold on its database's writers file.
type writers struct {
	f    *os.File
	path string // the database's
	held bool   // exclusive from the open, or shared since share
}

// openWriters opens path's writers file; for the only writer it takes the
// lock exclusively, never waiting, and reports whether it got it (another
// handle writing the file meanwhile: its rows are then not kept). The
// lock lasts until close, which comes after the database's connections.
func openWriters(path string, onlyWriter bool) (w *writers, exclusive bool, err error) {
	name := path + writersSuffix
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: the writers' lock: %w", err)
	}
	w = &writers{f: f, path: path}
	if !onlyWriter {
		return w, false, nil
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		w.held = true
		return w, true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return w, false, w.share() // another handle writes the file: shared, like it
	default:
		f.Close()
		return nil, false, fmt.Errorf("sqlite: the writers' lock %s: %w", name, err)
	}
}

// share takes the lock shared, never waiting, unless it is held already:
// before a handle's first write (the writer's begin). It fails while
// another handle holds it as the only writer, whose memory would not see
// this handle's commits.
func (w *writers) share() error {
	if w.held {
		return nil // (a flock of the other kind would convert it)
	}
	if err := unix.Flock(int(w.f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("%s: %w: the daemon of the home it is in keeps its rows in memory and would not see this handle's writes; stop that daemon, or give every daemon sharing a SQLite store one file that is no home's kin.db (--store sqlite:PATH), or PostgreSQL", w.path, ErrNotOnlyWriter)
		}
		return fmt.Errorf("the writers' lock %s%s: %w", w.path, writersSuffix, err)
	}
	w.held = true
	return nil
}

func (w *writers) close() { w.f.Close() }
