package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// result is what one run of the CLI did.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in process with args.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// runCLIStdin is runCLI with stdin.
func runCLIStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// kinAt runs the CLI against the daemon d, through its socket.
func kinAt(t *testing.T, d *kintest.Daemon, args ...string) result {
	t.Helper()
	return runCLI(t, append([]string{"--home", d.Home}, args...)...)
}

func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != ExitOK || r.stderr != "" {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// wantError checks a failed run with --json: exit 1, nothing on stdout, the
// error object on stderr; it returns the message.
func wantError(t *testing.T, r result, code kin.ErrorCode) string {
	t.Helper()
	if r.code != ExitError {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if e.Code != code {
		t.Fatalf("error code = %q (%s), want %q", e.Code, e.Message, code)
	}
	return e.Message
}

// wantUsage checks a usage error: exit 2, stderr mentioning each of mention.
func wantUsage(t *testing.T, r result, mention ...string) {
	t.Helper()
	if r.code != ExitUsage {
		t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, m := range mention {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("stderr does not mention %q:\n%s", m, r.stderr)
		}
	}
}

// decodeOne decodes s, which must hold exactly one JSON document.
func decodeOne(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("more than one JSON document (%v):\n%s", err, s)
	}
}

// seedLineage registers seed 000's example hierarchy and returns the agents
// by name: #1 Research-Coordinator, #2 Data-Collector, #3 Report-Writer,
// #4 Peer-Reviewer, #5 Web-Scraper, #6 API-Fetcher, #7 LaTeX-Formatter.
func seedLineage(t *testing.T, d *kintest.Daemon) map[string]*kin.Agent {
	t.Helper()
	ctx := context.Background()
	out := map[string]*kin.Agent{}
	for _, r := range []struct{ name, role, parent string }{
		{"Research-Coordinator", "coordinator", ""},
		{"Data-Collector", "collector", "Research-Coordinator"},
		{"Report-Writer", "writer", "Research-Coordinator"},
		{"Peer-Reviewer", "reviewer", "Research-Coordinator"},
		{"Web-Scraper", "scraper", "Data-Collector"},
		{"API-Fetcher", "fetcher", "Data-Collector"},
		{"LaTeX-Formatter", "formatter", "Report-Writer"},
	} {
		req := kin.RegisterRequest{Name: r.name, Role: r.role}
		if r.parent == "" {
			req.Responsible = "Dr. Schmidt"
		} else {
			req.Parent = out[r.parent].ID
		}
		a, err := d.Client.Register(ctx, req)
		if err != nil {
			t.Fatalf("register %s: %v", r.name, err)
		}
		out[r.name] = a
	}
	return out
}

// lastEvent is the daemon's last event sequence number: a run that changed
// nothing leaves it alone.
func lastEvent(t *testing.T, d *kintest.Daemon) int64 {
	t.Helper()
	st, err := d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.LastEvent
}

// syncBuffer is a bytes.Buffer a command may write while the test reads.
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

func TestUnknownCommand(t *testing.T) {
	r := runCLI(t, "frobnicate")
	wantUsage(t, r, `unknown command "frobnicate" for "kin"`)
	if !strings.HasPrefix(r.stderr, "kin: ") {
		t.Errorf("stderr = %q, want a kin: prefix", r.stderr)
	}
	r = runCLI(t, "frobnicate", "--json")
	wantUsage(t, r)
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if e.Code != kin.ECodeInvalid || !strings.Contains(e.Message, "frobnicate") {
		t.Errorf("error = %+v", e)
	}
}

func TestUnknownGlobalFlag(t *testing.T) {
	wantUsage(t, runCLI(t, "--frobnicate", "status"), "--frobnicate")
}

func TestNoArgumentsPrintsHelp(t *testing.T) {
	r := runCLI(t)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestUnreachableDaemon(t *testing.T) {
	t.Setenv("KIN_ADDR", "")
	home := kintest.TempHome(t)
	msg := wantError(t, runCLI(t, "status", "--json", "--home", home), kin.ECodeUnavailable)
	if !strings.Contains(msg, "kin serve") {
		t.Errorf("message %q does not say to run kin serve", msg)
	}
	r := runCLI(t, "status", "--home", home)
	if r.code != ExitError || !strings.HasPrefix(r.stderr, "kin: ") || !strings.HasSuffix(r.stderr, "(unavailable)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestInjectedService(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	var out, errb bytes.Buffer
	// The daemon itself is a kin.Service: no socket involved.
	code := Env{Stdout: &out, Stderr: &errb, Service: d.Daemon}.Run(context.Background(), []string{"show", "7", "--json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var a shownAgent
	decodeOne(t, out.String(), &a)
	if a.Name != "LaTeX-Formatter" {
		t.Errorf("agent = %+v", a.Agent)
	}
}

func TestRunHasNoSharedState(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	// A flag given to one run must not leak into the next.
	wantOK(t, kinAt(t, d, "ps", "--status", "suspended", "--json"))
	r := kinAt(t, d, "ps", "--json")
	wantOK(t, r)
	var agents []*kin.Agent
	decodeOne(t, r.stdout, &agents)
	if len(agents) != 7 {
		t.Errorf("got %d agents, want 7", len(agents))
	}
}

// TestEveryCommandIsDocumented walks the command tree: each command says
// what it does, at length, with an example, and takes --json.
func TestEveryCommandIsDocumented(t *testing.T) {
	a := &app{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Short == "" || c.Long == "" || c.Example == "" {
			t.Errorf("%s: Short, Long and Example are all needed", c.CommandPath())
		}
		if c.Flags().Lookup("json") == nil && c.InheritedFlags().Lookup("json") == nil && c.PersistentFlags().Lookup("json") == nil {
			t.Errorf("%s has no --json", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCommand())
}

func TestEveryCommandHelp(t *testing.T) {
	for _, args := range [][]string{
		{"serve"}, {"register"}, {"show"}, {"ps"}, {"children"}, {"ancestors"}, {"tree"},
		{"suspend"}, {"resume"}, {"revoke"}, {"terminate"}, {"events"},
		{"governor"}, {"governor", "show"}, {"governor", "set"}, {"status"},
		{"spawn"}, {"stop"}, {"logs"}, {"heartbeat"}, {"whoami"},
		{"wait"}, {"result"}, {"context"}, {"context", "pack"},
		{"create"}, {"promote"}, {"authorize"}, {"explain"}, {"usage"},
		{"read"}, {"send"}, {"inbox"}, {"hook"}, {"hook", "claude-code"},
	} {
		r := runCLI(t, append(args, "--help")...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "kin "+strings.Join(args, " ")) {
			t.Errorf("kin %s --help:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
}

func TestWantsJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"show", "--json"}, true},
		{[]string{"show", "--json=true"}, true},
		{[]string{"show", "--json=false"}, false},
		{[]string{"show", "--jsonx"}, false},
		{[]string{"show", "--", "--json"}, false},
		{[]string{"show"}, false},
	} {
		if got := wantsJSON(c.args); got != c.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
