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
	os.Exit(m.Run())
}

func kinCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KIN_TEST_AS_KIN=1", "KIN_ADDR=")
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

func TestServeStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			home := kintest.TempHome(t)
			var stderr syncBuffer
			cmd := kinCommand(t, "serve", "--home", home, "--http", "off")
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-waited
			})
			kintest.WaitFor(t, 30*time.Second, "kin serve to listen", func() bool {
				return strings.Contains(stderr.String(), "kin serve: listening")
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				waited <- err // for the cleanup
				if code := exitCode(t, err); code != 0 {
					t.Fatalf("exit %d after %s:\n%s", code, sig, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("kin serve still running 30s after %s", sig)
			}
			if !strings.Contains(stderr.String(), `"msg":"kin serve stopped"`) {
				t.Errorf("no clean shutdown:\n%s", stderr.String())
			}
		})
	}
}
