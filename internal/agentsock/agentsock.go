package agentsock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime" // the package has a type named runtime
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// Each agent reaches the daemon as itself through its own Unix socket,
// <ctx>/agent/<name>.sock (seed 001's /ctx/agent/<child>.sock). One HTTP
// server serves every agent socket; the connection's context says which
// agent it acts for, and SO_PEERCRED confirms at connect time that the peer
// process is in that agent's own cgroup: a leaked socket path does not let
// another process act as the agent.

// maxSocketPath is the longest path a Unix socket may have (sun_path).
const maxSocketPath = 107

// MaxConns is how many connections one agent's socket holds open at once:
// past it a new one is closed as soon as it is accepted, so that an agent
// cannot take the daemon's descriptors by opening connections it never
// uses (its streams are capped apart: quota.MaxStreams). IdleTimeout
// closes a kept-alive connection left unused that long.
const (
	MaxConns    = 64
	IdleTimeout = time.Minute
)

// Peers says which agent a process belongs to: the supervisor's
// containment.
type Peers interface {
	// PeerInCgroup reports whether process pid is one of agent id's.
	PeerInCgroup(pid int, id kin.AgentID) bool
	// Contained reports whether process pid is inside kin's containment at
	// all, and whose (0: an agent kin cannot name).
	Contained(pid int) (kin.AgentID, bool)
}

// Sockets serves every agent's own socket with one HTTP server and one
// accept loop (mux): no goroutine or thread per agent.
type Sockets struct {
	dir     string
	srv     *http.Server
	handler http.Handler // the agents' API
	peers   Peers
	log     *slog.Logger
	remove  func(path string) bool // Config.Remove

	mu    sync.Mutex
	socks map[uint64]*Socket // by key
	// shut are the sockets shut and not unlinked yet, by path: Listen
	// unlinks one itself before it binds its path again (a later agent
	// of the same name), so that its late unlink cannot remove the new
	// socket's file.
	shut    map[string]*Socket
	nextKey uint64
	mux     *mux           // started by the first Listen
	closed  bool           // Close was called: Listen refuses
	wg      sync.WaitGroup // the Serve loop
}

// Config is what Sockets are built from.
type Config struct {
	Dir     string       // where the sockets are: <ctx>/agent
	Handler http.Handler // the API as agents reach it
	Peers   Peers
	Log     *slog.Logger
	// Remove, when set, removes a closed socket's file at path in its
	// stead (the daemon's own FUSE server drops its node: ctxfuse's
	// RemoveSocket); false: not done, the file is unlinked.
	Remove func(path string) bool
}

// New makes the agents' socket server; nothing listens until Listen.
func New(c Config) *Sockets {
	s := &Sockets{dir: c.Dir, handler: c.Handler, peers: c.Peers, log: c.Log, remove: c.Remove, socks: map[uint64]*Socket{}, shut: map[string]*Socket{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       IdleTimeout,
		ConnContext:       s.connContext,
		ConnState:         s.connState,
	}
	return s
}

// Socket is one agent's listener and its open connections.
type Socket struct {
	ss   *Sockets
	mux  *mux
	id   kin.AgentID
	path string
	key  uint64 // in Sockets.socks and in the epoll events

	mu        sync.Mutex
	fd        int                 // the listening socket; -1 once closed
	conns     map[*agentConn]bool // open ones; nil until the first
	closed    bool
	unlinked  bool // its file removed (Close, Unlink)
	capWarned bool // MaxConns was reached and logged
}

// agentConn is a connection on an agent's socket: it knows its socket,
// and, from its first read on, who it acts for (check).
type agentConn struct {
	*net.UnixConn
	sock *Socket

	checked bool          // only the connection's own goroutine reads and
	who     caller.Caller // writes these: http.Server reads it there
}

// Read checks the peer first: the server's goroutine for the connection
// reads it before anything else, so the check runs there, at once, and not
// in the one accept loop every agent shares (reading the peer's cgroup
// costs several system calls).
func (c *agentConn) Read(b []byte) (int, error) {
	if !c.checked {
		c.check()
	}
	return c.UnixConn.Read(b)
}

// check decides who the connection acts for: the socket's agent if the
// kernel (SO_PEERCRED) and the supervisor's containment say the peer is
// one of its processes, and the peer is still the process that connected
// (its pidfd, SO_PEERPIDFD: a pid recycled since is never taken for it).
func (c *agentConn) check() {
	c.checked = true
	s := c.sock
	pid, alive, err := peerProcess(c.UnixConn)
	if err == nil && s.ss.peers.PeerInCgroup(pid, s.id) && alive() {
		c.who = caller.Caller{Agent: s.id}
		return
	}
	s.ss.log.Warn("agent socket used from outside the agent", "agent", s.id, "peer_pid", pid, "err", err)
	c.who = caller.Caller{Refused: fmt.Sprintf("this socket belongs to agent %d, and the connecting process (pid %d) is not one of its processes", s.id, pid)}
}

// Path is where agent name's socket is.
func (s *Sockets) Path(name string) string {
	return filepath.Join(s.dir, name+".sock")
}

// CheckPath refuses a name whose socket path the kernel could not bind.
func (s *Sockets) CheckPath(name string) error {
	if p := s.Path(name); len(p) > maxSocketPath {
		return kin.Errorf(kin.ECodeInvalid, "the agent's socket path %s is %d bytes long; Unix sockets allow %d: use a shorter name or a shorter home", p, len(p), maxSocketPath)
	}
	return nil
}

// Listen opens agent a's socket and serves it; with cred, only that uid
// may connect (and the peer check still applies).
func (ss *Sockets) Listen(a *kin.Agent, cred *syscall.Credential) (*Socket, error) {
	m, err := ss.start()
	if err != nil {
		return nil, err
	}
	path := ss.Path(a.Name)
	ss.mu.Lock()
	old := ss.shut[path]
	ss.mu.Unlock()
	if old != nil {
		old.Unlink() // or waits for the one under way
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	fd, err := listenUnix(path, cred)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	s := &Socket{ss: ss, mux: m, id: a.ID, path: path, fd: fd}
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		unix.Close(fd)
		unix.Unlink(path)
		return nil, errors.New("agent socket: the agents' sockets are closed (the daemon is stopping)")
	}
	ss.nextKey++
	s.key = ss.nextKey
	ss.socks[s.key] = s
	ss.mu.Unlock()
	if err := m.add(fd, s.key); err != nil {
		s.Close()
		return nil, fmt.Errorf("agent socket: epoll_ctl: %w", err)
	}
	return s, nil
}

// listenUnix binds a listening Unix socket at path, owned by cred's uid
// and gid when given, mode 0600. No umask games: the umask is process-wide,
// and flipping it on every spawn would change the mode of whatever another
// goroutine creates at that moment. The socket listens only once its file
// has its owner and mode: until listen(2) every connect is refused, so no
// process can connect through the daemon's usual mode in between.
//
// Each step on the path is a request to the daemon itself where agent/ is
// served (ctxfuse), so it makes as few as it can: the mode is the socket's
// own, set before bind(2) (Linux gives the new file the socket inode's
// mode less the umask), the file's owner and mode are changed only where
// they differ from what is wanted (a served agent/ makes the node with the
// agent's owner already: ctxfuse.SocketOwners), and a file left at path
// by an earlier agent of that name (names are unique only among live
// agents) or by a crash is removed only when bind finds one there.
func listenUnix(path string, cred *syscall.Credential) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail(os.NewSyscallError("fchmod", err))
	}
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	if errors.Is(err, unix.EADDRINUSE) {
		// Stale. Unlink, not os.Remove: that tries rmdir after an unlink
		// that failed.
		if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
			return fail(&os.PathError{Op: "unlink", Path: path, Err: err})
		}
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	}
	if err != nil {
		return fail(&net.OpError{Op: "listen", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: os.NewSyscallError("bind", err)})
	}
	unlink := func(err error) (int, error) {
		unix.Unlink(path)
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return unlink(&os.PathError{Op: "lstat", Path: path, Err: err})
	}
	if cred != nil && (st.Uid != cred.Uid || st.Gid != cred.Gid) {
		if err := os.Lchown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			return unlink(err)
		}
	}
	if st.Mode&0o7777 != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return unlink(err)
		}
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return unlink(os.NewSyscallError("listen", err))
	}
	return fd, nil
}

// start starts the one accept loop, the first time.
func (ss *Sockets) start() (*mux, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.closed:
		return nil, errors.New("agent socket: the agents' sockets are closed (the daemon is stopping)")
	case ss.mux != nil:
		return ss.mux, nil
	}
	m, err := newMux(ss)
	if err != nil {
		return nil, err
	}
	ss.mux = m
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		if err := ss.srv.Serve(m); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			ss.log.Error("agent sockets: the server stopped", "err", err)
		}
	}()
	return m, nil
}

func (ss *Sockets) byKey(key uint64) *Socket {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.socks[key]
}

// accept takes one waiting connection off the socket: nil when none is
// waiting, or when it was refused and closed at once (the agent ended, or
// holds MaxConns open).
func (s *Socket) accept() (net.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil
	}
	fd, err := acceptFD(s.fd)
	if err != nil || fd < 0 {
		s.mu.Unlock()
		return nil, err
	}
	if len(s.conns) >= MaxConns {
		warn := !s.capWarned // once a socket: the log is not the agent's to fill
		s.capWarned = true
		s.mu.Unlock()
		unix.Close(fd)
		if warn {
			s.ss.log.Warn("agent socket: connections refused past the cap", "agent", s.id, "open", MaxConns)
		}
		return nil, nil
	}
	uc, err := fileConn(fd)
	if err != nil {
		s.mu.Unlock()
		s.ss.log.Warn("agent socket: accepted connection unusable", "agent", s.id, "err", err)
		return nil, nil
	}
	c := &agentConn{UnixConn: uc, sock: s}
	if s.conns == nil {
		s.conns = map[*agentConn]bool{}
	}
	s.conns[c] = true
	s.mu.Unlock()
	return c, nil
}

// Path is the socket's file.
func (s *Socket) Path() string { return s.path }

// Close stops accepting (a connect is refused from then on), closes the
// open connections and removes the file. The file is removed once, as
// net.UnixListener does: removing it again would cost failing system calls
// per agent, and could remove the socket of a later agent of that name.
func (s *Socket) Close() {
	s.Shut()
	s.Unlink()
}

// Shut is Close but for the file: from its return no connection is
// accepted (a connect by the path is refused: nothing listens) and none
// that was open is served. The file stays until Unlink, or until a later
// agent's socket takes the same path (Listen unlinks the shut one first,
// so that its own unlink, when it comes, cannot remove the new file).
// Removing a file costs more than closing a descriptor (under the served
// agent/, a request to the daemon's own FUSE server): a cancellation shuts
// its subtree's sockets before it signals anything, and unlinks them in
// the background.
func (s *Socket) Shut() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	fd := s.fd
	s.fd = -1
	s.mux.remove(fd)
	unix.Close(fd)
	// Listed as shut under mu (then ss.mu, Unlink's order): Unlink, which
	// needs closed, cannot have run yet.
	s.ss.mu.Lock()
	delete(s.ss.socks, s.key)
	s.ss.shut[s.path] = s
	s.ss.mu.Unlock()
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Unlink removes the file of a socket that was shut, once.
func (s *Socket) Unlink() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed || s.unlinked {
		return
	}
	s.unlinked = true
	if s.ss.remove == nil || !s.ss.remove(s.path) {
		unix.Unlink(s.path)
	}
	s.ss.mu.Lock()
	if s.ss.shut[s.path] == s {
		delete(s.ss.shut, s.path)
	}
	s.ss.mu.Unlock()
}

// CloseAll closes socks: ShutAll, then UnlinkAll.
func CloseAll(socks []*Socket) {
	ShutAll(socks)
	UnlinkAll(socks)
}

// ShutAll shuts socks (Shut).
func ShutAll(socks []*Socket) {
	for _, s := range socks {
		s.Shut()
	}
}

// UnlinkAll unlinks socks (Unlink), several at a time when there are many.
func UnlinkAll(socks []*Socket) {
	workers := min(goruntime.GOMAXPROCS(0), len(socks)/64)
	if workers <= 1 {
		for _, s := range socks {
			s.Unlink()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(socks); i = int(next.Add(1) - 1) {
				socks[i].Unlink()
			}
		})
	}
	wg.Wait()
}

// connKey carries a request's *agentConn in its context.
type connKey struct{}

// connContext remembers the connection, for serve to find who it acts for.
func (ss *Sockets) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// serve runs the agents' API with the request's caller: the agent whose
// socket the connection came in on, or refused.
func (ss *Sockets) serve(w http.ResponseWriter, r *http.Request) {
	who := caller.Caller{Refused: "not a connection on an agent socket"}
	if c, ok := r.Context().Value(connKey{}).(*agentConn); ok {
		if !c.checked {
			c.check()
		}
		who = c.who
	}
	ss.handler.ServeHTTP(w, r.WithContext(caller.With(r.Context(), who)))
}

// connState forgets closed connections.
func (ss *Sockets) connState(c net.Conn, state http.ConnState) {
	if state != http.StateClosed && state != http.StateHijacked {
		return
	}
	if ac, ok := c.(*agentConn); ok {
		s := ac.sock
		s.mu.Lock()
		delete(s.conns, ac)
		s.mu.Unlock()
	}
}

// OperatorConnContext marks connections on the operator socket. Whoever
// can open it is the operator, except a process inside kin's containment:
// an agent's (in any agent's cgroup or PID namespace, known or not) is
// refused, in every mode. Agents that share the daemon's uid could
// otherwise open the 0600 socket and act as the operator; they talk to kin
// through their own socket ($KIN_SOCKET) instead.
func (ss *Sockets) OperatorConnContext(ctx context.Context, c net.Conn) context.Context {
	pid, alive, err := peerProcess(c)
	if err != nil {
		return caller.With(ctx, caller.Caller{Refused: "cannot identify the connecting process: " + err.Error()})
	}
	id, contained := ss.peers.Contained(pid)
	// The peer must still be the process that connected when it was
	// judged: a pid recycled after it exited could be anyone's.
	if !alive() {
		return caller.With(ctx, caller.Caller{Refused: "the connecting process exited before kin could identify it"})
	}
	if contained {
		who := "a process inside an agent's containment"
		if id != 0 {
			who = fmt.Sprintf("a process of agent %d", id)
		}
		ss.log.Warn("operator socket used by an agent", "agent", id, "peer_pid", pid)
		return caller.With(ctx, caller.Caller{Refused: who + " (pid " + strconv.Itoa(pid) + ") may not use the operator socket: agents reach kin through their own socket, $KIN_SOCKET"})
	}
	return caller.With(ctx, caller.Caller{})
}

// peerProcess is the pid of the process at the other end of a Unix
// connection as it was when it connected (SO_PEERCRED), and a check that
// it is still that process: through a pidfd of the peer (SO_PEERPIDFD,
// Linux 6.5), so that a recycled pid is never taken for it.
func peerProcess(c net.Conn) (int, func() bool, error) {
	pid, err := peerPID(c)
	if err != nil {
		return 0, nil, err
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	pidfd := -1
	raw.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = v
		}
	})
	if pidfd < 0 {
		// Older kernels: the pid cannot be recycled while the peer's end
		// is open, which holds for a peer that is still connected.
		return pid, func() bool { return true }, nil
	}
	return pid, func() bool {
		// A pidfd turns readable when its process exits (a signal would
		// need permission to send, which a daemon has not over root's
		// processes).
		defer unix.Close(pidfd)
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 0
	}, nil
}

// peerPID is the pid of the process at the other end of a Unix connection,
// as it was when it connected (SO_PEERCRED).
func peerPID(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("not a unix connection")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return int(cred.Pid), nil
}

// Close stops serving: the server shut down (within ctx, then closed),
// every socket closed, the Serve loop waited for. Listen fails from then on.
func (ss *Sockets) Close(ctx context.Context) {
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
	if err := ss.srv.Shutdown(ctx); err != nil {
		ss.srv.Close()
	}
	ss.mu.Lock()
	socks := make([]*Socket, 0, len(ss.socks))
	for _, s := range ss.socks {
		socks = append(socks, s)
	}
	m := ss.mux
	ss.mu.Unlock()
	CloseAll(socks)
	if m != nil {
		m.Close() // Shutdown closed it, unless Serve had not yet begun
	}
	ss.wg.Wait()
}
