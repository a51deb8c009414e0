package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime" // the package has a type named runtime
	"strconv"
	"sync"
	"sync/atomic"

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

// agentSocket is one agent's listener and its open connections.
type agentSocket struct {
	id     kin.AgentID
	path   string
	ln     net.Listener
	forget func() // drops it from the daemon's map

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (run *Runner) socketPath(name string) string {
	return filepath.Join(run.ctxDir, "agent", name+".sock")
}

func (run *Runner) checkSocketPath(name string) error {
	if p := run.socketPath(name); len(p) > maxSocketPath {
		return kin.Errorf(kin.ECodeInvalid, "the agent's socket path %s is %d bytes long; Unix sockets allow %d: use a shorter name or a shorter home", p, len(p), maxSocketPath)
	}
	return nil
}

// listenAgent opens an agent's socket and serves it.
func (run *Runner) listenAgent(a *kin.Agent) (*agentSocket, error) {
	path := run.socketPath(a.Name)
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
	if cred := run.agentCredential(a.ID); cred != nil {
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
	s := &agentSocket{id: a.ID, path: path, ln: ln, conns: map[net.Conn]struct{}{}}
	s.forget = func() {
		run.sockMu.Lock()
		if run.socks[path] == s {
			delete(run.socks, path)
		}
		run.sockMu.Unlock()
	}
	run.sockMu.Lock()
	run.socks[path] = s
	run.sockMu.Unlock()
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		if err := run.agentSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			run.log.Debug("agent socket", "agent", a.ID, "err", err)
		}
	}()
	return s, nil
}

// close stops accepting, closes the open connections and removes the file.
// Closing the listener unlinks the file (net.UnixListener removes the socket
// file it created); removing the path again would cost two failing system
// calls per agent, and could remove the socket of a later agent of that name.
func (s *agentSocket) close() {
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

// closeSockets closes socks, several at a time when there are many: each
// close unlinks a file, and a cancellation closes the sockets of its whole
// subtree before it may kill anything (about 30 ms one by one for 1,110
// agents here, 10 ms on two cores).
func closeSockets(socks []*agentSocket) {
	workers := min(goruntime.GOMAXPROCS(0), len(socks)/64)
	if workers <= 1 {
		for _, s := range socks {
			s.close()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(socks); i = int(next.Add(1) - 1) {
				socks[i].close()
			}
		})
	}
	wg.Wait()
}

// agentConnContext identifies the agent a connection on an agent socket
// acts for, and checks the peer.
func (run *Runner) agentConnContext(ctx context.Context, c net.Conn) context.Context {
	run.sockMu.Lock()
	s := run.socks[c.LocalAddr().String()]
	run.sockMu.Unlock()
	if s == nil {
		return caller.With(ctx, caller.Caller{Refused: "this agent socket is closed"})
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return caller.With(ctx, caller.Caller{Refused: "this agent has ended"})
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	pid, err := peerPID(c)
	if err != nil || !run.sup.PeerInCgroup(pid, s.id) {
		run.log.Warn("agent socket used from outside the agent", "agent", s.id, "peer_pid", pid, "err", err)
		return caller.With(ctx, caller.Caller{Refused: fmt.Sprintf("this socket belongs to agent %d, and the connecting process (pid %d) is not one of its processes", s.id, pid)})
	}
	return caller.With(ctx, caller.Caller{Agent: s.id})
}

// agentConnState forgets closed connections.
func (run *Runner) agentConnState(c net.Conn, state http.ConnState) {
	if state != http.StateClosed && state != http.StateHijacked {
		return
	}
	run.sockMu.Lock()
	s := run.socks[c.LocalAddr().String()]
	run.sockMu.Unlock()
	if s != nil {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}
}

// operatorConnContext marks connections on the operator socket. Whoever
// can open it is the operator, except a process inside kin's containment:
// an agent's (in any agent's cgroup or PID namespace, known or not) is
// refused, in every mode. Agents that share the daemon's uid could
// otherwise open the 0600 socket and act as the operator; they talk to kin
// through their own socket ($KIN_SOCKET) instead.
func (run *Runner) operatorConnContext(ctx context.Context, c net.Conn) context.Context {
	pid, alive, err := peerProcess(c)
	if err != nil {
		return caller.With(ctx, caller.Caller{Refused: "cannot identify the connecting process: " + err.Error()})
	}
	id, contained := run.sup.Contained(pid)
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
		run.log.Warn("operator socket used by an agent", "agent", id, "peer_pid", pid)
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
