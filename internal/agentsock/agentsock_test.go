package agentsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// fakePeers stands in for the supervisor's containment, which needs agents
// in cgroups: every process is this test process, and it belongs to the
// agents listed in mine.
type fakePeers struct{ mine map[kin.AgentID]bool }

func (p fakePeers) PeerInCgroup(pid int, id kin.AgentID) bool {
	return pid == os.Getpid() && p.mine[id]
}

func (p fakePeers) Contained(int) (kin.AgentID, bool) { return 0, false }

// whoHandler answers who the connection acts for: the agent's id, or
// "refused: why".
var whoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	c := caller.Of(r.Context())
	if c.Refused != "" {
		fmt.Fprint(w, "refused: "+c.Refused)
		return
	}
	fmt.Fprint(w, c.Agent)
})

// newSockets serves agents' sockets in a fresh directory with fakePeers
// claiming mine; the test's end closes them and checks that no goroutine
// is left.
func newSockets(t *testing.T, mine ...kin.AgentID) *Sockets {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentsock") // short: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	peers := fakePeers{mine: map[kin.AgentID]bool{}}
	for _, id := range mine {
		peers.mine[id] = true
	}
	before := runtime.NumGoroutine()
	ss := New(Config{Dir: dir, Handler: whoHandler, Peers: peers})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ss.Close(ctx)
		waitFor(t, 5*time.Second, "the server's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%d files left in the sockets' directory after Close, e.g. %s", len(ents), ents[0].Name())
		}
		os.RemoveAll(dir)
	})
	return ss
}

func listen(t *testing.T, ss *Sockets, id kin.AgentID) *Socket {
	t.Helper()
	s, err := ss.Listen(&kin.Agent{ID: id, Name: "a" + strconv.Itoa(int(id))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ask sends one request on c and returns the body, or the error.
func ask(c net.Conn) (string, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET /who HTTP/1.1\r\nHost: kin\r\n\r\n")); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// askOnce dials path, asks once and hangs up.
func askOnce(path string) (string, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return ask(c)
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for delay := time.Millisecond; !cond(); delay = min(delay*2, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(delay)
	}
}

// TestOneLoopServesManySocketsFakePeers: 300 agents' sockets are served by
// one goroutine (not one each), and a connection on each acts as the agent
// whose socket it came in on.
func TestOneLoopServesManySocketsFakePeers(t *testing.T) {
	const n = 300
	var ids []kin.AgentID
	for i := range n {
		ids = append(ids, kin.AgentID(i+1))
	}
	ss := newSockets(t, ids...)
	before := runtime.NumGoroutine()
	var socks []*Socket
	for _, id := range ids {
		socks = append(socks, listen(t, ss, id))
	}
	if grew := runtime.NumGoroutine() - before; grew > 1 {
		t.Errorf("%d sockets started %d goroutines, want 1 for them all", n, grew)
	}
	for i, s := range socks {
		fi, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want a socket with mode 0600", s.Path(), fi.Mode())
		}
		got, err := askOnce(s.Path())
		if want := strconv.Itoa(int(ids[i])); err != nil || got != want {
			t.Fatalf("a connection on %s acts for %q (%v), want agent %s", s.Path(), got, err, want)
		}
	}
}

// TestPeerOutsideTheAgentIsRefusedFakePeers: a connection from a process
// that is not one of the socket's agent's acts for nobody.
func TestPeerOutsideTheAgentIsRefusedFakePeers(t *testing.T) {
	ss := newSockets(t, 1)
	listen(t, ss, 1)
	other := listen(t, ss, 2) // this process is not agent 2's
	got, err := askOnce(other.Path())
	if err != nil || got != "refused: this socket belongs to agent 2, and the connecting process (pid "+strconv.Itoa(os.Getpid())+") is not one of its processes" {
		t.Fatalf("a stranger on agent 2's socket: %q, %v", got, err)
	}
}

// TestClosedSocketRefusesAtOnceFakePeers: once Close returns, the socket
// refuses connections (through another link to the same socket file too,
// so not only because its path is gone), its open connections are closed,
// and another agent's socket and connections are untouched.
func TestClosedSocketRefusesAtOnceFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 2)
	s1, s2 := listen(t, ss, 1), listen(t, ss, 2)
	link := s1.Path() + ".link"
	if err := os.Link(s1.Path(), link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	held1, err := net.Dial("unix", s1.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer held1.Close()
	held2, err := net.Dial("unix", s2.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer held2.Close()
	for _, c := range []net.Conn{held1, held2} {
		if _, err := ask(c); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := askOnce(link); err != nil || got != "1" {
		t.Fatalf("through the link before Close: %q, %v", got, err)
	}

	s1.Close()
	if _, err := net.Dial("unix", link); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a connect to the closed socket (through a link): %v, want ECONNREFUSED", err)
	}
	if _, err := os.Lstat(s1.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the closed socket's file: %v, want it removed", err)
	}
	held1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := held1.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("an open connection of the closed socket read %d bytes, %v; want EOF", n, err)
	}
	if got, err := ask(held2); err != nil || got != "2" {
		t.Errorf("the other agent's open connection after the close: %q, %v", got, err)
	}
	if got, err := askOnce(s2.Path()); err != nil || got != "2" {
		t.Errorf("the other agent's socket after the close: %q, %v", got, err)
	}
	s1.Close() // twice is safe
}

// TestShutSocketRefusesBeforeItsFileGoesFakePeers: once Shut returns (a
// cancellation's step 3, before it signals anything), the socket refuses
// connections and its open ones are closed while its file is still there;
// Unlink then removes the file, once, and a Close after it is a no-op.
// Another agent's socket is untouched throughout.
func TestShutSocketRefusesBeforeItsFileGoesFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 2)
	s1, s2 := listen(t, ss, 1), listen(t, ss, 2)
	held, err := net.Dial("unix", s1.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := ask(held); err != nil {
		t.Fatal(err)
	}

	ShutAll([]*Socket{s1})
	if _, err := net.Dial("unix", s1.Path()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a connect to the shut socket: %v, want ECONNREFUSED", err)
	}
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := held.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("an open connection of the shut socket read %d bytes, %v; want EOF", n, err)
	}
	if _, err := os.Lstat(s1.Path()); err != nil {
		t.Errorf("the shut socket's file before Unlink: %v, want it there", err)
	}
	if got, err := askOnce(s2.Path()); err != nil || got != "2" {
		t.Errorf("the other agent's socket after the shut: %q, %v", got, err)
	}

	UnlinkAll([]*Socket{s1})
	if _, err := os.Lstat(s1.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the shut socket's file after Unlink: %v, want it removed", err)
	}
	// A later agent's socket at the same path is not removed by a second
	// Unlink or a Close of the old one.
	again, err := ss.Listen(&kin.Agent{ID: 3, Name: "a1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Path() != s1.Path() {
		t.Fatalf("the later agent's socket is at %s, want %s", again.Path(), s1.Path())
	}
	s1.Unlink()
	s1.Close()
	if _, err := os.Lstat(again.Path()); err != nil {
		t.Errorf("the later agent's socket after the old one's second Unlink and Close: %v", err)
	}
	if got, err := askOnce(s2.Path()); err != nil || got != "2" {
		t.Errorf("the other agent's socket at the end: %q, %v", got, err)
	}
}

// TestConnectionCapPerSocketFakePeers: a socket holds MaxConns connections
// open at once and closes the next as soon as it is accepted; another
// agent's socket is not counted with it.
// TestListenUnlinksTheShutSocketOfItsPathFakePeers: a later agent of a
// name whose old socket is shut but not unlinked yet (a cancellation
// records its agents without waiting for their files) takes the path:
// Listen unlinks the old file itself, so that the old socket's unlink,
// when it comes, is a no-op and leaves the new socket's file in place.
func TestListenUnlinksTheShutSocketOfItsPathFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 3)
	old := listen(t, ss, 1)
	ShutAll([]*Socket{old})
	again, err := ss.Listen(&kin.Agent{ID: 3, Name: "a1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Path() != old.Path() {
		t.Fatalf("the later agent's socket is at %s, the old one at %s: the test needs one path", again.Path(), old.Path())
	}
	UnlinkAll([]*Socket{old}) // the cancellation's unlink, late
	if _, err := os.Lstat(again.Path()); err != nil {
		t.Fatalf("the later agent's socket file after the old one's late unlink: %v", err)
	}
	if got, err := askOnce(again.Path()); err != nil || got != "3" {
		t.Fatalf("the later agent's socket: %q, %v; want it served", got, err)
	}
}

func TestConnectionCapPerSocketFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 2)
	s1, s2 := listen(t, ss, 1), listen(t, ss, 2)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxConns {
		c, err := net.Dial("unix", s1.Path())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if got, err := ask(c); err != nil || got != "1" {
			t.Fatalf("connection %d of the cap: %q, %v", len(held), got, err)
		}
	}
	if got, err := askOnce(s1.Path()); err == nil {
		t.Fatalf("connection %d on one socket answered %q, want it closed", MaxConns+1, got)
	}
	if got, err := askOnce(s2.Path()); err != nil || got != "2" {
		t.Fatalf("another agent's socket while the first is at its cap: %q, %v", got, err)
	}
	held[0].Close()
	waitFor(t, 10*time.Second, "a closed connection to make room", func() bool {
		got, err := askOnce(s1.Path())
		return err == nil && got == "1"
	})
}

// TestFloodDoesNotStarveAnotherFakePeers: while other processes connect to
// one agent's socket as fast as they can, another agent's socket keeps
// answering, each request within the deadline of ask.
func TestFloodDoesNotStarveAnotherFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 2)
	var accepted atomic.Int64
	counted := ss.srv.ConnState // before the server starts
	ss.srv.ConnState = func(c net.Conn, st http.ConnState) {
		if ac, ok := c.(*agentConn); ok && st == http.StateNew && ac.sock.id == 1 {
			accepted.Add(1)
		}
		counted(c, st)
	}
	flooded, quiet := listen(t, ss, 1), listen(t, ss, 2)
	for range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), floodEnv+"="+flooded.Path())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	waitFor(t, 20*time.Second, "the flood to begin", func() bool { return accepted.Load() > 1000 })
	start := accepted.Load()
	var took []time.Duration
	for i := range 50 {
		t0 := time.Now()
		if got, err := askOnce(quiet.Path()); err != nil || got != "2" {
			t.Fatalf("request %d on the quiet socket during the flood: %q, %v", i, got, err)
		}
		took = append(took, time.Since(t0))
	}
	if accepted.Load() == start {
		t.Fatalf("the flood stopped while the quiet socket was asked: the test measured nothing")
	}
	slices.Sort(took)
	t.Logf("50 requests on the quiet socket during %d connections on the flooded one: p50 %v, max %v", accepted.Load()-start, took[25], took[49])
}

// floodEnv makes the test binary a flooder of the socket it names
// (TestMain).
const floodEnv = "AGENTSOCK_TEST_FLOOD"

func TestMain(m *testing.M) {
	if path := os.Getenv(floodEnv); path != "" {
		// Connect and hang up, until killed (or the socket is gone).
		for {
			c, err := net.Dial("unix", path)
			if err != nil && !errors.Is(err, syscall.EAGAIN) {
				os.Exit(0)
			}
			if c != nil {
				c.Close()
			}
		}
	}
	os.Exit(m.Run())
}

// TestListenAfterCloseFailsFakePeers: a stopping daemon opens no socket
// that nobody would serve.
func TestListenAfterCloseFailsFakePeers(t *testing.T) {
	ss := newSockets(t, 1)
	s := listen(t, ss, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ss.Close(ctx)
	if _, err := os.Lstat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket's file after Close: %v, want it removed", err)
	}
	if _, err := ss.Listen(&kin.Agent{ID: 3, Name: "late"}, nil); err == nil {
		t.Fatal("Listen after Close succeeded")
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(s.Path()), "late.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Listen after Close left a socket file: %v", err)
	}
}

// TestListenReplacesAStaleFileFakePeers: a file left at an agent's socket
// path (an earlier agent of that name, a crash) is replaced by the new
// socket, which has mode 0600 whatever the umask lets through; a
// directory there is not removed and fails the listen.
func TestListenReplacesAStaleFileFakePeers(t *testing.T) {
	ss := newSockets(t, 1, 2)
	stale := ss.Path("a1")
	if err := os.WriteFile(stale, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := listen(t, ss, 1)
	st, err := os.Lstat(s.Path())
	if err != nil || st.Mode() != os.ModeSocket|0o600 {
		t.Fatalf("the socket over a stale file: %v %v, want a socket of mode 0600", st, err)
	}
	if got, err := askOnce(s.Path()); err != nil || got != "1" {
		t.Fatalf("ask agent 1: %q %v", got, err)
	}
	dir := ss.Path("a2")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	if _, err := ss.Listen(&kin.Agent{ID: 2, Name: "a2"}, nil); err == nil {
		t.Fatal("Listen over a directory succeeded")
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		t.Errorf("the directory at the socket's path: %v %v", st, err)
	}
}
