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

	var stderr syncBuffer
	cmd := kinCommand(t, "mcp", "--home", home)
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to kin mcp: %v; stderr: %s", err, stderr.String())
	}
	defer func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v; stderr: %s", err, stderr.String())
		}
	}()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 10 {
		t.Errorf("kin mcp lists %d tools, want 10", len(tools.Tools))
	}

	call := func(name string, args map[string]any, out any) (string, bool) {
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

	type spawned struct {
		ID    kin.AgentID `json:"id"`
		Agent *kin.Agent  `json:"agent"`
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
