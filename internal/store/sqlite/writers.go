package sqlite

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// writersSuffix names the file beside a database that every handle of this
// package writing it holds a lock on while open (writersLock): the row
// cache's only writer exclusively, every other handle shared.
const writersSuffix = ".writers"

// ErrNotOnlyWriter is the refusal of a handle on a database that another
// handle holds as its only writer (Options.OnlyWriter: a daemon's own
// home database, whose rows it keeps in memory between reads).
var ErrNotOnlyWriter = errors.New("the database is another daemon's own")

// writersLock takes the lock on path's writers file: exclusive for the
// only writer, shared otherwise, never waiting. The only writer that
// cannot have it exclusive (another handle has the file open) gets it
// shared, and only reports false: its rows are then not kept between
// reads. A handle that cannot have it shared is refused: the only writer's
// memory would not see its commits. The file stays locked until the
// returned file is closed (after the database's connections).
func writersLock(path string, onlyWriter bool) (f *os.File, exclusive bool, err error) {
	name := path + writersSuffix
	f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: the writers' lock: %w", err)
	}
	fd := int(f.Fd())
	if onlyWriter {
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return f, true, nil
		} else if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, false, fmt.Errorf("sqlite: the writers' lock %s: %w", name, err)
		}
	}
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("sqlite: %s: %w: the daemon of the home it is in keeps its rows in memory and would not see this handle's writes; stop that daemon, or give every daemon sharing a SQLite store one file that is no home's kin.db (--store sqlite:PATH), or PostgreSQL", path, ErrNotOnlyWriter)
		}
		return nil, false, fmt.Errorf("sqlite: the writers' lock %s: %w", name, err)
	}
	return f, false, nil
}
