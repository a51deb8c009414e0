package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
)

// TestMain lets the test binary act as kin itself: with KIN_TEST_AS_KIN=1 it
// runs main, so the tests below see real exit statuses and signals.
func TestMain(m *testing.M) {
	if os.Getenv("KIN_TEST_AS_KIN") == "1" {
		main()
		return
	}
	code := m.Run()
	kintest.RemoveAgentBinary()
	os.Exit(code)
}

func kinCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// A daemon started here allocates its agent uid range from a directory
	// of the test's own, never the host's /var/lib/kin.
	cmd.Env = append(os.Environ(), "KIN_TEST_AS_KIN=1", "KIN_ADDR=", "KIN_UID_RANGE_DIR="+t.TempDir())
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestExitStatus(t *testing.T) {
	home := kintest.TempHome(t)
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"status", "--bogus"}, 2},
		{[]string{"frobnicate"}, 2},
		{[]string{"status", "--home", home}, 1}, // no daemon there
	} {
		var stderr bytes.Buffer
		cmd := kinCommand(t, c.args...)
		cmd.Stderr = &stderr
		if got := exitCode(t, cmd.Run()); got != c.want {
			t.Errorf("kin %s: exit %d, want %d; stderr: %s", strings.Join(c.args, " "), got, c.want, stderr.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// served is a kin serve started by startServe.
type served struct {
	cmd     *exec.Cmd
	stderr  syncBuffer
	waited  chan error
	stopped bool
	code    int
}

// startServe starts kin serve --home home --http off, waits until it
// listens, and stops it when the test ends if stop was not called.
func startServe(t *testing.T, home string) *served {
	t.Helper()
	s := &served{cmd: kinCommand(t, "serve", "--home", home, "--http", "off"), waited: make(chan error, 1)}
	// The daemon starts every agent through itself (the sandbox shim), as
	// the agent's uid: run the copy of the test binary every uid may
	// execute, not the one in go test's private directory.
	s.cmd.Path = kintest.AgentBinary(t)
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if !s.stopped {
			s.stop(t, syscall.SIGTERM) // a clean stop removes its cgroup
		}
	})
	kintest.WaitFor(t, 30*time.Second, "kin serve to listen", func() bool {
		return strings.Contains(s.stderr.String(), "kin serve: listening")
	})
	return s
}

// stop sends sig and returns kin serve's exit status; a second call returns
// the first's.
func (s *served) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if s.stopped {
		return s.code
	}
	s.stopped = true
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.waited:
		s.code = exitCode(t, err)
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.waited
		t.Fatalf("kin serve still running 30s after %s", sig)
	}
	return s.code
}

func TestServeStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startServe(t, kintest.TempHome(t))
			if code := s.stop(t, sig); code != 0 {
				t.Fatalf("exit %d after %s:\n%s", code, sig, s.stderr.String())
			}
			if !strings.Contains(s.stderr.String(), `"msg":"kin serve stopped"`) {
				t.Errorf("no clean shutdown:\n%s", s.stderr.String())
			}
		})
	}
}
