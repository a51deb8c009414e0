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
	"sync/atomic"
	"syscall"
	"time"

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
	dir  string
	srv  *fuse.Server
	root *root
	log  *slog.Logger

	once   sync.Once
	err    error
	closed atomic.Bool // Close was called
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
	r := newRoot(src, log)
	// go-fuse's direct mount opens /dev/fuse (and, for its poll hack, a
	// file in the mount) without O_CLOEXEC and never sets the flag on the
	// connection: every agent's shim held the connection until its exec,
	// so a daemon killed meanwhile left it alive and the shim blocked on a
	// request nobody would answer. No fork runs while it mounts, and the
	// flag is set before any can (cloexecConnections).
	syscall.ForkLock.RLock()
	srv, err := fuse.NewServer(r, dir, &fuse.MountOptions{
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
	})
	if err == nil {
		go srv.Serve()
		if err = srv.WaitMount(); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	}
	if err == nil {
		err = cloexecConnections()
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("ctxfuse: mount %s: %w", dir, err)
	}
	return &Mount{dir: dir, srv: srv, root: r, log: log}, nil
}

// Close unmounts it. The mount is detached at once (MNT_DETACH: an agent's
// open file or working directory inside does not keep it in the tree);
// Close then waits up to a second for the kernel to end the connection.
func (m *Mount) Close() error {
	m.once.Do(func() {
		m.closed.Store(true)
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

// Node ids: an agent's nodes are named by its id and the node's kind, so a
// name taken again is a new node and the kernel never reuses a node across
// agents. The node id the kernel is given is the inode number itself: a
// node is known by its number alone, and nothing is kept for it (the
// served tree is the store's; issue 22's memory: go-fuse's node tree held
// some 1.2 KiB for each live agent, whose <name>.d the Landlock rule of its
// shim keeps looked up for as long as it runs). What is kept is what a
// number does not say: a directory's group as it was looked up (dirRef),
// a socket's state, and the content of an open file.
const (
	inoShift  = 5 // kinds below: the id file, the directory, the 19 files
	kindID    = 0
	kindDir   = 1
	kindFile0 = 2
	inoRoot   = 1       // fuse's root node id
	inoSocket = 1 << 62 // sockets count up from here
)

func ino(id kin.AgentID, kind int) uint64 { return uint64(id)<<inoShift | uint64(kind) }

// node is what a node id names.
type node struct {
	id   kin.AgentID // 0: the root or a socket
	kind int         // kindID, kindDir, or kindFile0 + a control file's index
}

// nodeOf decodes a node id of agent/ below its root (ok false: not one
// of an agent's, e.g. a socket's).
func nodeOf(nodeid uint64) (node, bool) {
	if nodeid >= inoSocket || nodeid>>inoShift == 0 {
		return node{}, false
	}
	n := node{id: kin.AgentID(nodeid >> inoShift), kind: int(nodeid & (1<<inoShift - 1))}
	if n.kind >= kindFile0+len(ctxfs.ControlFiles) {
		return node{}, false
	}
	return n, true
}

// How long the kernel may keep what it was told. agent/<name> and
// agent/<name>.d are looked up every time (a name moves to a later agent);
// a node's owner and mode never change; a control file's size does.
const (
	forever   = time.Hour
	notCached = 0
)

// root serves agent/ over FUSE's own protocol (go-fuse's RawFileSystem):
// every request names its node by id (nodeOf).
type root struct {
	fuse.RawFileSystem // ENOSYS for what is not below
	src                Source
	log                *slog.Logger
	uid, gid           uint32 // the daemon's
	born               time.Time

	mu       sync.Mutex
	socks    map[string]*sockState // bound sockets by name
	sockIno  map[uint64]*sockState // by node id: the bound ones, and unlinked ones the kernel still holds
	nextSock uint64
	dirs     map[kin.AgentID]dirRef // agent/<name>.d the kernel holds, by agent

	hmu     sync.Mutex
	handles map[uint64]*handle // open files and directories
	nextFh  uint64
}

// dirRef is an agent/<name>.d the kernel holds: its group as it was
// first looked up (a node's owner never changes) and the kernel's count
// of its lookups (it is forgotten at zero).
type dirRef struct {
	gid     uint32
	lookups uint64
}

// handle is an open file (its content when it was opened) or an open
// directory (its entries as of its last read from the start).
type handle struct {
	data []byte
	dir  []fuse.DirEntry
}

func newRoot(src Source, log *slog.Logger) *root {
	return &root{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		src:           src, log: log,
		uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), born: time.Now(),
		socks: map[string]*sockState{}, sockIno: map[uint64]*sockState{}, dirs: map[kin.AgentID]dirRef{},
		handles: map[uint64]*handle{},
	}
}

func (r *root) String() string { return FSName }

// ctxOf is a request's context: done when the request is interrupted.
func ctxOf(cancel <-chan struct{}, h *fuse.InHeader) *fuse.Context {
	return &fuse.Context{Caller: h.Caller, Cancel: cancel}
}

// fail logs a failure of the source and answers EIO.
func (r *root) fail(what string, err error) fuse.Status {
	if errors.Is(err, os.ErrNotExist) {
		return fuse.ENOENT
	}
	r.log.Warn("agent filesystem: serve", "what", what, "err", err)
	return fuse.EIO
}

// setBlocks is what a disk file system says of a file's size in blocks
// (go-fuse's node API set it).
func setBlocks(a *fuse.Attr) {
	a.Blksize = 4096
	a.Blocks = (a.Size + 4095) / 4096 * 8
}

func (r *root) dirAttr(a *fuse.Attr, ino uint64, mode uint32, gid uint32) {
	a.Ino = ino
	a.Mode = syscall.S_IFDIR | mode
	a.Nlink = 2
	a.Size = 4096 // as a directory on ext4 says
	a.Uid, a.Gid = r.uid, gid
	t := r.born
	a.SetTimes(&t, &t, &t)
	setBlocks(a)
}

func (r *root) idAttr(a *fuse.Attr, id kin.AgentID) {
	a.Ino = ino(id, kindID)
	a.Mode = syscall.S_IFREG | uint32(ctxfs.ModeIDFile)
	a.Nlink = 1
	a.Uid, a.Gid = r.uid, r.gid
	a.Size = uint64(len(idData(id)))
	t := r.born
	a.SetTimes(&t, &t, &t)
	setBlocks(a)
}

func idData(id kin.AgentID) []byte { return []byte(id.String() + "\n") }

// dirGroup is the group of agent id's agent/<name>.d as the kernel was
// told it; the source's answer when the kernel holds none.
func (r *root) dirGroup(ctx context.Context, id kin.AgentID) (uint32, error) {
	r.mu.Lock()
	d, ok := r.dirs[id]
	r.mu.Unlock()
	if ok {
		return d.gid, nil
	}
	gid, err := r.src.Group(ctx, id)
	return uint32(gid), err
}

// lookupDir counts a lookup of agent id's agent/<name>.d and returns its
// group: the one it was first given while the kernel holds it.
func (r *root) lookupDir(id kin.AgentID, gid uint32) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.dirs[id]
	if !ok {
		d.gid = gid
	}
	d.lookups++
	r.dirs[id] = d
	return d.gid
}

func (r *root) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if h.NodeId != inoRoot {
		n, ok := nodeOf(h.NodeId)
		if !ok || n.kind != kindDir {
			return fuse.Status(syscall.ENOTDIR)
		}
		return r.lookupFile(ctxOf(cancel, h), n.id, name, out)
	}
	r.mu.Lock()
	if s := r.socks[name]; s != nil {
		s.lookups++
		r.sockAttr(s, &out.Attr)
		r.mu.Unlock()
		out.NodeId = s.ino
		out.SetEntryTimeout(forever)
		out.SetAttrTimeout(forever)
		return fuse.OK
	}
	r.mu.Unlock()
	if strings.HasSuffix(name, ".sock") {
		// A socket not bound (yet): bind(2) and the daemon's removal of a
		// stale one look it up first, on every spawn. Not the store's to
		// answer (an agent named "x.sock" has no id file here).
		return fuse.ENOENT
	}
	agent, isDir := name, false
	if n, ok := strings.CutSuffix(name, ".d"); ok {
		if _, err := kin.ParseName(n); err == nil {
			agent, isDir = n, true
		}
	}
	if _, err := kin.ParseName(agent); err != nil {
		return fuse.ENOENT
	}
	ctx := ctxOf(cancel, h)
	id, err := r.src.Resolve(ctx, agent)
	if err != nil {
		return r.fail("resolve "+agent, err)
	}
	if id == 0 && isDir {
		// agent/<n>.d where no agent <n> exists: maybe the id file of an
		// agent named "<n>.d".
		if id, err = r.src.Resolve(ctx, name); err != nil {
			return r.fail("resolve "+name, err)
		}
		isDir = false
	}
	if id == 0 {
		return fuse.ENOENT
	}
	out.SetEntryTimeout(notCached)
	out.SetAttrTimeout(forever)
	if !isDir {
		r.idAttr(&out.Attr, id)
		out.NodeId = ino(id, kindID)
		return fuse.OK
	}
	gid, err := r.dirGroup(ctx, id) // the held one's, else the source's
	if err != nil {
		return r.fail("group "+agent, err)
	}
	r.dirAttr(&out.Attr, ino(id, kindDir), uint32(ctxfs.ModeControlDir), r.lookupDir(id, gid))
	out.NodeId = ino(id, kindDir)
	return fuse.OK
}

// lookupFile looks up a control file of agent id's agent/<name>.d.
func (r *root) lookupFile(ctx context.Context, id kin.AgentID, name string, out *fuse.EntryOut) fuse.Status {
	for i, f := range ctxfs.ControlFiles {
		if f != name {
			continue
		}
		if st := r.fileAttr(ctx, &out.Attr, id, i); !st.Ok() {
			return st
		}
		out.NodeId = ino(id, kindFile0+i)
		out.SetEntryTimeout(forever)
		out.SetAttrTimeout(notCached)
		return fuse.OK
	}
	return fuse.ENOENT
}

func (r *root) Forget(nodeid, nlookup uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sockIno[nodeid]; s != nil {
		s.lookups -= min(nlookup, s.lookups)
		if s.lookups == 0 && !s.bound {
			delete(r.sockIno, nodeid)
		}
		return
	}
	if n, ok := nodeOf(nodeid); ok && n.kind == kindDir {
		if d, ok := r.dirs[n.id]; ok {
			if d.lookups <= nlookup {
				delete(r.dirs, n.id)
			} else {
				d.lookups -= nlookup
				r.dirs[n.id] = d
			}
		}
	}
}

func (r *root) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == inoRoot {
		r.dirAttr(&out.Attr, inoRoot, uint32(ctxfs.ModeKinDir), r.gid)
		out.SetTimeout(forever)
		return fuse.OK
	}
	if in.NodeId >= inoSocket {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.sockIno[in.NodeId]
		if s == nil {
			return fuse.Status(syscall.ESTALE)
		}
		r.sockAttr(s, &out.Attr)
		out.SetTimeout(forever)
		return fuse.OK
	}
	n, ok := nodeOf(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	ctx := ctxOf(cancel, &in.InHeader)
	switch n.kind {
	case kindID:
		r.idAttr(&out.Attr, n.id)
		out.SetTimeout(forever)
	case kindDir:
		gid, err := r.dirGroup(ctx, n.id)
		if err != nil {
			return r.fail("group "+n.id.String(), err)
		}
		r.dirAttr(&out.Attr, in.NodeId, uint32(ctxfs.ModeControlDir), gid)
		out.SetTimeout(forever)
	default:
		if st := r.fileAttr(ctx, &out.Attr, n.id, n.kind-kindFile0); !st.Ok() {
			return st
		}
		// The size is the content's now, also for an open file's fstat
		// (the kernel does not say which it is): a reader reads its
		// snapshot to EOF all the same (direct I/O).
		out.SetTimeout(notCached)
	}
	return fuse.OK
}

// render is control file idx of agent id now (that file only).
func (r *root) render(ctx context.Context, id kin.AgentID, idx int) ([]byte, time.Time, fuse.Status) {
	v, err := r.src.Control(ctx, id)
	if err != nil {
		return nil, time.Time{}, r.fail("control "+id.String(), err)
	}
	b, err := v.File(ctxfs.ControlFiles[idx])
	if err != nil {
		return nil, time.Time{}, r.fail("render "+id.String(), err)
	}
	return b, v.Meta.UpdatedAt, fuse.OK
}

// fileAttr sets a's attributes of control file idx of agent id, the size
// of the content now included.
func (r *root) fileAttr(ctx context.Context, a *fuse.Attr, id kin.AgentID, idx int) fuse.Status {
	b, t, st := r.render(ctx, id, idx)
	if !st.Ok() {
		return st
	}
	gid, err := r.dirGroup(ctx, id)
	if err != nil {
		return r.fail("group "+id.String(), err)
	}
	a.Ino = ino(id, kindFile0+idx)
	a.Mode = syscall.S_IFREG | uint32(ctxfs.ModeControl)
	a.Nlink = 1
	a.Uid, a.Gid = r.uid, gid
	a.Size = uint64(len(b))
	if t.IsZero() {
		t = r.born
	}
	a.SetTimes(&t, &t, &t)
	setBlocks(a)
	return fuse.OK
}

// SetAttr: only a socket's owner and mode change (the daemon's chown and
// chmod; the kernel checked the caller may: default_permissions).
func (r *root) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sockIno[in.NodeId]
	if in.NodeId < inoSocket || s == nil {
		return fuse.EROFS
	}
	if _, ok := in.GetSize(); ok {
		return fuse.EINVAL
	}
	if m, ok := in.GetMode(); ok {
		s.mode = m & 0o7777
	}
	if u, ok := in.GetUID(); ok {
		s.uid = u
	}
	if g, ok := in.GetGID(); ok {
		s.gid = g
	}
	s.changedAt = time.Now().UnixNano()
	r.sockAttr(s, &out.Attr)
	out.SetTimeout(forever)
	return fuse.OK
}

// Mknod makes a socket's node: bind(2) by the daemon. Nothing else is made
// here.
func (r *root) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if in.NodeId != inoRoot {
		return fuse.EROFS
	}
	mode := in.Mode
	if mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return fuse.EPERM
	}
	if in.Uid != r.uid {
		return fuse.EACCES
	}
	uid, gid := in.Uid, in.Gid
	if so, ok := r.src.(SocketOwners); ok {
		if u, g, ok := so.SocketOwner(name); ok {
			uid, gid = u, g
		}
	}
	r.mu.Lock()
	if r.socks[name] != nil {
		r.mu.Unlock()
		return fuse.Status(syscall.EEXIST)
	}
	r.nextSock++
	s := &sockState{ino: inoSocket + r.nextSock, lookups: 1, mode: mode &^ syscall.S_IFMT & 0o7777, uid: uid, gid: gid, t: time.Now().UnixNano(), bound: true}
	r.socks[name] = s
	r.sockIno[s.ino] = s
	r.sockAttr(s, &out.Attr)
	r.mu.Unlock()
	out.NodeId = s.ino
	out.SetEntryTimeout(forever)
	out.SetAttrTimeout(forever)
	return fuse.OK
}

// Unlink removes a socket's node (the daemon closing an agent's socket).
func (r *root) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.socks[name]
	if h.NodeId != inoRoot || s == nil {
		return fuse.EROFS
	}
	r.unbindLocked(name, s)
	return fuse.OK
}

// unbindLocked drops the bound socket s of name: its node is kept while
// the kernel holds it (until its Forget).
func (r *root) unbindLocked(name string, s *sockState) {
	delete(r.socks, name)
	s.bound = false
	if s.lookups == 0 {
		delete(r.sockIno, s.ino)
	}
}

// RemoveSocket removes the socket at path, a node of the mount's
// directory, as unlink(2) of it would, without a request: the node is
// dropped here, then the kernel is told its entry is deleted
// (FUSE_NOTIFY_DELETE: it unhashes the dentry and clears the inode's
// links, as an unlink does), one write to the connection where an unlink
// was a request through the kernel, a read and a reply (1,110 sockets:
// ~60 ms of a cascade's CPU on this machine). False where path is not a
// socket bound here, or the mount is closed: the caller unlinks path
// itself. The caller must not be serving a request of this mount (the
// kernel takes the directory's lock for the notification).
func (m *Mount) RemoveSocket(path string) bool {
	name := filepath.Base(path)
	if filepath.Dir(path) != filepath.Clean(m.dir) || m.closed.Load() {
		return false
	}
	r := m.root
	r.mu.Lock()
	s := r.socks[name]
	if s == nil {
		r.mu.Unlock()
		return false
	}
	r.unbindLocked(name, s)
	r.mu.Unlock()
	// ENOENT: the kernel holds no entry of that name (evicted), or one of
	// another node: nothing of s is left to drop.
	switch st := m.srv.DeleteNotify(inoRoot, s.ino, name); st {
	case fuse.OK, fuse.ENOENT:
		return true
	default:
		// An older protocol, say: its entry looked up again finds nothing.
		if st2 := m.srv.EntryNotify(inoRoot, name); st2 != fuse.OK && st2 != fuse.ENOENT && !m.closed.Load() {
			m.log.Warn("agent filesystem: a removed socket's entry", "name", name, "delete", st, "inval", st2)
		}
	}
	return true
}

// Nothing else changes here.
func (r *root) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (r *root) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fuse.EROFS
}
func (r *root) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return fuse.EROFS
}
func (r *root) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (r *root) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (r *root) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (r *root) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (r *root) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}

// StatFs: all zero, as go-fuse's node API answered.
func (r *root) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return fuse.OK
}

// Open: agent/<name> is the same for as long as its node lives (the
// kernel may keep its pages); a control file is rendered once, and every
// read of this open sees that content (direct I/O: the kernel neither
// caches it nor cuts it at a size it was told earlier).
func (r *root) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	n, ok := nodeOf(in.NodeId)
	if !ok || n.kind == kindDir {
		return fuse.Status(syscall.ENOTSUP)
	}
	if in.Flags&(syscall.O_ACCMODE|syscall.O_TRUNC) != syscall.O_RDONLY {
		return fuse.EROFS
	}
	if n.kind == kindID {
		out.OpenFlags = fuse.FOPEN_KEEP_CACHE
		return fuse.OK
	}
	b, _, st := r.render(ctxOf(cancel, &in.InHeader), n.id, n.kind-kindFile0)
	if !st.Ok() {
		return st
	}
	out.Fh = r.open(&handle{data: b})
	out.OpenFlags = fuse.FOPEN_DIRECT_IO
	return fuse.OK
}

func (r *root) open(h *handle) uint64 {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	r.nextFh++
	r.handles[r.nextFh] = h
	return r.nextFh
}

func (r *root) handle(fh uint64) *handle {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	return r.handles[fh]
}

func (r *root) release(fh uint64) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	delete(r.handles, fh)
}

func (r *root) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	n, ok := nodeOf(in.NodeId)
	if !ok || n.kind == kindDir {
		return nil, fuse.Status(syscall.ENOTSUP)
	}
	if n.kind == kindID {
		return readAt(idData(n.id), buf, int64(in.Offset)), fuse.OK
	}
	h := r.handle(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	return readAt(h.data, buf, int64(in.Offset)), fuse.OK
}

func readAt(b, dest []byte, off int64) fuse.ReadResult {
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil)
	}
	end := min(int64(len(b)), off+int64(len(dest)))
	return fuse.ReadResultData(b[off:end])
}

func (r *root) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.Fh != 0 {
		r.release(in.Fh)
	}
}

// Flush: nothing is written here, so nothing to flush.
func (r *root) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.OK }

func (r *root) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if n, ok := nodeOf(in.NodeId); in.NodeId != inoRoot && (!ok || n.kind != kindDir) {
		return fuse.Status(syscall.ENOTDIR)
	}
	out.Fh = r.open(&handle{})
	return fuse.OK
}

// ReadDir lists a directory: its entries are read when it is read from
// the start, and later reads go on through that list (an offset is a
// place in it).
func (r *root) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	h := r.handle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	if in.Offset == 0 {
		list, st := r.list(ctxOf(cancel, &in.InHeader), in.NodeId)
		if !st.Ok() {
			return st
		}
		r.hmu.Lock()
		h.dir = list
		r.hmu.Unlock()
	}
	r.hmu.Lock()
	list := h.dir
	r.hmu.Unlock()
	for i := in.Offset; i < uint64(len(list)); i++ {
		e := list[i]
		e.Off = i + 1
		if !out.AddDirEntry(e) {
			break
		}
	}
	return fuse.OK
}

// list is the entries of directory nodeid now.
func (r *root) list(ctx context.Context, nodeid uint64) ([]fuse.DirEntry, fuse.Status) {
	if nodeid != inoRoot {
		n, _ := nodeOf(nodeid)
		list := make([]fuse.DirEntry, len(ctxfs.ControlFiles))
		for i, f := range ctxfs.ControlFiles {
			list[i] = fuse.DirEntry{Name: f, Mode: syscall.S_IFREG, Ino: ino(n.id, kindFile0+i)}
		}
		return list, fuse.OK
	}
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
	return list, fuse.OK
}

func (r *root) ReleaseDir(in *fuse.ReleaseIn) { r.release(in.Fh) }

// sockState is an agent's socket, bound by the daemon: what its node says
// (root.mu guards it).
type sockState struct {
	ino       uint64
	lookups   uint64 // the kernel's
	t         int64  // made, in Unix nanoseconds
	changedAt int64  // 0: never
	mode      uint32
	uid, gid  uint32
	bound     bool // still named in agent/ (not unlinked)
}

func (r *root) sockAttr(s *sockState, a *fuse.Attr) {
	a.Ino = s.ino
	a.Mode = syscall.S_IFSOCK | s.mode
	a.Nlink = 1
	a.Uid, a.Gid = s.uid, s.gid
	t, c := time.Unix(0, s.t), time.Unix(0, s.t)
	if s.changedAt != 0 {
		c = time.Unix(0, s.changedAt)
	}
	a.SetTimes(&t, &t, &c)
	setBlocks(a)
}
