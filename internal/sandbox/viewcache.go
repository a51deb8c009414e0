package sandbox

import (
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A View keeps the All view (view.go) open in the daemon, so that a shim
// need not walk it: with kin's home under a busy /tmp the walk is most of
// an agent's start (an open, a Landlock rule and a close for each of the
// hundreds of entries there). For each spawn, Ruleset makes a new Landlock
// ruleset holding the view's rules from descriptors the View keeps open;
// the shim inherits it (Spec.ViewFD), adds the agent's own rules and
// restricts itself with it.
//
// The view is what the shim's walk would grant at that moment: before
// each Ruleset the View re-reads every directory on its chains whose
// identity, mode or times changed (one stat each; a busy /tmp changes
// often) and opens only the entries that are new there. The shim walks as
// the agent's user; the View walks as the daemon (root), so it shares a
// view only with agents for which every directory on the chains grants
// what it grants to others (no owner or group of the agent's, no ACL);
// otherwise Ruleset says so and the shim walks itself. Unlike the walk,
// it gives an agent no rule for an entry closed to it (closedTo): such a
// rule lets through nothing the modes allow, and a busy /tmp is mostly
// such entries (each rule a system call in every spawn).
type View struct {
	special []string // Hidden and the RO paths outside them, sorted

	mu      sync.Mutex
	dirs    map[string]*viewDir // the chain directories walked, by path
	held    int                 // descriptors open in dirs
	tooMany bool                // the chains held more than MaxViewEntries: shims walk

	// watch is an inotify instance told of every change to the
	// attributes of the chain directories' entries (IN_ATTRIB: chmod,
	// chown, an ACL), so that Ruleset looks again only at the closed
	// entries that changed; -1 where there is none (then it looks at
	// every closed entry each time). watched names each watch's directory.
	watch   int
	watched map[int32]string
}

// MaxViewEntries bounds the descriptors a View holds open: chains with
// more entries than that (a /tmp of tens of thousands) are left to the
// shims' own walks rather than taking the daemon's descriptors.
const MaxViewEntries = 4096

// maxViewEntries is MaxViewEntries; tests lower it.
var maxViewEntries = MaxViewEntries

// viewDir is one directory on the chains: what it was when read, and the
// entries it grants (or none: others may not list it, or it is gone).
type viewDir struct {
	st      unix.Stat_t
	listed  bool
	entries map[string]viewEntry // by name
	wd      int32                // its inotify watch; -1: none (every closed entry is looked at each time)
}

type viewEntry struct {
	ino    uint64
	fd     int // -1: a mount root, opened by each Ruleset (mountRoot)
	access uint64
	// closed: when last looked at, the entry gave others nothing (no
	// permission bits for others) and had no ACL: a rule on it would
	// grant an agent that neither owns it nor is in its group nothing the
	// kernel's own checks allow (see closedTo). Ruleset looks again when
	// its attributes changed (or each time, without a watch); an entry
	// seen open is never looked at again.
	closed   bool
	uid, gid uint32
	ctim     unix.Timespec // when the ACL was last looked for
	// unwatched: a closed entry to look at again (its attributes
	// changed, or its directory has no watch).
	unwatched bool
}

// lookEntry notes whether the entry open as fd is closed to others.
func lookEntry(e *viewEntry) {
	var st unix.Stat_t
	if e.fd < 0 || unix.Fstat(e.fd, &st) != nil || st.Mode&0o007 != 0 {
		e.closed = false
		return
	}
	if !e.closed || st.Ctim != e.ctim {
		// An ACL set or changed changes the inode's ctime. O_PATH
		// descriptors take no xattr calls: through /proc, which names
		// this very inode whatever its path is now.
		if _, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(e.fd), "system.posix_acl_access", nil); err == nil {
			e.closed = false
			return
		}
	}
	e.closed, e.uid, e.gid, e.ctim = true, st.Uid, st.Gid, st.Ctim
}

// closedTo reports whether the closed entry e gives an agent running as
// uid with gids nothing: not its owner, not in its group (root is never
// refused anything by modes).
func (e *viewEntry) closedTo(uid int, gids []int) bool {
	return e.closed && uid != 0 && int(e.uid) != uid && !slices.Contains(gids, int(e.gid))
}

func closeEntry(e viewEntry) {
	if e.fd >= 0 {
		unix.Close(e.fd)
	}
}

// NewView is a View for the All view with these hidden and read-only
// paths (as in Spec); it opens nothing until the first Ruleset.
func NewView(hidden, ro []string) *View {
	v := &View{special: viewSpecial(hidden, ro), dirs: map[string]*viewDir{}, watch: -1, watched: map[int32]string{}}
	if fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err == nil {
		v.watch = fd
	}
	return v
}

// viewSpecial is the paths the walk treats specially (viewRules): the
// hidden ones and the read-only ones outside them (a read-only path
// inside a hidden one is never reached: the walk skips the hidden path).
func viewSpecial(hidden, ro []string) []string {
	out := slices.Clone(hidden)
	for _, p := range ro {
		inside := false
		for _, h := range hidden {
			inside = inside || within(p, h)
		}
		if !inside {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Matches reports whether spec's view is this View's: an All spec whose
// hidden and read-only paths give the same special paths.
func (v *View) Matches(spec *Spec) bool {
	return spec.All && slices.Equal(v.special, viewSpecial(spec.Hidden, spec.RO))
}

// Close closes what the View holds open.
func (v *View) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range v.dirs {
		for _, e := range d.entries {
			closeEntry(e)
		}
	}
	v.dirs, v.held = map[string]*viewDir{}, 0
	if v.watch >= 0 {
		unix.Close(v.watch)
		v.watch, v.watched = -1, map[int32]string{}
	}
}

// changed reads what the watch says changed since the last ruleset and
// marks those closed entries to be looked at again; all of them where the
// kernel dropped events (or the watch fails).
func (v *View) changed() {
	if v.watch < 0 {
		return
	}
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.Read(v.watch, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				v.stale(nil)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				v.stale(nil)
				continue
			}
			dir, ok := v.watched[ev.Wd]
			if !ok {
				continue
			}
			if d := v.dirs[dir]; d != nil && d.wd == ev.Wd {
				name := string(nameBytes)
				if i := strings.IndexByte(name, 0); i >= 0 {
					name = name[:i]
				}
				v.stale(d.entries, name)
			}
		}
	}
}

// stale marks entries (every entry of every directory, with entries nil)
// to be looked at again by the next ruleset (unwatched).
func (v *View) stale(entries map[string]viewEntry, names ...string) {
	mark := func(es map[string]viewEntry, name string) {
		if e, ok := es[name]; ok && e.closed {
			e.unwatched = true
			es[name] = e
		}
	}
	if entries == nil {
		for _, d := range v.dirs {
			for name := range d.entries {
				mark(d.entries, name)
			}
		}
		return
	}
	for _, name := range names {
		mark(entries, name)
	}
}

// watchDir watches dir's entries' attributes; without a watch its closed
// entries are looked at for every ruleset.
func (v *View) watchDir(dir string, d *viewDir) {
	d.wd = -1
	if v.watch < 0 {
		return
	}
	wd, err := unix.InotifyAddWatch(v.watch, dir, unix.IN_ATTRIB|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW|unix.IN_EXCL_UNLINK)
	if err != nil {
		return
	}
	if other, ok := v.watched[int32(wd)]; ok && other != dir {
		return // the same directory at two paths: its events go to the other
	}
	d.wd = int32(wd)
	v.watched[d.wd] = dir
}

// unwatchDir ends dir's watch, if it has one and no other directory
// took it since (the kernel gives one watch to one inode).
func (v *View) unwatchDir(dir string, d *viewDir) {
	if d.wd < 0 || v.watch < 0 {
		return
	}
	if v.watched[d.wd] == dir {
		unix.InotifyRmWatch(v.watch, uint32(d.wd))
		delete(v.watched, d.wd)
	}
	d.wd = -1
}

// ErrViewNotShared is Ruleset's answer for an agent the View cannot speak
// for (see View): its shim walks the view itself.
var ErrViewNotShared = errors.New("sandbox: the view depends on the agent's user here")

// Ruleset returns a new Landlock ruleset (close-on-exec), handling what
// the shim handles at abi and scoping signals as it would, holding the
// view's rules as they are now, for an agent running as uid and gids. It
// returns ErrViewNotShared where a directory on the chains treats that
// user otherwise than others.
func (v *View) Ruleset(abi int, scopeSignals bool, uid int, gids []int) (int, error) {
	if abi <= 0 {
		return -1, errors.New("sandbox: no Landlock")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshAll(); err != nil {
		return -1, err
	}
	if v.tooMany {
		return -1, ErrViewNotShared
	}
	if !v.sharedWithLocked(uid, gids) {
		return -1, ErrViewNotShared
	}
	v.changed()
	fd, err := newRuleset(abi, scopeSignals)
	if err != nil {
		return -1, err
	}
	handled := handledAccess(abi)
	for p, d := range v.dirs {
		for name, e := range d.entries {
			a := e.access & handled
			if a == 0 {
				continue
			}
			// An entry closed to others gets no rule for an agent it is
			// closed to: in a busy /tmp most are (os.MkdirTemp makes 0700
			// directories), and each rule costs a system call in every
			// spawn. Looked at again now: it may have been opened since.
			if e.closed {
				if e.unwatched || d.wd < 0 {
					lookEntry(&e)
					e.unwatched = false
					d.entries[name] = e
				}
				if e.closedTo(uid, gids) {
					continue
				}
			}
			efd := e.fd
			if efd < 0 {
				// A mount root (mountRoot): opened for this ruleset only.
				var err error
				efd, err = unix.Open(filepath.Join(p, name), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
			}
			pb := unix.LandlockPathBeneathAttr{Allowed_access: a, Parent_fd: int32(efd)}
			// Optional, as in the walk: a rule the kernel refuses (an
			// internal file system's object) is left out.
			unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
			runtime.KeepAlive(&pb)
			if efd != e.fd {
				unix.Close(efd)
			}
		}
	}
	return fd, nil
}

// mountRoot reports whether fd is the root of a mount (statx's
// STATX_ATTR_MOUNT_ROOT, Linux 5.8; false where the kernel does not say).
func mountRoot(fd int) bool {
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, 0, &stx) != nil {
		return false
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// Warm opens the view now (a daemon's start), so that the first spawn
// does not pay for it.
func (v *View) Warm() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refreshAll()
}

// SharedWith reports whether the view, as last refreshed, is what an
// agent running as uid with gids would see: no directory on the chains is
// its user's or one of its groups', and none has an ACL.
func (v *View) SharedWith(uid int, gids []int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.tooMany && v.sharedWithLocked(uid, gids)
}

func (v *View) sharedWithLocked(uid int, gids []int) bool {
	for p, d := range v.dirs {
		if int(d.st.Uid) == uid || slices.Contains(gids, int(d.st.Gid)) || hasACL(p) {
			return false
		}
	}
	return true
}

// refreshAll refreshes the chains from /, and gives up keeping them open
// for good once they hold more than MaxViewEntries entries.
func (v *View) refreshAll() error {
	if v.tooMany {
		return nil
	}
	if err := v.refresh("/"); err != nil {
		return err
	}
	if v.held > maxViewEntries {
		v.drop("/")
		v.tooMany = true
	}
	return nil
}

// refresh brings the chain directory dir (and those below it) up to date.
func (v *View) refresh(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		v.drop(dir)
		return nil
	}
	d := v.dirs[dir]
	if d == nil {
		d = &viewDir{entries: map[string]viewEntry{}, wd: -1}
		v.dirs[dir] = d
	}
	if !sameDir(&d.st, &st) {
		if d.wd < 0 || d.st.Ino != st.Ino || d.st.Dev != st.Dev {
			// A new directory at that path: watch it (before reading it,
			// so that no change after the read goes unseen).
			v.unwatchDir(dir, d)
			v.watchDir(dir, d)
		}
		d.st = st
		// As the shim's walk: a directory others cannot read and search
		// is not walked (the agent could not list it or open its entries).
		d.listed = st.Mode&0o005 == 0o005
		if err := v.reread(dir, d); err != nil {
			return err
		}
	}
	// The chains below: the directories that lead to a special path.
	if d.listed {
		for _, sub := range v.children(dir) {
			if err := v.refresh(sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// children are the special paths' ancestors right below dir that exist as
// entries of dir (the walk descends into them instead of granting them).
func (v *View) children(dir string) []string {
	var out []string
	for _, s := range v.special {
		if s == dir || !within(s, dir) {
			continue
		}
		rel := s[len(dir)+1:]
		if dir == "/" {
			rel = s[1:]
		}
		first, _, _ := strings.Cut(rel, "/")
		sub := filepath.Join(dir, first)
		if sub != s && !slices.Contains(out, sub) {
			out = append(out, sub)
		}
	}
	return out
}

// reread lists dir again: entries gone or replaced are closed, new ones
// opened, unchanged ones kept (same name and inode).
func (v *View) reread(dir string, d *viewDir) error {
	seen := map[string]bool{}
	if d.listed {
		dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			err = v.readEntries(dfd, dir, d, seen)
			unix.Close(dfd)
		}
		if err != nil {
			d.listed = false
			seen = map[string]bool{}
		}
	}
	for name, e := range d.entries {
		if !seen[name] {
			closeEntry(e)
			delete(d.entries, name)
			v.held--
		}
	}
	return nil
}

func (v *View) readEntries(dfd int, dir string, d *viewDir, seen map[string]bool) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off < n; {
			de := (*unix.Dirent)(unsafe.Pointer(&buf[off]))
			off += int(de.Reclen)
			name := direntName(de)
			if name == "." || name == ".." || name == "" {
				continue
			}
			p := filepath.Join(dir, name)
			isSpecial, ancestor := onChain(v.special, p)
			if isSpecial || ancestor {
				continue // not granted: hidden, read-only (its own rule), or walked into
			}
			typ := de.Type
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				typ = dtype(st.Mode)
			}
			if typ == unix.DT_LNK {
				continue
			}
			seen[name] = true
			if e, ok := d.entries[name]; ok && e.ino == de.Ino {
				continue
			}
			if e, ok := d.entries[name]; ok {
				closeEntry(e)
				delete(d.entries, name)
				v.held--
			}
			fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				delete(seen, name)
				continue
			}
			a := uint64(rightsRW)
			if typ != unix.DT_DIR {
				a &= accessFile
			}
			if mountRoot(fd) {
				// Held, it would keep the mount busy (umount: EBUSY) for as
				// long as the daemon runs: Ruleset opens it afresh.
				unix.Close(fd)
				fd = -1
			}
			e := viewEntry{ino: de.Ino, fd: fd, access: a}
			lookEntry(&e)
			d.entries[name] = e
			v.held++
			if v.held > maxViewEntries {
				return nil // refreshAll gives up
			}
		}
	}
}

func direntName(de *unix.Dirent) string {
	b := (*[256]byte)(unsafe.Pointer(&de.Name[0]))
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	return string(b[:n])
}

func dtype(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	default:
		return unix.DT_REG
	}
}

// drop forgets dir and everything walked below it.
func (v *View) drop(dir string) {
	for p, d := range v.dirs {
		if within(p, dir) {
			for _, e := range d.entries {
				closeEntry(e)
				v.held--
			}
			v.unwatchDir(p, d)
			delete(v.dirs, p)
		}
	}
}

func sameDir(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid &&
		a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// onChain is viewWalker.onChain over special.
func onChain(special []string, p string) (isSpecial, ancestor bool) {
	for _, s := range special {
		if s == p {
			isSpecial = true
		} else if within(s, p) {
			ancestor = true
		}
	}
	return
}

// hasACL reports whether p carries a POSIX access ACL (which may treat a
// user otherwise than its mode's "others").
func hasACL(p string) bool {
	_, err := unix.Lgetxattr(p, "system.posix_acl_access", nil)
	return err == nil
}

// newRuleset creates the ruleset the shim restricts itself with: the file
// system rights handled at abi, and the signal scope when asked for (ABI
// 6). Network rights are left unhandled: the agent keeps TCP (doc.go).
func newRuleset(abi int, scopeSignals bool) (int, error) {
	attr := unix.LandlockRulesetAttr{Access_fs: handledAccess(abi)}
	// Size the attribute to its first field, which every ABI accepts,
	// unless a scope is asked for (ABI 6 reads all three fields).
	size := unsafe.Sizeof(attr.Access_fs)
	if scopeSignals && abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Sizeof(attr)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, &landlockError{"create ruleset", errno}
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}
