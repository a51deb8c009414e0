package integrations

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// responsible is the responsible party of the roots the tests spawn.
const responsible = "integration-test"

// kinTools are the tools kin mcp serves ("kin mcp --help").
var kinTools = []string{"spawn_agent", "wait_agent", "list_children", "get_result", "stop_agent",
	"send_message", "read_inbox", "authorize_tool", "report_usage", "heartbeat"}

// TestMain builds kin once for every test (exampletest.Kin would link it
// once per test) unless $KIN_EXAMPLE_BIN names one already.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		if os.Getenv("KIN_EXAMPLE_BIN") == "" && !testing.Short() {
			dir, err := os.MkdirTemp("", "kinintegrations")
			if err == nil {
				defer os.RemoveAll(dir)
				err = os.Chmod(dir, 0o755) // agents run as their own uids
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			bin := filepath.Join(dir, "kin") // kin publishes itself to agents only as "kin"
			if out, err := exec.Command("go", "build", "-o", bin, "github.com/kin-agents/kin/cmd/kin").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "go build kin: %v\n%s", err, out)
				return 1
			}
			os.Setenv("KIN_EXAMPLE_BIN", bin)
		}
		return m.Run()
	}())
}

// serve starts kin serve, on the socket only, for one test.
func serve(t *testing.T) *exampletest.Daemon {
	t.Helper()
	if testing.Short() {
		t.Skip("runs kin serve and real agents")
	}
	return exampletest.Serve(t, exampletest.Kin(t), "--http", "off")
}

// environ is the environment of the program a snippet is installed in
// (Claude Code, Codex, a shell): the test's, without the KIN_* variables
// that would make kin act as an agent or reach another daemon, with the
// test's kin first on the PATH and KIN_HOME naming the test's daemon.
func environ(d *exampletest.Daemon, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			env = append(env, "PATH="+filepath.Dir(d.Bin)+":"+v)
		case strings.HasPrefix(k, "KIN_"):
		default:
			env = append(env, kv)
		}
	}
	return append(env, append([]string{"KIN_HOME=" + d.Home}, extra...)...)
}

// snippetCommand is the command a snippet names, "kin" being the test's
// kin as the PATH environ gives would find it.
func snippetCommand(ctx context.Context, d *exampletest.Daemon, name string, args ...string) *exec.Cmd {
	if name == "kin" {
		name = d.Bin
	}
	return exec.CommandContext(ctx, name, args...)
}

// decodeJSON reads the JSON file path into v, refusing keys v lacks.
func decodeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dec.More() {
		t.Fatalf("%s holds more than one JSON value", path)
	}
}

// mcpSession runs cmd as an MCP server over stdio and connects to it as a
// client would; the session is closed when the test ends.
func mcpSession(t *testing.T, ctx context.Context, cmd *exec.Cmd) *mcp.ClientSession {
	t.Helper()
	stderr := &exampletest.Buffer{}
	cmd.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "kin-integrations-test", Version: "test"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v; stderr: %s", cmd, err, stderr)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close the MCP session: %v; stderr: %s", err, stderr)
		}
	})
	return cs
}

// requireKinTools fails the test unless the server lists every kin tool.
func requireKinTools(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range kinTools {
		if !slices.Contains(names, want) {
			t.Errorf("the server lists tools %v; %s is missing", names, want)
		}
	}
}

// callTool calls a tool that must succeed and decodes its structured
// output into out.
func callTool(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		t.Fatalf("%s: tool error: %s", name, text.String())
	}
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil {
		t.Fatalf("%s's output %s: %v", name, b, err)
	}
}

// spawnAndWait has the server spawn a root running `echo hi` and wait for
// it, and checks that it ran on the test's daemon and exited 0.
func spawnAndWait(t *testing.T, ctx context.Context, d *exampletest.Daemon, cs *mcp.ClientSession, name string) {
	t.Helper()
	var spawned struct {
		ID kin.AgentID `json:"id"`
	}
	callTool(t, ctx, cs, "spawn_agent", map[string]any{
		"name": name, "responsible": responsible, "command": []string{"/bin/sh", "-c", "echo hi"},
	}, &spawned)
	var waited struct {
		ID    kin.AgentID `json:"id"`
		State kin.State   `json:"state"`
		Exit  *kin.Exit   `json:"exit"`
	}
	callTool(t, ctx, cs, "wait_agent", map[string]any{"id": spawned.ID, "timeout": "30s"}, &waited)
	// kin's word for a process that exited 0 is terminated, not exited.
	if waited.ID != spawned.ID || !waited.State.Terminal() || waited.Exit == nil || *waited.Exit != (kin.Exit{Code: 0, Known: true}) {
		t.Errorf("wait_agent %d: agent %d %s, %v; want it ended with exit status 0", spawned.ID, waited.ID, waited.State, waited.Exit)
	}
	a, err := d.Client.Agent(ctx, spawned.ID)
	if err != nil {
		t.Fatalf("the test's daemon has no agent %d: %v", spawned.ID, err)
	}
	if a.Name != name || a.Responsible != responsible || a.Parent != 0 {
		t.Errorf("agent %d is %s (responsible %q, parent %d); want root %s, responsible %q", a.ID, a.Name, a.Responsible, a.Parent, name, responsible)
	}
	if got := d.Logs(a.ID); got != "hi\n" {
		t.Errorf("agent %d printed %q, want %q", a.ID, got, "hi\n")
	}
}

// TestClaudeCodeMCPSnippetServesKinToolsThatSpawnAndWait starts the server
// integrations/claude-code/mcp.json registers, as Claude Code would (its
// command and args over stdio, in Claude Code's environment), lists its
// tools, and spawns and waits for an agent through it.
func TestClaudeCodeMCPSnippetServesKinToolsThatSpawnAndWait(t *testing.T) {
	var snippet struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	decodeJSON(t, "claude-code/mcp.json", &snippet)
	srv, ok := snippet.MCPServers["kin"]
	if len(snippet.MCPServers) != 1 || !ok || srv.Command != "kin" || !slices.Equal(srv.Args, []string{"mcp"}) {
		t.Fatalf("mcp.json registers %+v; want one server, kin: kin mcp", snippet.MCPServers)
	}
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel) // after the session closes

	cmd := snippetCommand(ctx, d, srv.Command, srv.Args...)
	cmd.Env = environ(d)
	cs := mcpSession(t, ctx, cmd)
	requireKinTools(t, ctx, cs)
	spawnAndWait(t, ctx, d, cs, "claude-mcp-hi")
}

// hookDecision is what kin hook claude-code prints.
type hookDecision struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

// parseDecision parses one decision, refusing any other key.
func parseDecision(t *testing.T, line string) hookDecision {
	t.Helper()
	var d hookDecision
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil || d.HookSpecificOutput.HookEventName != "PreToolUse" {
		t.Fatalf("the hook printed %q (%v); want a PreToolUse decision", line, err)
	}
	return d
}

// TestClaudeCodeSettingsHookDeniesBashAndAllowsReadUnderTheAgentsPolicy
// installs integrations/claude-code/settings.json's hook as Claude Code
// would (matcher "*", its command run with a PreToolUse call on stdin) for
// an agent whose policy denies exec and allows read: named by the operator
// with --agent, and run inside an agent with the command exactly as
// written. Bash is denied with kin's reason, Read allowed.
func TestClaudeCodeSettingsHookDeniesBashAndAllowsReadUnderTheAgentsPolicy(t *testing.T) {
	type hook struct {
		Type    string `json:"type"`
		Command string `json:"command"`
	}
	var settings struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []hook `json:"hooks"`
		} `json:"hooks"`
	}
	decodeJSON(t, "claude-code/settings.json", &settings)
	pre := settings.Hooks["PreToolUse"]
	if len(settings.Hooks) != 1 || len(pre) != 1 || pre[0].Matcher != "*" || len(pre[0].Hooks) != 1 || pre[0].Hooks[0].Type != "command" {
		t.Fatalf("settings.json's hooks are %+v; want one PreToolUse hook, matcher \"*\", of type command", settings.Hooks)
	}
	hookCommand := pre[0].Hooks[0].Command
	argv := strings.Fields(hookCommand)
	if len(argv) == 0 || argv[0] != "kin" {
		t.Fatalf("the hook's command is %q; want kin's", hookCommand)
	}
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("tools:\n  allow: [read]\n  deny: [exec]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The tool calls, as Claude Code writes them on the hook's stdin.
	call := func(tool, input string) string {
		return fmt.Sprintf(`{"session_id":"s-1","transcript_path":"/tmp/transcript.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":%q,"tool_input":%s,"tool_use_id":"toolu_1"}`, tool, input)
	}
	bash, read := call("Bash", `{"command":"ls"}`), call("Read", `{"file_path":"/etc/hostname"}`)
	check := func(who string, agent kin.AgentID, bashLine, readLine string) {
		t.Helper()
		deny := fmt.Sprintf(`is denied by the deny list of the policy of agent %d (exec) (rule "deny exec")`, agent)
		if got := parseDecision(t, bashLine).HookSpecificOutput; got.PermissionDecision != "deny" || !strings.HasPrefix(got.PermissionDecisionReason, "kin: denied: ") || !strings.Contains(got.PermissionDecisionReason, deny) {
			t.Errorf("%s: Bash: %s %q; want deny, the reason naming %q", who, got.PermissionDecision, got.PermissionDecisionReason, deny)
		}
		if got := parseDecision(t, readLine).HookSpecificOutput; got.PermissionDecision != "allow" || !strings.HasPrefix(got.PermissionDecisionReason, "kin: allowed: ") {
			t.Errorf("%s: Read: %s %q; want allow", who, got.PermissionDecision, got.PermissionDecisionReason)
		}
	}

	// The operator's way: the command with --agent ID.
	out, err := d.Kin("spawn", "--json", "--name", "guarded", "--responsible", responsible, "--policy", policy, "--", "sleep", "600")
	var guarded kin.Agent
	if err != nil || json.Unmarshal([]byte(out), &guarded) != nil {
		t.Fatalf("kin spawn guarded: %v\n%s", err, out)
	}
	runHook := func(stdin string) string {
		t.Helper()
		cmd := snippetCommand(ctx, d, argv[0], append(argv[1:], "--agent", guarded.ID.String())...)
		cmd.Env = environ(d)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil { // the hook always exits 0 with its decision
			t.Fatalf("%s: %v; stderr: %s", cmd, err, &stderr)
		}
		return string(out)
	}
	check("the operator's hook --agent "+guarded.ID.String(), guarded.ID, runHook(bash), runHook(read))

	// Inside an agent, as Claude Code run by kin would run it: the command
	// as written, through the shell, with the agent's KIN_SOCKET.
	out, err = d.Kin("spawn", "--json", "--name", "claude", "--responsible", responsible, "--policy", policy,
		"--env", "BASH_CALL="+bash, "--env", "READ_CALL="+read, "--",
		"/bin/sh", "-c", fmt.Sprintf(`printf '%%s' "$BASH_CALL" | %[1]s && printf '%%s' "$READ_CALL" | %[1]s`, hookCommand))
	var claude kin.Agent
	if err != nil || json.Unmarshal([]byte(out), &claude) != nil {
		t.Fatalf("kin spawn claude: %v\n%s", err, out)
	}
	if out, err := d.Kin("wait", claude.ID.String(), "--timeout", "30s"); err != nil {
		t.Fatalf("kin wait %d: %v\n%s", claude.ID, err, out)
	}
	lines := strings.Split(strings.TrimSuffix(d.Logs(claude.ID), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("the agent's hooks printed %q; want two decisions", lines)
	}
	check("the hook inside agent "+claude.ID.String(), claude.ID, lines[0], lines[1])
}

// codexDefaultEnv are the variables Codex gives a stdio MCP server besides
// those the server's env_vars name (DEFAULT_ENV_VARS in openai/codex's
// codex-rs/rmcp-client/src/utils.rs).
var codexDefaultEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "USER", "__CF_USER_TEXT_ENCODING", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"}

// codexServer is one [mcp_servers.NAME] table of a Codex config.toml.
type codexServer struct {
	Name    string
	Command string
	Args    []string
	EnvVars []string
}

// readCodexSnippet reads the few TOML lines the Codex snippet holds: one
// [mcp_servers.NAME] table with command (a string), args and env_vars
// (arrays of strings); blank lines and # comments. Anything else fails the
// test: it is a reader of this snippet, not of TOML.
func readCodexSnippet(t *testing.T, path string) codexServer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var srv codexServer
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, ok := strings.CutPrefix(line, "[mcp_servers."); ok {
			name, ok = strings.CutSuffix(name, "]")
			if !ok || srv.Name != "" || name == "" || strings.ContainsAny(name, `."' []`) {
				t.Fatalf("%s:%d: %q: want one [mcp_servers.NAME] table", path, n, line)
			}
			srv.Name = name
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || srv.Name == "" || seen[key] {
			t.Fatalf("%s:%d: %q: want key = value, once each, in the [mcp_servers.NAME] table", path, n, line)
		}
		seen[key] = true
		switch key {
		case "command":
			// A TOML basic string without escapes reads as a Go one.
			if srv.Command, err = strconv.Unquote(value); err != nil || strings.Contains(value, `\`) {
				t.Fatalf("%s:%d: command = %s: want a plain string", path, n, value)
			}
		case "args", "env_vars":
			// An array of plain strings on one line, no trailing comma, is
			// JSON too.
			var list []string
			if err := json.Unmarshal([]byte(value), &list); err != nil || strings.Contains(value, `\`) {
				t.Fatalf("%s:%d: %s = %s: want an array of plain strings on one line", path, n, key, value)
			}
			if key == "args" {
				srv.Args = list
			} else {
				srv.EnvVars = list
			}
		default:
			t.Fatalf("%s:%d: key %q: this test reads command, args and env_vars only", path, n, key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestCodexSnippetServesKinToolsWithOnlyTheVariablesCodexForwards starts
// the server integrations/codex/config.toml registers as Codex would: its
// command and args over stdio, in an environment of Codex's default
// variables and the ones env_vars names. KIN_HOME reaches kin mcp only
// through env_vars, so the spawn it makes must land on the test's daemon.
func TestCodexSnippetServesKinToolsWithOnlyTheVariablesCodexForwards(t *testing.T) {
	srv := readCodexSnippet(t, "codex/config.toml")
	if srv.Name != "kin" || srv.Command != "kin" || !slices.Equal(srv.Args, []string{"mcp"}) {
		t.Fatalf("config.toml registers %+v; want [mcp_servers.kin]: kin mcp", srv)
	}
	for _, v := range []string{"KIN_SOCKET", "KIN_HOME"} { // the agent's, the operator's
		if !slices.Contains(srv.EnvVars, v) {
			t.Errorf("config.toml's env_vars %v lack %s: kin mcp would not see it", srv.EnvVars, v)
		}
	}
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel) // after the session closes

	var env []string
	for _, kv := range environ(d) { // Codex's own environment
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(codexDefaultEnv, k) || slices.Contains(srv.EnvVars, k) {
			env = append(env, kv)
		}
	}
	cmd := snippetCommand(ctx, d, srv.Command, srv.Args...)
	cmd.Env = env
	cs := mcpSession(t, ctx, cmd)
	requireKinTools(t, ctx, cs)
	spawnAndWait(t, ctx, d, cs, "codex-mcp-hi")
}

// kinRun is the shipped wrapper's path.
func kinRun(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("shell/kin-run")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exitCode is how a command's run ended: its exit status, or -1 when it
// did not exit (it could not start, or a signal ended it).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// agentNamed is the daemon's one agent called name.
func agentNamed(t *testing.T, d *exampletest.Daemon, name string) (*kin.Agent, bool) {
	t.Helper()
	agents, err := d.Client.Agents(context.Background(), kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		if a.Name == name {
			return a, true
		}
	}
	return nil, false
}

// TestKinRunExitsWithTheCommandsStatusAndPrintsItsOutput runs a command that
// writes to stdout and stderr and exits 7 through kin-run: kin-run exits 7
// and prints both lines on its stdout (kin keeps one stream of the two), and
// the agent is a root of the given responsible party that has ended.
func TestKinRunExitsWithTheCommandsStatusAndPrintsItsOutput(t *testing.T) {
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, kinRun(t), "--responsible", "test", "--name", "echoer", "--",
		"/bin/sh", "-c", "echo out; echo err >&2; exit 7")
	cmd.Env = environ(d)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(cmd.Run()); code != 7 {
		t.Errorf("kin-run exited %d, want the command's 7; stderr: %s", code, &stderr)
	}
	if stdout.String() != "out\nerr\n" || stderr.Len() != 0 {
		t.Errorf("kin-run printed %q on stdout and %q on stderr; want both lines, as written, on stdout", &stdout, &stderr)
	}
	a, ok := agentNamed(t, d, "echoer")
	switch {
	case !ok:
		t.Fatal("kin-run spawned no agent named echoer")
	case a.Responsible != "test" || a.Parent != 0:
		t.Errorf("agent %d: responsible %q, parent %d; want a root for test", a.ID, a.Responsible, a.Parent)
	case a.Running() || a.State != kin.StateExited || a.Exit == nil || a.Exit.Code != 7:
		t.Errorf("agent %d: state %s, exit %v; want exited with 7", a.ID, a.State, a.Exit)
	}
}

// TestKinRunDefaultsTheResponsiblePartyToKIN_RESPONSIBLEThenUSER spawns roots
// through kin-run without --responsible: KIN_RESPONSIBLE names their
// responsible party, else USER.
func TestKinRunDefaultsTheResponsiblePartyToKIN_RESPONSIBLEThenUSER(t *testing.T) {
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, tc := range []struct{ name, env, want string }{
		{"by-kin-responsible", "KIN_RESPONSIBLE=alice", "alice"},
		{"by-user", "USER=bob", "bob"},
	} {
		cmd := exec.CommandContext(ctx, kinRun(t), "--name", tc.name, "--", "/bin/true")
		cmd.Env = append(environ(d), tc.env)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		if a, ok := agentNamed(t, d, tc.name); !ok || a.Responsible != tc.want {
			t.Errorf("with %s, kin-run's root %s has responsible %+v; want %q", tc.env, tc.name, a, tc.want)
		}
	}
}

// TestKinRunStopsTheAgentAndItsChildOnSIGTERMOrSIGINTAndExits143Or130
// signals kin-run while its agent, which has spawned a child of its own,
// sleeps: kin-run stops both (cancelled, ended "stopped", their processes
// gone) and exits 143 after SIGTERM, 130 after SIGINT.
func TestKinRunStopsTheAgentAndItsChildOnSIGTERMOrSIGINTAndExits143Or130(t *testing.T) {
	d := serve(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		want int
	}{
		{"term", syscall.SIGTERM, 143},
		{"int", syscall.SIGINT, 130},
	} {
		stopsOnSignal(t, d, tc.name, tc.sig, tc.want)
	}
}

// stopsOnSignal runs kin-run with an agent NAME that spawns NAME-kid, both
// sleeping, sends kin-run sig and checks that it exits want with both
// stopped.
func stopsOnSignal(t *testing.T, d *exampletest.Daemon, name string, sig syscall.Signal, want int) {
	t.Helper()
	kid := name + "-kid"
	cmd := exec.Command(kinRun(t), "--responsible", "test", "--name", name, "--",
		"/bin/sh", "-c", "kin spawn --name "+kid+" -- sleep 600 >/dev/null && exec sleep 600")
	cmd.Env = environ(d)
	var out exampletest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { // should the test fail before kin-run ends
		cmd.Process.Kill()
		<-exited
	})

	pids := map[string]int{}
	kintest.WaitFor(t, 30*time.Second, "kin-run's agent and its child to run", func() bool {
		for _, n := range []string{name, kid} {
			if a, ok := agentNamed(t, d, n); ok && a.Running() {
				pids[n] = a.PID
			}
		}
		return len(pids) == 2
	})
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
		exited <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("kin-run did not end within 30 s of %v; it said: %s", sig, &out)
	}
	if code := exitCode(err); code != want {
		t.Errorf("kin-run exited %d (%v) after %v, want %d; it said: %s", code, err, sig, want, &out)
	}
	for n, pid := range pids {
		a, _ := agentNamed(t, d, n)
		if a.Running() || a.State != kin.StateCancelled || a.EndReason != "stopped" {
			t.Errorf("%s (agent %d) after kin-run's %v: state %s, end reason %q; want cancelled, stopped", n, a.ID, sig, a.State, a.EndReason)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s's process %d is still there after kin-run's %v (kill 0: %v)", n, pid, sig, err)
		}
	}
}

// TestKinRunRefusesAWrongCommandLineWithExit2 gives kin-run command lines
// it cannot run: each exits 2 naming what is wrong, and spawns nothing.
func TestKinRunRefusesAWrongCommandLineWithExit2(t *testing.T) {
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "kin-run: no COMMAND: put the command to run after --"},
		{[]string{"--responsible", "test", "--"}, "kin-run: no COMMAND"},
		{[]string{"--responsible", "test", "--name"}, "kin-run: --name needs a value"},
		{[]string{"--json", "--", "true"}, "kin-run: --json"},
		{[]string{"--restart", "on-failure", "--", "true"}, "kin-run: --restart on-failure"},
		{[]string{"--no-such-flag", "--", "true"}, "unknown flag: --no-such-flag"}, // kin spawn's word
	} {
		cmd := exec.CommandContext(ctx, kinRun(t), tc.args...)
		cmd.Env = environ(d)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if code := exitCode(cmd.Run()); code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("kin-run %q: exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr", tc.args, code, &stdout, &stderr, tc.want)
		}
	}
	if agents, err := d.Client.Agents(ctx, kin.AgentFilter{}); err != nil || len(agents) != 0 {
		t.Errorf("after wrong command lines the daemon has agents %v (%v); want none", agents, err)
	}
}

// TestClaudeCodeHookInThreeProjects runs settings.json's hook command as
// written, as Claude Code runs it, in the three situations a README reader
// meets: a project whose agent may use every tool (stage full), one whose
// preset denies some (stage restricted: Read allowed, Bash and Write
// denied), both inside the agent kin spawned; and the operator's own
// project outside any agent, where the hook makes no decision (exit 0,
// nothing on stdout) so that Claude Code's own permissions apply.
func TestClaudeCodeHookInThreeProjects(t *testing.T) {
	var settings struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Type    string `json:"type"`
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	decodeJSON(t, "claude-code/settings.json", &settings)
	hookCommand := settings.Hooks["PreToolUse"][0].Hooks[0].Command
	d := serve(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(tool, input string) string {
		return fmt.Sprintf(`{"session_id":"s-2","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":%q,"tool_input":%s,"tool_use_id":"toolu_2"}`, tool, input)
	}
	calls := []string{call("Read", `{"file_path":"/etc/hostname"}`), call("Bash", `{"command":"ls"}`), call("Write", `{"file_path":"/tmp/x","content":"x"}`)}

	for _, project := range []struct {
		stage string
		want  []string // Read, Bash, Write
	}{
		{"full", []string{"allow", "allow", "allow"}},
		{"restricted", []string{"allow", "deny", "deny"}},
	} {
		script := ""
		env := []string{}
		for i, c := range calls {
			env = append(env, "--env", fmt.Sprintf("CALL%d=%s", i, c))
			script += fmt.Sprintf(`printf '%%s' "$CALL%d" | %s && `, i, hookCommand)
		}
		args := append([]string{"spawn", "--json", "--name", "claude-" + project.stage, "--responsible", responsible, "--stage", project.stage}, env...)
		out, err := d.Kin(append(args, "--", "/bin/sh", "-c", script+"true")...)
		var a kin.Agent
		if err != nil || json.Unmarshal([]byte(out), &a) != nil {
			t.Fatalf("kin spawn claude-%s: %v\n%s", project.stage, err, out)
		}
		if out, err := d.Kin("wait", a.ID.String(), "--timeout", "30s"); err != nil {
			t.Fatalf("kin wait %d: %v\n%s", a.ID, err, out)
		}
		lines := strings.Split(strings.TrimSuffix(d.Logs(a.ID), "\n"), "\n")
		if len(lines) != len(calls) {
			t.Fatalf("stage %s: the hooks printed %q; want %d decisions", project.stage, lines, len(calls))
		}
		for i, line := range lines {
			if got := parseDecision(t, line).HookSpecificOutput; got.PermissionDecision != project.want[i] {
				t.Errorf("stage %s, call %d: %s (%s), want %s", project.stage, i, got.PermissionDecision, got.PermissionDecisionReason, project.want[i])
			}
		}
	}

	// The operator's project: the command as written, outside any agent.
	argv := strings.Fields(hookCommand)
	cmd := snippetCommand(ctx, d, argv[0], argv[1:]...)
	cmd.Env = environ(d)
	cmd.Stdin = strings.NewReader(calls[1])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || len(out) != 0 || !strings.Contains(stderr.String(), "no agent to decide for") {
		t.Errorf("outside any agent: %v, stdout %q, stderr %q; want exit 0, no decision, the note", err, out, stderr.String())
	}
}
