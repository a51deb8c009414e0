package ctxfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Errors a caller may test with errors.Is. A path kin would create that
// already exists wraps fs.ErrExist; a missing one wraps fs.ErrNotExist.
var (
	// ErrSymlink: a symbolic link (or another non-directory) stands where
	// the tree has a directory, or a link where it has a file. kin never
	// follows one, so a link planted by an agent cannot redirect a write.
	ErrSymlink = errors.New("ctxfs: symbolic link in the agent filesystem")
	// ErrOutside: a path is not beneath the ctx root, or has "." or ".."
	// components.
	ErrOutside = errors.New("ctxfs: path outside the ctx root")
	// ErrNotRegular: a device, FIFO, socket or directory where a regular
	// file is expected.
	ErrNotRegular = errors.New("ctxfs: not a regular file")
	// ErrForeign: a file is not owned by the uid it must belong to, or is
	// a hard link (so that kin never appends to or copies a file an agent
	// linked in from elsewhere).
	ErrForeign = errors.New("ctxfs: file owned by another uid")
	// ErrTooLarge: a result exceeds the copy limits.
	ErrTooLarge = errors.New("ctxfs: result exceeds the copy limits")
)

// Modes of the tree. Agents' own files are private to their uid; the
// daemon's directories are traversable but not listable, so an agent reaches
// its own files and socket by name without enumerating anyone else's.
const (
	ModeKinDir     fs.FileMode = 0o711 // <root>/agent, <root>/home
	ModeIDFile     fs.FileMode = 0o644 // agent/<name>
	ModeControlDir fs.FileMode = 0o750 // agent/<name>.d: daemon-owned, group = the agent's gid
	ModeControl    fs.FileMode = 0o640 // the files in it: the agent reads them, never writes them
	ModeAgentDir   fs.FileMode = 0o700 // every directory of a session
	// ModeAgentHome is home/<uid>, home/<uid>/agent and .../agent/<name>:
	// traversable by the agent's group, whose only other members are the
	// sandboxed readers of its workspace that kin adds (seed 003 §4).
	ModeAgentHome fs.FileMode = 0o710
	// ModeWorkspace is .../agent/<name>/workspace: readable by that group;
	// Landlock narrows each reader to the paths both sides consented to.
	ModeWorkspace fs.FileMode = 0o750
	ModeAgentFile fs.FileMode = 0o600 // every file of a session
)

// Options tune an FS. The zero value is what kin runs with.
type Options struct {
	// NoSync skips the fsync of files and directories. Writes stay atomic
	// (a reader and a crashed process still see the old or the new file),
	// but a power loss may then lose recent updates or leave an empty file
	// where a new one was renamed in. The daemon sets it: everything it
	// writes here follows its store, and after a crash of the machine it
	// rewrites the tree (RepairSession, RepairChildDir and the control
	// files); tests of concurrency set it too.
	NoSync bool
	// SpareDir, when set, is a directory of the daemon's (made 0700 if
	// missing) on the same file system as the root, outside the tree,
	// where rewrites of existing files keep their spares (spare.go): a
	// rewrite then allocates and frees no inode. Empty, or on another
	// file system: every rewrite is a new file renamed into place.
	SpareDir string
	// Limits of CopyResult; zero fields take the defaults below.
	MaxResultBytes int64
	MaxResultFiles int
}

// Defaults of Options.
const (
	DefaultMaxResultBytes = 256 << 20
	DefaultMaxResultFiles = 10000
	// maxResultDepth bounds artifact/ nesting (and the descriptors a copy
	// holds open at once).
	maxResultDepth = 32
	// MaxEventLine bounds one line of events.jsonl.
	MaxEventLine = 1 << 20
)

// FS performs every write kin makes to the agent filesystem. It holds the
// ctx root open and reaches everything below it one path component at a
// time with O_NOFOLLOW, so no symbolic link is ever followed. Its methods
// are safe for concurrent use; callers serialise updates of one agent's
// files (the daemon does, under its per-agent lock), else the last write of
// each file wins.
type FS struct {
	Layout
	root     *os.File
	rootFD   int
	euid     int
	egid     int
	noSync   bool
	maxBytes int64
	maxFiles int

	// appendMu serialises appends to one file (striped by path), so the
	// repair of a torn last line never races another append.
	appendMu [32]sync.Mutex
	// spareFD is <root>/.spare, where rewriteAt keeps each rewritten
	// file's spare (-1: none; noSpares: the file system cannot exchange);
	// spareMu serialises the uses of one spare (striped by its name).
	spareFD  int
	noSpares atomic.Bool
	spareMu  [32]sync.Mutex
	// run tags this FS's transient entries, so that RemoveTemps, which
	// may run beside its writes, removes only those of earlier runs.
	run string

	closeOnce sync.Once
	closeErr  error
}

// Open makes root (0711 if it has to be created) with its agent/ and home/
// directories and returns an FS writing beneath it. Close it when done.
func Open(root string, o Options) (*FS, error) {
	if root == "" {
		return nil, fmt.Errorf("ctxfs: empty ctx root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("ctxfs: %w", err)
	}
	if err := os.MkdirAll(abs, ModeKinDir); err != nil {
		return nil, fmt.Errorf("ctxfs: %w", err)
	}
	rf, err := os.OpenFile(abs, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("ctxfs: %w", err)
	}
	f := &FS{
		Layout:   NewLayout(abs),
		root:     rf,
		rootFD:   int(rf.Fd()),
		euid:     os.Geteuid(),
		egid:     os.Getegid(),
		noSync:   o.NoSync,
		maxBytes: o.MaxResultBytes,
		maxFiles: o.MaxResultFiles,
		run:      fmt.Sprintf("%08x-", rand.Uint32()),
		spareFD:  -1,
	}
	if f.maxBytes <= 0 {
		f.maxBytes = DefaultMaxResultBytes
	}
	if f.maxFiles <= 0 {
		f.maxFiles = DefaultMaxResultFiles
	}
	for _, d := range []string{dirAgent, dirHome} {
		fd, created, err := f.mkdirAt(f.rootFD, d, kinOwner, ModeKinDir)
		if err != nil {
			rf.Close()
			return nil, fmt.Errorf("ctxfs: %s: %w", filepath.Join(abs, d), err)
		}
		unix.Close(fd)
		if created {
			f.syncDir(f.rootFD)
		}
	}
	if o.SpareDir != "" {
		f.openSpares(o.SpareDir)
	}
	return f, nil
}

// Close releases the root. Calling it twice is safe; no method may run
// during or after it.
func (f *FS) Close() error {
	f.closeOnce.Do(func() {
		if f.spareFD >= 0 {
			unix.Close(f.spareFD)
		}
		f.closeErr = f.root.Close()
	})
	return f.closeErr
}

// kinOwner leaves ownership as created: the daemon's uid and gid.
var kinOwner = Owner{UID: -1, GID: -1}

// components turns p (absolute beneath the root, or relative to it) into
// path components, refusing anything that is not a clean path in the tree.
func (f *FS) components(p string) ([]string, error) {
	rel := p
	if filepath.IsAbs(p) {
		if p == f.Root {
			return nil, nil
		}
		prefix := f.Root + "/"
		if f.Root == "/" {
			prefix = "/"
		}
		if !strings.HasPrefix(p, prefix) {
			return nil, fmt.Errorf("%s: %w", p, ErrOutside)
		}
		rel = p[len(prefix):]
	}
	if rel == "" {
		return nil, nil
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%s: %w", p, ErrOutside)
		}
	}
	return comps, nil
}

// walk opens the directory at comps below dirfd without following links.
func walk(dirfd int, comps []string) (int, error) {
	fd, err := unix.Dup(dirfd)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	for _, c := range comps {
		next, err := openDirAt(fd, c)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// walkPath opens the directory at p (see components).
func (f *FS) walkPath(p string) (int, error) {
	comps, err := f.components(p)
	if err != nil {
		return -1, err
	}
	fd, err := walk(f.rootFD, comps)
	if err != nil {
		return -1, fmt.Errorf("ctxfs: %s: %w", p, err)
	}
	return fd, nil
}

// openDirAt opens the directory name in dirfd, refusing a symbolic link.
func openDirAt(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return -1, fmt.Errorf("%s: %w", name, ErrSymlink)
		}
	}
	return -1, &fs.PathError{Op: "open", Path: name, Err: err}
}

// mkdirAt makes (or opens) the directory name in dirfd and gives it o and
// mode, also when it existed: kin's directories have fixed modes.
func (f *FS) mkdirAt(dirfd int, name string, o Owner, mode fs.FileMode) (fd int, created bool, err error) {
	err = unix.Mkdirat(dirfd, name, 0o700)
	created = err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, false, &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	fd, err = openDirAt(dirfd, name)
	if err != nil {
		return -1, false, err
	}
	if err := f.fixOwner(fd, o, mode); err != nil {
		unix.Close(fd)
		return -1, false, &fs.PathError{Op: "chown", Path: name, Err: err}
	}
	return fd, created, nil
}

// mkdirsAt is mkdirAt for each of comps in turn, syncing the parent of each
// directory it creates.
func (f *FS) mkdirsAt(dirfd int, comps []string, o Owner, mode fs.FileMode) (int, error) {
	fd, err := unix.Dup(dirfd)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	for _, c := range comps {
		next, created, err := f.mkdirAt(fd, c, o, mode)
		if err == nil && created {
			err = f.syncDir(fd)
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// fixOwner gives the open file fd owner o (-1 fields: the daemon's) and
// mode, changing only what differs.
func (f *FS) fixOwner(fd int, o Owner, mode fs.FileMode) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	uid, gid := f.want(o)
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return err
		}
	}
	if fs.FileMode(st.Mode&0o7777) != mode {
		return unix.Fchmod(fd, uint32(mode))
	}
	return nil
}

// want resolves o's -1 fields to the daemon's ids.
func (f *FS) want(o Owner) (uid, gid int) {
	uid, gid = o.UID, o.GID
	if uid < 0 {
		uid = f.euid
	}
	if gid < 0 {
		gid = f.egid
	}
	return uid, gid
}

func (f *FS) syncDir(fd int) error {
	if f.noSync {
		return nil
	}
	return unix.Fsync(fd)
}

func (f *FS) syncFile(fd int) error {
	if f.noSync {
		return nil
	}
	return unix.Fsync(fd)
}

// Names of kin's transient entries. They start with '.', so `ls` hides
// them, and RemoveTemps finds those a crash left behind.
const (
	tmpTag   = ".kin-tmp-"
	stageTag = ".kin-stage-"
	rmTag    = ".kin-rm-"
)

// transient names a transient entry of this FS: its run's tag, then a
// random part.
func (f *FS) transient(base, tag string) string {
	return "." + base + tag + f.run + fmt.Sprintf("%016x", rand.Uint64())
}

// ownTransient reports whether name is a transient entry of this FS,
// which a write in flight may use.
func (f *FS) ownTransient(name string) bool {
	return strings.Contains(name, tmpTag+f.run) || strings.Contains(name, stageTag+f.run) || strings.Contains(name, rmTag+f.run)
}

func isTransient(name string) bool {
	return strings.HasPrefix(name, ".") &&
		(strings.Contains(name, tmpTag) || strings.Contains(name, stageTag) || strings.Contains(name, rmTag))
}

// createAt makes the new file name in dirfd holding data, owned by o with
// mode, synced. It fails if name exists (O_EXCL never follows a link).
func (f *FS) createAt(dirfd int, name string, data []byte, o Owner, mode fs.FileMode) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: name, Err: err}
	}
	if err := f.fill(fd, data, o, mode); err != nil {
		unix.Unlinkat(dirfd, name, 0)
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}

// exists reports whether name stands in the directory dirfd.
func exists(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// fill gives the open file fd owner o and mode, writes data to it, syncs
// it and closes it. The descriptor stays a bare one (no os.File: its
// fcntl, finalizer and poller bookkeeping cost more than the write of a
// small file).
func (f *FS) fill(fd int, data []byte, o Owner, mode fs.FileMode) error {
	err := f.fixOwner(fd, o, mode)
	if err == nil {
		err = writeAll(fd, data)
	}
	if err == nil {
		err = f.syncFile(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// writeAll writes data to the blocking descriptor fd.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		data = data[n:]
	}
	return nil
}

// writeAt replaces name in dirfd atomically: a temporary file in the same
// directory, written, synced, then renamed over name. A reader or a crash
// sees the old file or the new one, never part of one. The caller syncs
// dirfd once after its last rename.
func (f *FS) writeAt(dirfd int, name string, data []byte, o Owner, mode fs.FileMode) error {
	var tmp string
	var err error
	for range 3 {
		tmp = f.transient(name, tmpTag)
		if err = f.createAt(dirfd, tmp, data, o, mode); !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return &fs.PathError{Op: "rename", Path: name, Err: err}
	}
	return nil
}

// sameAt reports whether name in dirfd is a regular file holding exactly
// data with owner o and mode, so that a rewrite can be skipped.
func (f *FS) sameAt(dirfd int, name string, data []byte, o Owner, mode fs.FileMode) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	file := os.NewFile(uintptr(fd), name)
	defer file.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(len(data)) ||
		fs.FileMode(st.Mode&0o7777) != mode {
		return false
	}
	uid, gid := f.want(o)
	if int(st.Uid) != uid || int(st.Gid) != gid {
		return false
	}
	got := make([]byte, len(data)+1)
	n, _ := io.ReadFull(file, got)
	return n == len(data) && bytes.Equal(got[:n], data)
}

// readAt reads the regular file name in dirfd, refusing links and special
// files, at most limit bytes.
func readAt(dirfd int, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w", name, ErrSymlink)
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	file := os.NewFile(uintptr(fd), name)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
	}
	b, err := io.ReadAll(io.LimitReader(file, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: longer than %d bytes: %w", name, limit, ErrTooLarge)
	}
	return b, nil
}

// appendAt appends line (whole lines ending in '\n') to name in dirfd with
// one write(2), creating the file for o if it is missing. The file must be
// a regular file owned by o.UID with one link. A last line left without its
// '\n' by a crash is cut off first, so the file stays a sequence of whole
// lines.
func (f *FS) appendAt(dirfd int, name string, line []byte, o Owner, key string) error {
	mu := &f.appendMu[stripe(key)]
	mu.Lock()
	defer mu.Unlock()
	flags := unix.O_RDWR | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Openat(dirfd, name, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err == nil {
			if err = f.fixOwner(fd, o, ModeAgentFile); err == nil {
				err = f.syncDir(dirfd)
			}
			if err != nil {
				unix.Close(fd)
				return &fs.PathError{Op: "create", Path: name, Err: err}
			}
		}
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%s: %w", name, ErrSymlink)
		}
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w", name, ErrNotRegular)
	}
	uid, _ := f.want(o)
	if int(st.Uid) != uid || st.Nlink != 1 {
		return fmt.Errorf("%s: uid %d, %d links: %w", name, st.Uid, st.Nlink, ErrForeign)
	}
	if err := repairTail(fd, st.Size); err != nil {
		return &fs.PathError{Op: "repair", Path: name, Err: err}
	}
	n, err := unix.Write(fd, line)
	if err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = f.syncFile(fd)
	}
	if err != nil {
		return &fs.PathError{Op: "append", Path: name, Err: err}
	}
	return nil
}

// repairTail truncates a file of size bytes after its last '\n' when it
// does not end in one.
func repairTail(fd int, size int64) error {
	if size == 0 {
		return nil
	}
	var last [1]byte
	if _, err := unix.Pread(fd, last[:], size-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	buf := make([]byte, 64<<10)
	end := size
	for end > 0 {
		start := max(end-int64(len(buf)), 0)
		n, err := unix.Pread(fd, buf[:end-start], start)
		if err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return unix.Ftruncate(fd, start+int64(i)+1)
		}
		end = start
	}
	return unix.Ftruncate(fd, 0)
}

func stripe(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h % 32)
}

// listAt returns the names in the directory dirfd, sorted. It opens the
// directory afresh: a dup would share (and move) dirfd's offset.
func listAt(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), ".")
	names, err := d.Readdirnames(-1)
	d.Close()
	sort.Strings(names)
	return names, err
}

// removeAllAt removes name in dirfd and, if it is a directory, everything
// in it, never following a link (a link is removed, not its target).
func removeAllAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	if depth > 64 {
		return &fs.PathError{Op: "remove", Path: name, Err: errors.New("nested too deep")}
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return err
	}
	names, err := listAt(fd)
	for _, n := range names {
		if err != nil {
			break
		}
		err = removeAllAt(fd, n, depth+1)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

// exchangeAt puts tmp in dirfd in the place of name, atomically replacing
// whatever stands there (a file, a directory, even a link, which is
// replaced rather than followed); the replaced entry is left under tmp.
func exchangeAt(dirfd int, tmp, name string) error {
	err := unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		// Nothing to exchange with (or nothing to move: the caller checks).
		err = unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_NOREPLACE)
		if err != nil {
			return &fs.PathError{Op: "rename", Path: name, Err: err}
		}
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "exchange", Path: name, Err: err}
	}
	return nil
}

// WriteFile atomically replaces the file at path (beneath the root; its
// directory must exist) with data, owned by o with mode perm. It is the
// building block for files this package does not name, e.g. a handoff's
// contract or input refs in a session's context/.
func (f *FS) WriteFile(path string, data []byte, o Owner, perm fs.FileMode) error {
	if err := o.validate(); err != nil {
		return err
	}
	dir, base, err := f.splitFile(path)
	if err != nil {
		return err
	}
	fd, err := walk(f.rootFD, dir)
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := f.writeAt(fd, base, data, o, perm.Perm()); err != nil {
		return fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	return f.syncDir(fd)
}

// ReadFile reads the regular file at path (beneath the root) without
// following links; limit bounds its size (0: 16 MiB).
func (f *FS) ReadFile(path string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = 16 << 20
	}
	dir, base, err := f.splitFile(path)
	if err != nil {
		return nil, err
	}
	fd, err := walk(f.rootFD, dir)
	if err != nil {
		return nil, fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	defer unix.Close(fd)
	b, err := readAt(fd, base, limit)
	if err != nil {
		return nil, fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	return b, nil
}

func (f *FS) splitFile(path string) (dir []string, base string, err error) {
	comps, err := f.components(path)
	if err != nil {
		return nil, "", err
	}
	if len(comps) == 0 {
		return nil, "", fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	return comps[:len(comps)-1], comps[len(comps)-1], nil
}

// RemoveTemps removes the temporary files and directories that writes
// interrupted by a crash left in the tree and returns how many: those of
// earlier runs (another FS), never this FS's own, so it may run beside
// this FS's writes (a daemon runs it in the background: a large tree takes
// a while to walk). It does not descend more than 32 levels. Entries an
// agent named like kin's temporaries (".<name>.kin-tmp-...") go too.
//
// It stays on the root's filesystem: a served agent/ (ctxfuse) holds no
// temporaries, and walking it would ask the daemon for every agent.
func (f *FS) RemoveTemps() (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.rootFD, &st); err != nil {
		return 0, err
	}
	return f.removeTemps(f.rootFD, 0, st.Dev)
}

func (f *FS) removeTemps(dirfd int, depth int, dev uint64) (int, error) {
	names, err := listAt(dirfd)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, n := range names {
		if isTransient(n) {
			if f.ownTransient(n) {
				continue // a write of this run may be using it
			}
			if err := removeAllAt(dirfd, n, 0); err != nil {
				return removed, err
			}
			removed++
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || depth >= maxResultDepth || st.Dev != dev {
			continue
		}
		fd, err := openDirAt(dirfd, n)
		if err != nil {
			continue // replaced by a link meanwhile: not ours to walk
		}
		k, err := f.removeTemps(fd, depth+1, dev)
		unix.Close(fd)
		removed += k
		if err != nil {
			return removed, err
		}
	}
	if removed > 0 {
		f.syncDir(dirfd)
	}
	return removed, nil
}
