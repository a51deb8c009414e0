// Package exampletest is what the end-to-end tests of examples/ and
// integrations/ share: a kin binary, real processes (kin serve among them)
// started and stopped for a test, and commands run within a deadline. Only
// tests use it.
package exampletest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Kin returns the kin binary the examples run: $KIN_EXAMPLE_BIN, or kin
// built into a directory every uid may read (agents run as their own uids
// when the test runs as root). kin publishes itself to its agents only when
// its binary is named kin, so $KIN_EXAMPLE_BIN must name one called kin.
func Kin(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("KIN_EXAMPLE_BIN"); bin != "" {
		return bin
	}
	return Build(t, kintest.SharedDir(t), "kin", "github.com/kin-agents/kin/cmd/kin")
}

// Build builds package pkg as dir/name and returns its path.
func Build(t testing.TB, dir, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Proc is a process the test started; it is stopped when the test ends.
type Proc struct {
	// Line is the first line the process printed, or, when that line is
	// "{", the indented JSON object it began (kin serve --json's).
	Line string

	cmd    *exec.Cmd
	stderr Buffer
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// Start starts bin with args in a clean environment (see env) and waits
// for its first line, for at most 60 s.
func Start(t *testing.T, bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env()
	return StartCmd(t, cmd)
}

// StartCmd is Start for a command the test prepared itself (its
// environment, credential, cgroup): its stdout and stderr are the Proc's.
func StartCmd(t *testing.T, cmd *exec.Cmd) *Proc {
	t.Helper()
	p, err := Launch(cmd, 60*time.Second)
	if p != nil {
		t.Cleanup(func() { p.Stop() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch is StartCmd without a test: it starts cmd and waits for its
// first line for at most within. Stopping the process is the caller's
// (Stop, Kill): Launch returns it whenever it started, with an error too
// if it printed no line, so that a harness outliving one test's cleanup
// (a daemon restarted from a subtest) owns it.
func Launch(cmd *exec.Cmd, within time.Duration) (*Proc, error) {
	bin := cmd.Path
	p := &Proc{cmd: cmd, exited: make(chan struct{})}
	first := &firstOutput{c: make(chan string, 1)}
	p.cmd.Stdout = first
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 10 * time.Second // should a child of its keep stdout open
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	select {
	case p.Line = <-first.c:
	case <-p.exited:
		select { // Wait returns only once stdout is copied
		case p.Line = <-first.c:
		default:
			return p, fmt.Errorf("%s exited (%v) without a line; stderr: %s", bin, p.err, p.Stderr())
		}
	case <-time.After(within):
		return p, fmt.Errorf("%s printed nothing in %v; stderr: %s", bin, within, p.Stderr())
	}
	return p, nil
}

// Stop stops the process with SIGTERM (SIGKILL after 30 s) and returns how
// it exited. Stopping it again returns the same.
func (p *Proc) Stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	return p.err
}

// Exited is closed once the process has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Pid is the process's pid.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill kills the process with SIGKILL and waits until it is reaped.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// Stderr is what the process has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Daemon is a `kin serve` the test started on a temporary home.
type Daemon struct {
	Bin, Home    string
	Socket, HTTP string // from kin serve --json; HTTP is empty with --http off
	Client       *client.Client
}

// Serve starts `kin serve --json` with args on a temporary home and a
// client on its socket. When the test ends it logs, if the test failed,
// every agent with its log and every event, then stops the daemon.
func Serve(t *testing.T, bin string, args ...string) *Daemon {
	t.Helper()
	home := kintest.TempHome(t)
	cmd := exec.Command(bin, append([]string{"serve", "--home", home, "--json"}, args...)...)
	// A root daemon records its agent uid range host-wide: beside the
	// test's home, never in the host's /var/lib/kin.
	cmd.Env = append(env(), "KIN_UID_RANGE_DIR="+filepath.Join(filepath.Dir(home), "uid-ranges"))
	p := StartCmd(t, cmd)
	var info struct {
		Socket string `json:"socket"`
		HTTP   string `json:"http"`
	}
	if err := json.Unmarshal([]byte(p.Line), &info); err != nil || info.Socket == "" {
		t.Fatalf("kin serve --json said %q (%v); stderr: %s", p.Line, err, p.Stderr())
	}
	c, err := client.New(client.Config{Socket: info.Socket})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Bin: bin, Home: home, Socket: info.Socket, HTTP: info.HTTP, Client: c}
	t.Cleanup(func() {
		defer c.Close()
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		agents, _ := c.Agents(ctx, kin.AgentFilter{})
		for _, a := range agents {
			t.Logf("agent %d %s: %s exit %v result %s; log:\n%s", a.ID, a.Name, a.State, a.Exit, a.Result, d.Logs(a.ID))
		}
		es, _ := c.Events(ctx, kin.EventFilter{})
		for _, e := range es {
			t.Logf("event %s agent %d parent %d %s", e.Type, e.Agent, e.Parent, e.Data)
		}
	})
	return d
}

// Kin runs `kin --home HOME args...` against the daemon, within a deadline,
// and returns its combined output.
func (d *Daemon) Kin(args ...string) (string, error) {
	return run(nil, d.Bin, append([]string{"--home", d.Home}, args...)...)
}

// Logs returns agent id's log ("" if kin has none).
func (d *Daemon) Logs(id kin.AgentID) string {
	var b strings.Builder
	d.Client.Logs(context.Background(), kin.LogsRequest{ID: id}, func(p []byte) error { b.Write(p); return nil })
	return b.String()
}

// Events returns the daemon's events of the given types.
func (d *Daemon) Events(t *testing.T, types ...string) []kin.Event {
	t.Helper()
	es, err := d.Client.Events(context.Background(), kin.EventFilter{Types: types})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// RunScript runs the example's ./run.sh with args and kin bin ($KIN),
// within a deadline, and returns its combined output.
func RunScript(t *testing.T, bin string, args ...string) (string, error) {
	// A kin serve run.sh starts records its agent uid range host-wide, as
	// a reader's would: in the test's directory, not the host's /var/lib/kin.
	return run([]string{"KIN=" + bin, "KIN_UID_RANGE_DIR=" + t.TempDir()}, "./run.sh", args...)
}

// run runs name with args in a clean environment plus extraEnv, for at
// most 3 minutes.
func run(extraEnv []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(env(), extraEnv...)
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Env is the test's environment without what would make kin act as an
// agent, talk to another daemon, or leave agents running when it stops:
// the environment Start and Kin give kin.
func Env() []string { return env() }

func env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "KIN_SOCKET", "KIN_ADDR", "KIN_HOME", "KIN_PROFILE", "KIN_TOKEN", "KIN_LEAVE_RUNNING":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// firstOutput is a process's stdout: it sends the first line (or the first
// indented JSON object, when that line is "{") on c and drops the rest.
type firstOutput struct {
	mu   sync.Mutex
	b    []byte
	sent bool
	c    chan string
}

func (f *firstOutput) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return len(p), nil
	}
	f.b = append(f.b, p...)
	s := string(f.b)
	end := strings.IndexByte(s, '\n')
	if end < 0 {
		return len(p), nil
	}
	if s[:end] == "{" { // up to the line that closes it
		i := strings.Index(s, "\n}")
		if i < 0 {
			return len(p), nil
		}
		if end = strings.IndexByte(s[i+1:], '\n'); end < 0 {
			return len(p), nil
		}
		end += i + 1
	}
	f.sent = true
	f.b = nil
	f.c <- strings.TrimSpace(s[:end])
	return len(p), nil
}

// Buffer is a process's output, written by exec's copier goroutine and
// read by the test while the process runs.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WantAll fails t for each of wants that out lacks, naming what out is
// and showing it once.
func WantAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	missing := false
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q", what, w)
			missing = true
		}
	}
	if missing {
		t.Logf("%s:\n%s", what, out)
	}
}
