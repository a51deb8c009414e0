package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
)

var update = flag.Bool("update", false, "rewrite the golden files of the end-to-end tests (testdata/top.golden)")

// tmuxSession is a detached tmux session on its own server, running one
// command in a pane of a fixed size.
type tmuxSession struct {
	t      *testing.T
	socket string // tmux -S: the server's own socket, in a directory of the test's
}

// startTmux starts cmdline (a shell command) in a new tmux server, and
// kills the server and the command when the test ends, however it ends.
func startTmux(t *testing.T, width, height int, cmdline string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: the end-to-end test of kin top needs it")
	}
	dir, err := os.MkdirTemp("", "kintmux") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	s := &tmuxSession{t: t, socket: filepath.Join(dir, "tmux.sock")}
	pid := 0
	t.Cleanup(func() {
		defer os.RemoveAll(dir)
		s.tmux("kill-server") // ends the session; its pane's process gets SIGHUP
		if pid > 0 {
			waitGone(t, pid)
		}
	})
	if out, err := s.tmux("new-session", "-d", "-s", "top", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), cmdline); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	out, err := s.tmux("display-message", "-p", "-t", "top", "#{pane_pid}")
	if err != nil {
		t.Fatalf("tmux display-message: %v\n%s", err, out)
	}
	if pid, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
		t.Fatalf("pane pid %q: %v", out, err)
	}
	return s
}

// tmux runs a tmux command on the session's server, with no user config.
func (s *tmuxSession) tmux(args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-S", s.socket, "-f", "/dev/null"}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// screen returns the pane's text, each line right-trimmed, without the
// blank lines at the end.
func (s *tmuxSession) screen() string {
	s.t.Helper()
	out, err := s.tmux("capture-pane", "-p", "-t", "top")
	if err != nil {
		s.t.Fatalf("tmux capture-pane: %v\n%s", err, out)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
}

// keys sends keys (tmux key names: Down, End, s, ...).
func (s *tmuxSession) keys(keys ...string) {
	s.t.Helper()
	if out, err := s.tmux(append([]string{"send-keys", "-t", "top"}, keys...)...); err != nil {
		s.t.Fatalf("tmux send-keys %v: %v\n%s", keys, err, out)
	}
}

// waitScreen waits until cond holds for the screen and returns it.
func (s *tmuxSession) waitScreen(what string, cond func(screen string) bool) string {
	s.t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	kintest.WaitFor(s.t, 31*time.Second, what, func() bool {
		last = s.screen()
		if cond(last) {
			return true
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s; the screen:\n%s", what, last)
		}
		return false
	})
	return last
}

// waitLine waits until the screen's line containing name also contains
// every one of want.
func (s *tmuxSession) waitLine(name string, want ...string) {
	s.t.Helper()
	s.waitScreen(fmt.Sprintf("the line of %s to show %q", name, want), func(screen string) bool {
		for _, l := range strings.Split(screen, "\n") {
			if strings.Contains(l, name) {
				for _, w := range want {
					if !strings.Contains(l, w) {
						return false
					}
				}
				return true
			}
		}
		return false
	})
}

// waitGone waits until process pid has ended, and kills it if it has not
// within a few seconds.
func waitGone(t *testing.T, pid int) {
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("kin top (pid %d) still ran 10s after its tmux server was killed", pid)
			return
		}
		time.Sleep(delay)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// registerSeedTree registers seed 000's example tree as README.md's
// walk-through does.
func registerSeedTree(t *testing.T, home string) {
	t.Helper()
	for _, args := range [][]string{
		{"--name", "Research-Coordinator", "--role", "coordinator", "--responsible", "Dr. Schmidt, COAI Research"},
		{"--name", "Data-Collector", "--role", "collector", "--parent", "1"},
		{"--name", "Report-Writer", "--role", "writer", "--parent", "1"},
		{"--name", "Peer-Reviewer", "--role", "reviewer", "--parent", "1"},
		{"--name", "Web-Scraper", "--role", "scraper", "--parent", "2"},
		{"--name", "API-Fetcher", "--role", "fetcher", "--parent", "2"},
		{"--name", "LaTeX-Formatter", "--role", "formatter", "--parent", "3"},
	} {
		if _, code := kinOut(t, append([]string{"register", "--home", home}, args...)...); code != 0 {
			t.Fatalf("kin register %v: exit %d", args, code)
		}
	}
}

// TestTopEndToEnd runs the real kin top in tmux against a real kin serve:
// the seed tree against a golden screen, a live registration, a stop with
// its confirmation, a suspend and a resume, and q.
func TestTopEndToEnd(t *testing.T) {
	home := kintest.TempHome(t)
	startServe(t, home)
	registerSeedTree(t, home)

	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	cmdline := fmt.Sprintf("exec env -u KIN_SOCKET -u KIN_TOKEN KIN_TEST_AS_KIN=1 KIN_ADDR= KIN_HOME=%s %s top",
		shellQuote(home), shellQuote(self))
	s := startTmux(t, 100, 20, cmdline)

	screen := s.waitScreen("the tree", func(screen string) bool {
		return strings.Contains(screen, "#7 LaTeX-Formatter") && strings.Contains(screen, "q quit")
	})
	screen = strings.ReplaceAll(screen, home, "$KIN_HOME")
	golden := filepath.Join("testdata", "top.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(screen), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/kin -run TestTopEndToEnd -update to create it)", err)
	}
	if screen != string(want) {
		t.Errorf("the screen differs from %s (-update rewrites it):\n%s\nwant:\n%s", golden, screen, want)
	}

	// A registration from elsewhere shows up: the screen follows events.
	if _, code := kinOut(t, "register", "--home", home, "--name", "Citation-Checker", "--role", "checker", "--parent", "4"); code != 0 {
		t.Fatalf("kin register: exit %d", code)
	}
	s.waitLine("#8 Citation-Checker", "└── #8 Citation-Checker", "checker", "active", "registered")

	// Stop Data-Collector: the question names its two descendants.
	s.keys("Down")
	s.waitLine("#2 Data-Collector", "> ├── #2 Data-Collector")
	s.keys("s")
	s.waitScreen("the stop confirmation", func(screen string) bool {
		return strings.Contains(screen, "Stop #2 Data-Collector and its 2 descendants? y/n")
	})
	s.keys("y")
	for _, name := range []string{"#2 Data-Collector", "#5 Web-Scraper", "#6 API-Fetcher"} {
		s.waitLine(name, "terminated", "cancelled")
	}
	s.waitScreen("the outcome and the new counts", func(screen string) bool {
		return strings.Contains(screen, "Stopped 3 agents: #2 #5 #6") && strings.Contains(screen, "8 agents: 5 registered, 3 cancelled")
	})
	if out, _ := kinOut(t, "show", "6", "--home", home); !strings.Contains(out, "cancelled") {
		t.Errorf("the daemon does not have #6 cancelled:\n%s", out)
	}

	// Suspend and resume Peer-Reviewer: the row above the last, #8.
	s.keys("End", "Up")
	s.waitLine("#4 Peer-Reviewer", "> └── #4 Peer-Reviewer")
	s.keys("p")
	s.waitScreen("the suspend confirmation", func(screen string) bool {
		return strings.Contains(screen, "Suspend #4 Peer-Reviewer? y/n")
	})
	s.keys("y")
	s.waitLine("#4 Peer-Reviewer", "suspended")
	if out, _ := kinOut(t, "show", "4", "--home", home); !strings.Contains(out, "suspended") {
		t.Errorf("the daemon does not have #4 suspended:\n%s", out)
	}
	s.keys("r")
	s.waitScreen("the resume confirmation", func(screen string) bool {
		return strings.Contains(screen, "Resume #4 Peer-Reviewer? y/n")
	})
	s.keys("y")
	s.waitScreen("the resume", func(screen string) bool {
		return strings.Contains(screen, "Resumed #4 Peer-Reviewer") && !strings.Contains(screen, "suspended")
	})

	// q ends kin top, and with it the session.
	s.keys("q")
	kintest.WaitFor(t, 30*time.Second, "kin top to quit", func() bool {
		_, err := s.tmux("has-session", "-t", "top")
		return err != nil
	})
}

func TestTopNeedsTerminal(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := kinCommand(t, "top", "--home", kintest.TempHome(t)) // no daemon either: the terminal comes first
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "kin top needs a terminal") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func TestTopHelp(t *testing.T) {
	out, code := kinOut(t, "top", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"kin top [--root ID]", "--root ID", "Keys:", "Stop #2\nData-Collector and its 2 descendants? y/n", "needs a terminal"} {
		if !strings.Contains(out, want) {
			t.Errorf("kin top --help lacks %q:\n%s", want, out)
		}
	}
}
