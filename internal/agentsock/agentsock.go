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

// Sockets serves every agent's own socket with one HTTP server.
type Sockets struct {
	dir   string // <ctx>/agent
	srv   *http.Server
	peers Peers
	log   *slog.Logger

	mu    sync.Mutex
	socks map[string]*Socket // by socket path
	wg    sync.WaitGroup     // the Serve loops
}

// Config is what Sockets are built from.
type Config struct {
	Dir     string       // where the sockets are: <ctx>/agent
	Handler http.Handler // the API as agents reach it
	Peers   Peers
	Log     *slog.Logger
}

// New makes the agents' socket server; nothing listens until Listen.
func New(c Config) *Sockets {
	s := &Sockets{dir: c.Dir, peers: c.Peers, log: c.Log, socks: map[string]*Socket{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.srv = &http.Server{
		Handler:           c.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       IdleTimeout,
		ConnContext:       s.connContext,
		ConnState:         s.connState,
	}
	return s
}

// Socket is one agent's listener and its open connections.
type Socket struct {
	id     kin.AgentID
	path   string
	ln     net.Listener
	forget func() // drops it from the daemon's map

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	closed    bool
	capWarned bool // MaxConns was reached and logged
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
	path := ss.Path(a.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// A socket file left by an earlier agent of that name (names are unique
	// only among live agents) or by a crash is stale.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// No umask games here: the umask is process-wide, and flipping it on
	// every spawn would change the mode of whatever another goroutine
	// creates at that moment. Until the chmod below the socket has the
	// daemon's usual mode; a process that connects in that window is still
	// refused by the peer check in agentConnContext.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if cred != nil {
		// Only the agent's uid may connect (and the peer check still applies).
		if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			ln.Close()
			return nil, fmt.Errorf("agent socket: %w", err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	s := &Socket{id: a.ID, path: path, ln: ln, conns: map[net.Conn]struct{}{}}
	s.forget = func() {
		ss.mu.Lock()
		if ss.socks[path] == s {
			delete(ss.socks, path)
		}
		ss.mu.Unlock()
	}
	ss.mu.Lock()
	ss.socks[path] = s
	ss.mu.Unlock()
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		if err := ss.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			ss.log.Debug("agent socket", "agent", a.ID, "err", err)
		}
	}()
	return s, nil
}

// Path is the socket's file.
func (s *Socket) Path() string { return s.path }

// Close stops accepting, closes the open connections and removes the file.
// Closing the listener unlinks the file (net.UnixListener removes the socket
// file it created); removing the path again would cost two failing system
// calls per agent, and could remove the socket of a later agent of that name.
func (s *Socket) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.ln.Close()
	for c := range conns {
		c.Close()
	}
	s.forget()
}

// CloseAll closes socks, several at a time when there are many: each
// close unlinks a file, and a cancellation closes the sockets of its whole
// subtree before it may kill anything (about 30 ms one by one for 1,110
// agents here, 10 ms on two cores).
func CloseAll(socks []*Socket) {
	workers := min(goruntime.GOMAXPROCS(0), len(socks)/64)
	if workers <= 1 {
		for _, s := range socks {
			s.Close()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(socks); i = int(next.Add(1) - 1) {
				socks[i].Close()
			}
		})
	}
	wg.Wait()
}

// connContext identifies the agent a connection on an agent socket acts
// for, and checks the peer.
func (ss *Sockets) connContext(ctx context.Context, c net.Conn) context.Context {
	ss.mu.Lock()
	s := ss.socks[c.LocalAddr().String()]
	ss.mu.Unlock()
	if s == nil {
		return caller.With(ctx, caller.Caller{Refused: "this agent socket is closed"})
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return caller.With(ctx, caller.Caller{Refused: "this agent has ended"})
	}
	if len(s.conns) >= MaxConns {
		warn := !s.capWarned // once a socket: the log is not the agent's to fill
		s.capWarned = true
		s.mu.Unlock()
		c.Close()
		if warn {
			ss.log.Warn("agent socket: connections refused past the cap", "agent", s.id, "open", MaxConns)
		}
		return caller.With(ctx, caller.Caller{Refused: fmt.Sprintf("agent %d holds %d connections open at once", s.id, MaxConns)})
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	pid, err := peerPID(c)
	if err != nil || !ss.peers.PeerInCgroup(pid, s.id) {
		ss.log.Warn("agent socket used from outside the agent", "agent", s.id, "peer_pid", pid, "err", err)
		return caller.With(ctx, caller.Caller{Refused: fmt.Sprintf("this socket belongs to agent %d, and the connecting process (pid %d) is not one of its processes", s.id, pid)})
	}
	return caller.With(ctx, caller.Caller{Agent: s.id})
}

// connState forgets closed connections.
func (ss *Sockets) connState(c net.Conn, state http.ConnState) {
	if state != http.StateClosed && state != http.StateHijacked {
		return
	}
	ss.mu.Lock()
	s := ss.socks[c.LocalAddr().String()]
	ss.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		delete(s.conns, c)
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
	uc := c.(*net.UnixConn)
	raw, err := uc.SyscallConn()
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
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a unix connection")
	}
	raw, err := uc.SyscallConn()
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
// every socket closed, the Serve loops waited for.
func (ss *Sockets) Close(ctx context.Context) {
	if err := ss.srv.Shutdown(ctx); err != nil {
		ss.srv.Close()
	}
	ss.mu.Lock()
	socks := make([]*Socket, 0, len(ss.socks))
	for _, s := range ss.socks {
		socks = append(socks, s)
	}
	ss.mu.Unlock()
	for _, s := range socks {
		s.Close()
	}
	ss.wg.Wait()
}
