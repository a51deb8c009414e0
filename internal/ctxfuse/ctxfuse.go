// Package ctxfuse serves <ctx>/agent, the control files of seed 001's
// agent filesystem, from the daemon's memory and store through FUSE, the way
// procfs serves a process's files: no inode on disk per agent and no rewrite
// when an agent changes, and a read always sees the agent as the store has
// it now (no writer lag). What agents and tools see is what ctxfs writes on
// disk when this is not mounted (ctxfs's doc and golden tests): the same
// names, contents, owners and modes:
//
//	agent/              0711 daemon
//	  <name>            0644 daemon            the agent's id ("7\n")
//	  <name>.d/         0750 daemon:<gid>      its control files (ctxfs.ControlFiles), 0640 daemon:<gid>
//	  <name>.sock                              its socket: bound by the daemon in the mount
//
// The kernel enforces the modes (default_permissions) for every uid
// (allow_other): an agent reads its own control files through its gid and
// cannot read another agent's or write any. The mount refuses every change
// except the daemon's own sockets (mknod of a socket by bind(2), its chown
// and chmod, its unlink): a bound Unix socket holds its dentry and inode,
// so a process connecting by path reaches it for as long as it is bound.
//
// Each node is one agent's (its inode number holds the agent id), so its
// owner and mode never change; a name taken again by a later agent is a new
// node (agent/<name> and agent/<name>.d are looked up again every time: no
// entry cache). A file's content is rendered when it is opened, from one
// read of the agent, and served from that snapshot until it is closed: a
// reader never sees half of a change.
//
// Nothing here is a record: the store is. A daemon killed with -9 leaves a
// dead mount (ENOTCONN); Mount detaches whatever is mounted at its directory
// first.
package ctxfuse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

// FSName is the mount's source and type suffix in /proc/self/mountinfo
// ("fuse.kin-ctl").
const FSName = "kin-ctl"

// Source is what the mount serves: the daemon's registry. Each call has
// the context of the request it answers, which ends when the reader is
// interrupted (a signal: FUSE's INTERRUPT): a reader waiting on a slow
// store is killable then, since the kernel waits for the answer to a
// request the server has read.
type Source interface {
	// Resolve returns the agent agent/<name> names now (0: none).
	Resolve(ctx context.Context, name string) (kin.AgentID, error)
	// Group returns the gid of agent id's control files (Resolve
	// answered id): looked up on every spawn (its shim grants them), so
	// best answered without the store.
	Group(ctx context.Context, id kin.AgentID) (int, error)
	// Control returns agent id's control values as they are now;
	// fs.ErrNotExist (wrapped) when the agent has no control files here.
	Control(ctx context.Context, id kin.AgentID) (ctxfs.ControlValues, error)
	// Names lists every agent agent/ holds, each name once with the agent
	// it names.
	Names(ctx context.Context) ([]Entry, error)
}

// SocketOwners is what a Source may also answer: the owner the daemon
// gives agent/<name>.sock (name includes ".sock"), so that the node its
// bind(2) makes has it from the start and the daemon needs no chown
// through the mount (a request to itself on every spawn). ok false: the
// node is the daemon's until it chowns it (agentsock checks either way).
type SocketOwners interface {
	SocketOwner(name string) (uid, gid uint32, ok bool)
}

// Entry is one name of agent/ and the agent it names.
type Entry struct {
	Name string
	ID   kin.AgentID
}

// Mount is a mounted agent/.
type Mount struct {
	dir string
	srv *fuse.Server
	log *slog.Logger

	once sync.Once
	err  error
}

// Available reports why FUSE cannot be served here, or nil: a mount needs
// root (no fusermount: go-fuse mounts with mount(2)) and /dev/fuse.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root (an ordinary user needs fusermount3, which kin does not use)")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("/dev/fuse: %w", err)
	}
	f.Close()
	return nil
}

// New mounts the served agent/ at dir (an existing directory; whatever is
// in it is hidden while mounted). A killed daemon's dead mount there is the
// caller's to detach first (DetachStale), before anything touches dir: the
// runner does at its Open.
func New(dir string, src Source, log *slog.Logger) (*Mount, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &root{src: src, log: log, uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), socks: map[string]*sockState{}, born: time.Now()}
	// go-fuse's direct mount opens /dev/fuse (and, for its poll hack, a
	// file in the mount) without O_CLOEXEC and never sets the flag on the
	// connection: every agent's shim held the connection until its exec,
	// so a daemon killed meanwhile left it alive and the shim blocked on a
	// request nobody would answer. No fork runs while it mounts, and the
	// flag is set before any can (cloexecConnections).
	syscall.ForkLock.RLock()
	srv, err := fs.Mount(dir, r, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict:  true,
			AllowOther:         true,
			Options:            []string{"default_permissions"},
			FsName:             FSName,
			Name:               FSName,
			DisableXAttrs:      true,
			DisableReadDirPlus: true,
			// Nothing is written here and a control file is small: a read
			// request of 16 KiB keeps each request buffer ~20 KiB (go-fuse's
			// default, 128 KiB, made them ~132 KiB each).
			MaxWrite: 16 << 10,
		},
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
		Logger:          nil,
	})
	if err == nil {
		err = cloexecConnections()
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("ctxfuse: mount %s: %w", dir, err)
	}
	if err := srv.WaitMount(); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("ctxfuse: mount %s: %w", dir, err)
	}
	return &Mount{dir: dir, srv: srv, log: log}, nil
}

// Close unmounts it. The mount is detached at once (MNT_DETACH: an agent's
// open file or working directory inside does not keep it in the tree);
// Close then waits up to a second for the kernel to end the connection.
func (m *Mount) Close() error {
	m.once.Do(func() {
		if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			m.err = fmt.Errorf("ctxfuse: unmount %s: %w", m.dir, err)
			return
		}
		done := make(chan struct{})
		go func() { m.srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			m.log.Info("agent filesystem: the detached mount is still in use; it ends when its last user lets go", "dir", m.dir)
		}
	})
	return m.err
}

// Mounted counts kin's served agent/ mounts at dir (0, 1, or more when
// mounts were stacked), from /proc/self/mountinfo.
func Mounted(dir string) (int, error) {
	points, err := mountPoints(func(p string) bool { return p == dir })
	return len(points), err
}

// mountPoints lists the mount points of kin's served agent/ that keep
// keep, once for each mount (stacked mounts repeat a point).
func mountPoints(keep func(string) bool) ([]string, error) {
	ms, err := mounts(keep)
	points := make([]string, len(ms))
	for i, m := range ms {
		points[i] = m.point
	}
	return points, err
}

// mountEntry is one served agent/ in /proc/self/mountinfo: where it is
// mounted and its device ("0:39"), which names its FUSE connection.
type mountEntry struct{ point, dev string }

// mounts lists kin's served agent/ mounts whose point keep keeps.
func mounts(keep func(string) bool) ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - type source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || !keep(unescape(fields[4])) {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "fuse."+FSName {
				out = append(out, mountEntry{point: unescape(fields[4]), dev: fields[2]})
			}
		}
	}
	return out, sc.Err()
}

// cloexecConnections sets close-on-exec on every descriptor of this
// process open on /dev/fuse (go-fuse leaves its connection's without).
func cloexecConnections() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("ctxfuse: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "/dev/fuse" {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("ctxfuse: close-on-exec on /dev/fuse (descriptor %d): %w", fd, err)
		}
	}
	return nil
}

// fusectl is where the kernel lists FUSE connections (the fusectl file
// system; kin mounts it there when it is not).
const fusectl = "/sys/fs/fuse/connections"

// abort ends the FUSE connection of a dead daemon's mount (its device
// "0:N" is connection N): every request waiting on it fails, so no
// process is left blocked on it, even one that holds the connection's
// descriptor itself and so kept it from ending with its daemon. An error
// where the connection is gone already, or fusectl cannot be had, is
// returned for the log only: the mount is detached anyway.
func abort(dev string) error {
	major, minor, ok := strings.Cut(dev, ":")
	if !ok || major != "0" {
		return fmt.Errorf("device %q is not a FUSE connection's", dev)
	}
	if _, err := strconv.ParseUint(minor, 10, 32); err != nil {
		return fmt.Errorf("device %q is not a FUSE connection's", dev)
	}
	if _, err := os.Stat(filepath.Join(fusectl, minor)); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl at %s: %w", fusectl, err)
		}
	}
	err := os.WriteFile(filepath.Join(fusectl, minor, "abort"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // ended already
	}
	return err
}

// DetachUnder is DetachStale for every served agent/ mounted at or below
// dir (tests' cleanups: a daemon they killed left its mount); it returns
// the mount points.
func DetachUnder(dir string) ([]string, error) {
	dir = strings.TrimSuffix(dir, "/")
	return detach(func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }, nil)
}

// detach ends the connection of every served agent/ mounted where at says
// (its daemon was killed: nothing may stay blocked on it; an error there
// is logged when log is given) and lazily unmounts it. It returns the
// mount points.
func detach(at func(point string) bool, log *slog.Logger) ([]string, error) {
	ms, err := mounts(at)
	if err != nil {
		return nil, fmt.Errorf("ctxfuse: %w", err)
	}
	var errs []error
	var points []string
	for _, m := range ms {
		points = append(points, m.point)
		if err := abort(m.dev); err != nil && log != nil {
			log.Warn("agent filesystem: end a dead daemon's connection", "dir", m.point, "device", m.dev, "err", err)
		}
		if err := unix.Unmount(m.point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("ctxfuse: detach the mount at %s: %w", m.point, err))
		}
	}
	return points, errors.Join(errs...)
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// DetachStale ends the connection of every served agent/ mounted at dir
// (a killed daemon leaves one that answers ENOTCONN, or, were its
// connection held by another process, one that never answers), lazily
// unmounts it and returns how many. Only for the home's own daemon, at
// its start: no live daemon serves them.
func DetachStale(dir string, log *slog.Logger) (int, error) {
	points, err := detach(func(p string) bool { return p == dir }, log)
	return len(points), err
}

// Inode numbers: an agent's nodes hold its id, so a name taken again is a
// new node and the kernel never reuses a node across agents.
const (
	inoShift  = 5 // kinds below: the id file, the directory, the 19 files
	kindID    = 0
	kindDir   = 1
	kindFile0 = 2
	inoSocket = 1 << 62 // sockets count up from here
)

func ino(id kin.AgentID, kind int) uint64 { return uint64(id)<<inoShift | uint64(kind) }

// How long the kernel may keep what it was told. agent/<name> and
// agent/<name>.d are looked up every time (a name moves to a later agent);
// a node's owner and mode never change; a control file's size does.
const (
	forever   = time.Hour
	notCached = 0
)

// root is agent/.
type root struct {
	fs.Inode
	src      Source
	log      *slog.Logger
	uid, gid uint32 // the daemon's
	born     time.Time

	mu       sync.Mutex
	socks    map[string]*sockState
	nextSock uint64
}

var (
	_ fs.NodeLookuper  = (*root)(nil)
	_ fs.NodeReaddirer = (*root)(nil)
	_ fs.NodeGetattrer = (*root)(nil)
	_ fs.NodeMknoder   = (*root)(nil)
	_ fs.NodeUnlinker  = (*root)(nil)
	_ fs.NodeCreater   = (*root)(nil)
	_ fs.NodeMkdirer   = (*root)(nil)
	_ fs.NodeSetattrer = (*root)(nil)
)

func (r *root) dirAttr(a *fuse.Attr, mode uint32, gid uint32) {
	a.Mode = syscall.S_IFDIR | mode
	a.Nlink = 2
	a.Size = 4096 // as a directory on ext4 says
	a.Uid, a.Gid = r.uid, gid
	t := r.born
	a.SetTimes(&t, &t, &t)
}

func (r *root) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.dirAttr(&out.Attr, uint32(ctxfs.ModeKinDir), r.gid)
	out.Ino = 1
	out.SetTimeout(forever)
	return 0
}

// fail logs a failure of the source and answers EIO.
func (r *root) fail(what string, err error) syscall.Errno {
	if errors.Is(err, os.ErrNotExist) {
		return syscall.ENOENT
	}
	r.log.Warn("agent filesystem: serve", "what", what, "err", err)
	return syscall.EIO
}

func (r *root) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	r.mu.Lock()
	s := r.socks[name]
	r.mu.Unlock()
	if s != nil {
		s.attr(&out.Attr)
		out.SetEntryTimeout(forever)
		out.SetAttrTimeout(forever)
		return r.NewInode(ctx, &sockNode{sockState: s}, fs.StableAttr{Mode: syscall.S_IFSOCK, Ino: s.ino}), 0
	}
	if strings.HasSuffix(name, ".sock") {
		// A socket not bound (yet): bind(2) and the daemon's removal of a
		// stale one look it up first, on every spawn. Not the store's to
		// answer (an agent named "x.sock" has no id file here).
		return nil, syscall.ENOENT
	}
	agent, isDir := name, false
	if n, ok := strings.CutSuffix(name, ".d"); ok {
		if _, err := kin.ParseName(n); err == nil {
			agent, isDir = n, true
		}
	}
	if _, err := kin.ParseName(agent); err != nil {
		return nil, syscall.ENOENT
	}
	id, err := r.src.Resolve(ctx, agent)
	if err != nil {
		return nil, r.fail("resolve "+agent, err)
	}
	if id == 0 && isDir {
		// agent/<n>.d where no agent <n> exists: maybe the id file of an
		// agent named "<n>.d".
		if id, err = r.src.Resolve(ctx, name); err != nil {
			return nil, r.fail("resolve "+name, err)
		}
		isDir = false
	}
	if id == 0 {
		return nil, syscall.ENOENT
	}
	out.SetEntryTimeout(notCached)
	out.SetAttrTimeout(forever)
	if !isDir {
		n := &idNode{r: r, id: id}
		n.attr(&out.Attr)
		return r.NewInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino(id, kindID)}), 0
	}
	gid, err := r.src.Group(ctx, id)
	if err != nil {
		return nil, r.fail("group "+agent, err)
	}
	d := &ctlDir{r: r, id: id, gid: uint32(gid)}
	d.attr(&out.Attr)
	return r.NewInode(ctx, d, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino(id, kindDir)}), 0
}

func (r *root) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	es, err := r.src.Names(ctx)
	if err != nil {
		return nil, r.fail("list", err)
	}
	list := make([]fuse.DirEntry, 0, 2*len(es))
	for _, e := range es {
		list = append(list,
			fuse.DirEntry{Name: e.Name, Mode: syscall.S_IFREG, Ino: ino(e.ID, kindID)},
			fuse.DirEntry{Name: e.Name + ".d", Mode: syscall.S_IFDIR, Ino: ino(e.ID, kindDir)})
	}
	r.mu.Lock()
	for name, s := range r.socks {
		list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFSOCK, Ino: s.ino})
	}
	r.mu.Unlock()
	return fs.NewListDirStream(list), 0
}

// Mknod makes a socket's node: bind(2) by the daemon. Nothing else is made
// here.
func (r *root) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, syscall.EPERM
	}
	caller, ok := fuse.FromContext(ctx)
	if !ok || caller.Uid != r.uid {
		return nil, syscall.EACCES
	}
	uid, gid := caller.Uid, caller.Gid
	if so, ok := r.src.(SocketOwners); ok {
		if u, g, ok := so.SocketOwner(name); ok {
			uid, gid = u, g
		}
	}
	r.mu.Lock()
	if r.socks[name] != nil {
		r.mu.Unlock()
		return nil, syscall.EEXIST
	}
	r.nextSock++
	s := &sockState{ino: inoSocket + r.nextSock, mode: mode &^ syscall.S_IFMT & 0o7777, uid: uid, gid: gid, t: time.Now()}
	r.socks[name] = s
	r.mu.Unlock()
	s.attr(&out.Attr)
	out.SetEntryTimeout(forever)
	out.SetAttrTimeout(forever)
	return r.NewInode(ctx, &sockNode{sockState: s}, fs.StableAttr{Mode: syscall.S_IFSOCK, Ino: s.ino}), 0
}

// Unlink removes a socket's node (the daemon closing an agent's socket).
func (r *root) Unlink(ctx context.Context, name string) syscall.Errno {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.socks[name] == nil {
		return syscall.EROFS
	}
	delete(r.socks, name)
	return 0
}

func (r *root) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (r *root) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (r *root) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// sockState is an agent's socket, bound by the daemon: what its node says.
type sockState struct {
	ino uint64
	t   time.Time

	mu        sync.Mutex
	mode      uint32
	uid, gid  uint32
	changedAt time.Time
}

// sockNode is a socket's node: a new one for each lookup, sharing the
// state (go-fuse keeps the first while the kernel holds the inode).
type sockNode struct {
	fs.Inode
	*sockState
}

var _ fs.NodeSetattrer = (*sockNode)(nil)

func (s *sockState) attr(a *fuse.Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.Ino = s.ino
	a.Mode = syscall.S_IFSOCK | s.mode
	a.Nlink = 1
	a.Uid, a.Gid = s.uid, s.gid
	c := s.t
	if !s.changedAt.IsZero() {
		c = s.changedAt
	}
	a.SetTimes(&s.t, &s.t, &c)
}

func (s *sockNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s.attr(&out.Attr)
	out.SetTimeout(forever)
	return 0
}

// Setattr takes the owner and mode the daemon gives a socket (the kernel
// checked the caller may: default_permissions).
func (s *sockNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return syscall.EINVAL
	}
	s.mu.Lock()
	if m, ok := in.GetMode(); ok {
		s.mode = m & 0o7777
	}
	if u, ok := in.GetUID(); ok {
		s.uid = u
	}
	if g, ok := in.GetGID(); ok {
		s.gid = g
	}
	s.changedAt = time.Now()
	s.mu.Unlock()
	s.attr(&out.Attr)
	out.SetTimeout(forever)
	return 0
}

// idNode is agent/<name>: the agent's id.
type idNode struct {
	fs.Inode
	r  *root
	id kin.AgentID
}

var (
	_ fs.NodeOpener    = (*idNode)(nil)
	_ fs.NodeReader    = (*idNode)(nil)
	_ fs.NodeGetattrer = (*idNode)(nil)
)

func (n *idNode) data() []byte { return []byte(n.id.String() + "\n") }

func (n *idNode) attr(a *fuse.Attr) {
	a.Ino = ino(n.id, kindID)
	a.Mode = syscall.S_IFREG | uint32(ctxfs.ModeIDFile)
	a.Nlink = 1
	a.Uid, a.Gid = n.r.uid, n.r.gid
	a.Size = uint64(len(n.data()))
	t := n.r.born
	a.SetTimes(&t, &t, &t)
}

func (n *idNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	out.SetTimeout(forever)
	return 0
}

func (n *idNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_ACCMODE|syscall.O_TRUNC) != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *idNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return readAt(n.data(), dest, off), 0
}

func readAt(b, dest []byte, off int64) fuse.ReadResult {
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil)
	}
	end := min(int64(len(b)), off+int64(len(dest)))
	return fuse.ReadResultData(b[off:end])
}

// ctlDir is agent/<name>.d/.
type ctlDir struct {
	fs.Inode
	r   *root
	id  kin.AgentID
	gid uint32
}

var (
	_ fs.NodeLookuper  = (*ctlDir)(nil)
	_ fs.NodeReaddirer = (*ctlDir)(nil)
	_ fs.NodeGetattrer = (*ctlDir)(nil)
	_ fs.NodeSetattrer = (*ctlDir)(nil)
	_ fs.NodeCreater   = (*ctlDir)(nil)
	_ fs.NodeMkdirer   = (*ctlDir)(nil)
	_ fs.NodeUnlinker  = (*ctlDir)(nil)
)

func (d *ctlDir) attr(a *fuse.Attr) {
	d.r.dirAttr(a, uint32(ctxfs.ModeControlDir), d.gid)
	a.Ino = ino(d.id, kindDir)
}

func (d *ctlDir) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.attr(&out.Attr)
	out.SetTimeout(forever)
	return 0
}

func (d *ctlDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	for i, f := range ctxfs.ControlFiles {
		if f != name {
			continue
		}
		n := &ctlFile{d: d, idx: i}
		if errno := n.fill(ctx, &out.Attr); errno != 0 {
			return nil, errno
		}
		out.SetEntryTimeout(forever)
		out.SetAttrTimeout(notCached)
		return d.NewInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino(d.id, kindFile0+i)}), 0
	}
	return nil, syscall.ENOENT
}

func (d *ctlDir) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	list := make([]fuse.DirEntry, len(ctxfs.ControlFiles))
	for i, f := range ctxfs.ControlFiles {
		list[i] = fuse.DirEntry{Name: f, Mode: syscall.S_IFREG, Ino: ino(d.id, kindFile0+i)}
	}
	return fs.NewListDirStream(list), 0
}

func (d *ctlDir) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (d *ctlDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (d *ctlDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (d *ctlDir) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }

// ctlFile is one control file of agent/<name>.d/.
type ctlFile struct {
	fs.Inode
	d   *ctlDir
	idx int // in ctxfs.ControlFiles
}

var (
	_ fs.NodeOpener    = (*ctlFile)(nil)
	_ fs.NodeReader    = (*ctlFile)(nil)
	_ fs.NodeGetattrer = (*ctlFile)(nil)
	_ fs.NodeSetattrer = (*ctlFile)(nil)
)

// render is the file's content now (that file only).
func (n *ctlFile) render(ctx context.Context) ([]byte, time.Time, syscall.Errno) {
	v, err := n.d.r.src.Control(ctx, n.d.id)
	if err != nil {
		return nil, time.Time{}, n.d.r.fail("control "+n.d.id.String(), err)
	}
	b, err := v.File(ctxfs.ControlFiles[n.idx])
	if err != nil {
		return nil, time.Time{}, n.d.r.fail("render "+n.d.id.String(), err)
	}
	return b, v.Meta.UpdatedAt, 0
}

// fill sets a's attributes, the size of the content now included.
func (n *ctlFile) fill(ctx context.Context, a *fuse.Attr) syscall.Errno {
	b, t, errno := n.render(ctx)
	if errno != 0 {
		return errno
	}
	a.Ino = ino(n.d.id, kindFile0+n.idx)
	a.Mode = syscall.S_IFREG | uint32(ctxfs.ModeControl)
	a.Nlink = 1
	a.Uid, a.Gid = n.d.r.uid, n.d.gid
	a.Size = uint64(len(b))
	if t.IsZero() {
		t = n.d.r.born
	}
	a.SetTimes(&t, &t, &t)
	return 0
}

func (n *ctlFile) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fill(ctx, &out.Attr); errno != 0 {
		return errno
	}
	// The size is the content's now, also for an open file's fstat (go-fuse
	// passes an open handle even to a stat by path, so the two cannot be
	// told apart): a reader reads its snapshot to EOF all the same (direct
	// I/O).
	out.SetTimeout(notCached)
	return 0
}

func (n *ctlFile) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// snapshot is an open control file: its content when it was opened.
type snapshot struct{ data []byte }

// Open renders the file once: every read of this open sees that content
// (direct I/O: the kernel neither caches it nor cuts it at a size it was
// told earlier).
func (n *ctlFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_ACCMODE|syscall.O_TRUNC) != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	b, _, errno := n.render(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return &snapshot{data: b}, fuse.FOPEN_DIRECT_IO, 0
}

func (n *ctlFile) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	s, ok := f.(*snapshot)
	if !ok {
		return nil, syscall.EBADF
	}
	return readAt(s.data, dest, off), 0
}
