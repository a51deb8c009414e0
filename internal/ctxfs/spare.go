package ctxfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Rewrites without a new inode. On a journal-less ext4 every inode kin
// frees makes the next allocations in its block group scan it
// (recently_deleted), and an atomic rewrite by rename frees one inode and
// allocates another each time. kin's rewrites of files that already exist
// (a session's state and updated_at, a child folder's status) instead write
// the new content into a spare file and swap it with the live one
// (RENAME_EXCHANGE): the old inode becomes the spare of the next rewrite of
// the same file. Nothing is freed; only a file's first rewrite allocates
// (its spare).
//
// The spares live in Options.SpareDir (0700, the daemon's, outside the
// tree: the daemon's <home>/ctx-spare), one per session and file, named by the file's place ("s+<uid>+<agent>+<session>+<file>",
// "c+<uid>+<agent>+<session>+<child>+status": '+' is in no name). An agent
// may keep a descriptor of its old file open across a rewrite and write
// through it into the spare: that inode only ever stands at this one
// place of this one session (it never moves to another file, session or
// owner), and the next exchange gives the agent back a file it could write
// anyway. A spare is reused only when it is a regular file of the file's
// owner with one link (else it is dropped and a new one made), its content
// is written before each exchange, and CreateSession and CreateChildDir
// drop the spares of their places, so a spare never outlives its session
// into a new one at the same path. A crash leaves the live file whole (the
// exchange is atomic) and at worst a half-written spare, which the next
// rewrite truncates. Spares stay as long as their sessions (an inode and a
// block each, against one freed and one allocated per rewrite).

// sessionSpare is the spare's name of a session's file.
func sessionSpare(s Session, file string) string {
	return "s+" + strconv.Itoa(s.UID) + "+" + s.Agent + "+" + s.ID + "+" + file
}

// childSpare is the spare's name of a child folder's status file.
func childSpare(parent Session, child string) string {
	return "c+" + strconv.Itoa(parent.UID) + "+" + parent.Agent + "+" + parent.ID + "+" + child + "+" + FileChildStatus
}

// openSpares makes (or opens) dir for the spares, only where it is on the
// root's file system. Without it rewrites fall back to writeAt.
func (f *FS) openSpares(dir string) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var st, root unix.Stat_t
	if unix.Fstat(fd, &st) != nil || unix.Fstat(f.rootFD, &root) != nil || st.Dev != root.Dev ||
		f.fixOwner(fd, kinOwner, 0o700) != nil {
		unix.Close(fd)
		return
	}
	f.spareFD = fd
}

// dropSpares removes the spares named, e.g. those of a new session's
// files: a spare belongs to one session, never to a later one at the
// same path.
func (f *FS) dropSpares(names ...string) {
	if f.spareFD < 0 {
		return
	}
	for _, n := range names {
		mu := &f.spareMu[stripe(n)]
		mu.Lock()
		removeAllAt(f.spareFD, n, 0)
		mu.Unlock()
	}
}

// rewriteAt replaces name in dirfd with data, owned by o with mode, like
// writeAt (a reader or a crash sees the old file or the new one), by
// exchanging it with its spare (spare names it in the spare directory). Where
// name is missing or is not a regular file, or the file system cannot
// exchange, it is writeAt. The caller syncs dirfd once after its last
// rewrite.
func (f *FS) rewriteAt(dirfd int, name, spare string, data []byte, o Owner, mode fs.FileMode) error {
	if f.spareFD < 0 || f.noSpares.Load() {
		return f.writeAt(dirfd, name, data, o, mode)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Missing, or something else stands there: writeAt's rename
		// makes the file, or fails as it always did.
		return f.writeAt(dirfd, name, data, o, mode)
	}
	mu := &f.spareMu[stripe(spare)]
	mu.Lock()
	defer mu.Unlock()
	if err := f.fillSpare(spare, data, o, mode); err != nil {
		return err
	}
	err := unix.Renameat2(f.spareFD, spare, dirfd, name, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		// name went meanwhile: the spare takes its place.
		err = unix.Renameat2(f.spareFD, spare, dirfd, name, unix.RENAME_NOREPLACE)
	case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		// Not one mount, or no RENAME_EXCHANGE here: rename as before.
		f.noSpares.Store(true)
		unix.Unlinkat(f.spareFD, spare, 0)
		return f.writeAt(dirfd, name, data, o, mode)
	}
	if err != nil {
		return &fs.PathError{Op: "exchange", Path: name, Err: err}
	}
	return nil
}

// fillSpare makes spare (in the spare directory) a regular file of o with mode
// holding data, synced: the spare that stands there if it is a regular
// file of o's uid with one link, else a new one.
func (f *FS) fillSpare(spare string, data []byte, o Owner, mode fs.FileMode) error {
	uid, _ := f.want(o)
	var st unix.Stat_t
	err := unix.Fstatat(f.spareFD, spare, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != uid || st.Nlink != 1) {
		// Not one to write into (what an agent had put in its file's
		// place, or a link it made to it): out of the way.
		if err := removeAllAt(f.spareFD, spare, 0); err != nil {
			return err
		}
		err = unix.ENOENT
	}
	fd := -1
	switch {
	case err == nil:
		// Only kin changes entries of .spare, so the entry is still the
		// regular file just checked; O_NOFOLLOW all the same.
		fd, err = unix.Openat(f.spareFD, spare, unix.O_WRONLY|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		var now unix.Stat_t
		if err != nil {
			fd = -1
		} else {
			err = unix.Fstat(fd, &now)
		}
		if err == nil && (now.Ino != st.Ino || now.Dev != st.Dev) {
			err = fmt.Errorf("replaced while opened: %w", ErrForeign)
		}
	case errors.Is(err, unix.ENOENT):
		fd, err = unix.Openat(f.spareFD, spare, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			fd = -1
		}
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return &fs.PathError{Op: "spare", Path: spare, Err: err}
	}
	if err := f.fill(fd, data, o, mode); err != nil {
		return &fs.PathError{Op: "spare", Path: spare, Err: err}
	}
	return nil
}
