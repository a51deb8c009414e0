package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestMCPHelpShowsClientRegistration(t *testing.T) {
	var stdout bytes.Buffer
	cmd := kinCommand(t, "mcp", "--help")
	cmd.Stdout = &stdout
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("kin mcp --help: exit %d", code)
	}
	for _, want := range []string{`"mcpServers"`, `"args": ["mcp"]`, "spawn_agent", "wait_agent", "spawn_depth_exceeded"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("kin mcp --help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestMCPWithoutDaemonExits1(t *testing.T) {
	var stderr bytes.Buffer
	cmd := kinCommand(t, "mcp", "--home", kintest.TempHome(t))
	cmd.Stderr = &stderr
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("kin mcp without a daemon: exit %d, want 1; stderr: %s", code, stderr.String())
	}
}

// TestMCPOverStdioSpawnsWaitsRefusesAndStops runs the built kin mcp as an
// MCP client would, against a real kin serve.
func TestMCPOverStdioSpawnsWaitsRefusesAndStops(t *testing.T) {
	home := kintest.TempHome(t)
	startServe(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cs, call := startMCP(t, ctx, "mcp", "--home", home)
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 10 {
		t.Errorf("kin mcp lists %d tools, want 10", len(tools.Tools))
	}

	var lead, kid spawned
	if text, isErr := call("spawn_agent", map[string]any{
		"name": "lead", "responsible": "ops", "command": []string{"sh", "-c", "exec sleep 600"},
	}, &lead); isErr || lead.ID == 0 {
		t.Fatalf("spawn_agent lead: %s", text)
	}
	if text, isErr := call("spawn_agent", map[string]any{
		"name": "kid", "parent": lead.ID, "handoff": "Say hello.\n",
		"command": []string{"sh", "-c", `grep -q hello "$KIN_HANDOFF" && printf 'Summary: hello\n' > "$KIN_OUTPUT/result.md"`},
	}, &kid); isErr || kid.Agent == nil || kid.Agent.Parent != lead.ID {
		t.Fatalf("spawn_agent kid: %s", text)
	}

	type result struct {
		Status kin.ResultStatus `json:"status"`
		Result string           `json:"result"`
	}
	var waited, got result
	if text, isErr := call("wait_agent", map[string]any{"id": kid.ID, "timeout": "30s"}, &waited); isErr ||
		waited.Status != kin.ResultCompleted || waited.Result != "Summary: hello\n" {
		t.Fatalf("wait_agent kid: %s", text)
	}
	if text, isErr := call("get_result", map[string]any{"id": kid.ID}, &got); isErr || got != waited {
		t.Errorf("get_result kid: %s, want %+v", text, waited)
	}
	// The lead keeps running: a short wait times out, as a tool error.
	if text, isErr := call("wait_agent", map[string]any{"id": lead.ID, "timeout": "50ms"}, nil); !isErr || !strings.HasPrefix(text, string(kin.ECodeTimeout)+": ") {
		t.Errorf("wait_agent on a running agent with a short timeout: %v %q, want a %s tool error", isErr, text, kin.ECodeTimeout)
	}

	// Depth 0: no agent may have a child.
	c, err := client.New(client.Config{Socket: filepath.Join(home, "kin.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SetGovernor(ctx, "max_generation_depth", "0"); err != nil {
		t.Fatal(err)
	}
	if text, isErr := call("spawn_agent", map[string]any{"parent": lead.ID, "command": []string{"/bin/true"}}, nil); !isErr || !strings.HasPrefix(text, string(kin.ECodeSpawnDepth)+": ") {
		t.Errorf("spawn_agent past the depth: %v %q, want a %s tool error", isErr, text, kin.ECodeSpawnDepth)
	}

	if text, isErr := call("stop_agent", map[string]any{"id": lead.ID, "grace": "0s"}, nil); isErr {
		t.Fatalf("stop_agent: %s", text)
	}
	kintest.WaitFor(t, 20*time.Second, "lead to end", func() bool {
		a, err := c.Agent(ctx, lead.ID)
		return err == nil && !a.Running()
	})
}

type spawned struct {
	ID    kin.AgentID `json:"id"`
	Agent *kin.Agent  `json:"agent"`
}

// mcpCall calls a tool: its text, whether it is a tool error, and its
// structured output decoded into out (when not nil and not an error).
type mcpCall func(name string, args map[string]any, out any) (text string, isErr bool)

// startMCP runs the built kin with args (an "mcp" command line) as an MCP
// client would, and returns the session and a way to call its tools. The
// session is closed, and kin mcp must end cleanly, when the test ends.
func startMCP(t *testing.T, ctx context.Context, args ...string) (*mcp.ClientSession, mcpCall) {
	t.Helper()
	var stderr syncBuffer
	cmd := kinCommand(t, args...)
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to kin %v: %v; stderr: %s", args, err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v; stderr: %s", err, stderr.String())
		}
	})
	return cs, func(name string, args map[string]any, out any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error: %v; stderr: %s", name, err, stderr.String())
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if out != nil && !res.IsError {
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s: %s: %v", name, b, err)
			}
		}
		return text, res.IsError
	}
}

// TestMCPAsARegisteredRootIsConfinedToItsSubtree: kin mcp --as, outside
// any agent, acts for a root the operator registered: spawn_agent makes
// that root's children, and every tool is refused on agents outside its
// subtree, as if kin mcp ran inside it. A name that no live agent has is
// refused before anything is served.
func TestMCPAsARegisteredRootIsConfinedToItsSubtree(t *testing.T) {
	home := kintest.TempHome(t)
	startServe(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(client.Config{Socket: filepath.Join(home, "kin.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	session, err := c.Register(ctx, kin.RegisterRequest{Name: "claude-session", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "other-root", Responsible: "ops"},
		Command: []string{"/bin/sh", "-c", "exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), kin.StopRequest{ID: other.ID})

	_, call := startMCP(t, ctx, "mcp", "--home", home, "--as", "claude-session")
	var kid spawned
	if text, isErr := call("spawn_agent", map[string]any{"name": "helper", "command": []string{"sh", "-c", "exec sleep 600"}, "grace": "0s"}, &kid); isErr {
		t.Fatalf("spawn_agent as claude-session: %s", text)
	}
	if kid.Agent.Parent != session.ID || kid.Agent.CreatedBy != kin.AgentCreatedBy(session.ID) || kid.Agent.Responsible != "Dr. Schmidt" {
		t.Errorf("helper: parent %d, created by %q, responsible %q; want claude-session's (%d) child, for Dr. Schmidt",
			kid.Agent.Parent, kid.Agent.CreatedBy, kid.Agent.Responsible, session.ID)
	}
	var kids struct{ Agents []*kin.Agent }
	if call("list_children", nil, &kids); len(kids.Agents) != 1 || kids.Agents[0].ID != kid.ID {
		t.Errorf("list_children as claude-session: %v, want only helper", kids.Agents)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"stop_agent", map[string]any{"id": other.ID}},
		{"get_result", map[string]any{"id": other.ID}},
		{"spawn_agent", map[string]any{"parent": other.ID, "command": []string{"/bin/true"}}},
	} {
		if text, isErr := call(tc.tool, tc.args, nil); !isErr || !strings.HasPrefix(text, string(kin.ECodeForbidden)+": ") {
			t.Errorf("%s %v as claude-session: %v %q; want a forbidden tool error", tc.tool, tc.args, isErr, text)
		}
	}
	if a, err := c.Agent(ctx, other.ID); err != nil || !a.Running() {
		t.Errorf("other-root after the refused calls: %+v, %v; want it running", a, err)
	}
	if roots, err := c.Agents(ctx, kin.AgentFilter{Parent: 0, HasParent: true}); err != nil || len(roots) != 2 {
		t.Errorf("roots: %d (%v); want the two the operator made", len(roots), err)
	}
	if text, isErr := call("stop_agent", map[string]any{"id": kid.ID, "grace": "0s"}, nil); isErr {
		t.Errorf("stop_agent helper as claude-session: %s", text)
	}

	var stderr bytes.Buffer
	cmd := kinCommand(t, "mcp", "--home", home, "--as", "nobody-here")
	cmd.Stderr = &stderr
	if code := exitCode(t, cmd.Run()); code != 1 || !strings.Contains(stderr.String(), `--as nobody-here: no live agent is named "nobody-here"`) {
		t.Errorf("kin mcp --as nobody-here: exit %d, %q; want 1 naming the missing agent", code, stderr.String())
	}
}
