package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/mcpserver"
	"github.com/kin-agents/kin/kin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kintest.RemoveAgentBinary()
	os.Exit(code)
}

// connect serves svc's tools in process and returns a client session.
func connect(t *testing.T, svc kin.Service) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(svc, mcpserver.Options{Version: "test"}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		cancel()
	})
	return cs
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// ok calls a tool that must succeed and decodes its structured output.
func ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, text(res))
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured output %s: %v", name, b, err)
		}
	}
	return text(res)
}

var allTools = []string{"authorize_tool", "get_result", "heartbeat", "list_children", "read_inbox",
	"report_usage", "send_message", "spawn_agent", "stop_agent", "wait_agent"}

func TestMCPListsToolsWithDescribedSchemas(t *testing.T) {
	d := kintest.StartDaemon(t)
	cs := connect(t, d.Client)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string `json:"type"`
			Required   []string
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &schema); err != nil || schema.Type != "object" {
			t.Errorf("tool %s: input schema %s is not an object schema (%v)", tool.Name, b, err)
		}
		for p, s := range schema.Properties {
			if s.Description == "" {
				t.Errorf("tool %s: property %s has no description", tool.Name, p)
			}
		}
		if tool.Name == "spawn_agent" {
			if !slices.Equal(schema.Required, []string{"command"}) {
				t.Errorf("spawn_agent requires %v, want [command]", schema.Required)
			}
			for _, p := range []string{"name", "role", "command", "parent", "handoff", "refs", "contract", "policy", "stage", "template", "life",
				"grace", "wallet", "scope", "self_modifying", "constitution_hash", "capability_hash"} {
				if _, ok := schema.Properties[p]; !ok {
					t.Errorf("spawn_agent has no %s", p)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, allTools) {
		t.Errorf("tools %v, want %v", names, allTools)
	}
}

// TestMCPSpawnWaitResultDepthRefusalAndStop drives a tree through the
// tools as the operator, under the aauth profile (one generation below
// the roots): a root, a child that hands back a result and exits, a
// grandchild refused with spawn_depth_exceeded, then the tree stopped.
func TestMCPSpawnWaitResultDepthRefusalAndStop(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("aauth"))
	cs := connect(t, d.Client)

	var lead mcpserver.SpawnOutput
	ok(t, cs, "spawn_agent", map[string]any{
		"name": "lead", "responsible": "ops", "command": []string{"/bin/sh", "-c", "exec sleep 600"},
		"wallet": "acct-7", "scope": "lead the review", "self_modifying": true,
		"constitution_hash": "sha256:c0", "capability_hash": "sha256:ca", "grace": "3s",
	}, &lead)
	if lead.ID == 0 || lead.Agent == nil || lead.Agent.Name != "lead" || lead.Agent.PID == 0 {
		t.Fatalf("spawned lead: %+v", lead)
	}
	if a := lead.Agent; a.Wallet != "acct-7" || a.Scope != "lead the review" || !a.SelfModifying ||
		a.ConstitutionHash != "sha256:c0" || a.CapabilityHash != "sha256:ca" || time.Duration(a.Grace) != 3*time.Second {
		t.Errorf("lead's registration data: wallet %q scope %q self_modifying %v hashes %q %q grace %v",
			a.Wallet, a.Scope, a.SelfModifying, a.ConstitutionHash, a.CapabilityHash, a.Grace)
	}

	var worker mcpserver.SpawnOutput
	said := ok(t, cs, "spawn_agent", map[string]any{
		"name": "worker", "parent": lead.ID, "role": "reviewer",
		"handoff":  "Review the spec.\n",
		"contract": map[string]any{"sections": []any{map[string]any{"name": "Summary"}}},
		"command":  []string{"sh", "-c", `grep -q "Review the spec" "$KIN_HANDOFF" && printf '# Result\n\nSummary: all good\n' > "$KIN_OUTPUT/result.md"`},
	}, &worker)
	if worker.Agent == nil || worker.Agent.Parent != lead.ID || worker.Agent.Generation != 1 {
		t.Fatalf("spawned worker: %+v", worker.Agent)
	}
	if !strings.Contains(said, "spawned agent "+worker.ID.String()+" (worker)") {
		t.Errorf("spawn_agent said %q", said)
	}

	var waited mcpserver.ResultOutput
	said = ok(t, cs, "wait_agent", map[string]any{"id": worker.ID, "timeout": "30s"}, &waited)
	if waited.Status != kin.ResultCompleted || !strings.Contains(waited.Result, "Summary: all good") {
		t.Fatalf("wait_agent: %+v (%s)", waited, said)
	}
	if !strings.Contains(said, "completed") || !strings.Contains(said, "Summary: all good") {
		t.Errorf("wait_agent said %q", said)
	}

	var got mcpserver.ResultOutput
	ok(t, cs, "get_result", map[string]any{"id": worker.ID}, &got)
	if got.Status != kin.ResultCompleted || got.Result != waited.Result || got.Name != "worker" {
		t.Errorf("get_result: %+v, want wait_agent's %+v", got, waited)
	}

	var holder mcpserver.SpawnOutput
	ok(t, cs, "spawn_agent", map[string]any{"name": "holder", "parent": lead.ID, "command": []string{"/bin/sh", "-c", "exec sleep 600"}}, &holder)
	res := call(t, cs, "spawn_agent", map[string]any{"name": "grandchild", "parent": holder.ID, "command": []string{"/bin/true"}})
	if !res.IsError || !strings.HasPrefix(text(res), string(kin.ECodeSpawnDepth)+": ") {
		t.Fatalf("a grandchild under aauth: IsError %v, %q; want a tool error with %s", res.IsError, text(res), kin.ECodeSpawnDepth)
	}

	var kids mcpserver.AgentsOutput
	ok(t, cs, "list_children", map[string]any{"id": lead.ID}, &kids)
	var names []string
	for _, a := range kids.Agents {
		names = append(names, a.Name)
	}
	if !slices.Equal(names, []string{"worker", "holder"}) {
		t.Errorf("list_children of lead: %v, want [worker holder]", names)
	}

	var stopped mcpserver.AgentsOutput
	ok(t, cs, "stop_agent", map[string]any{"id": lead.ID, "grace": "0s"}, &stopped)
	kintest.WaitFor(t, 20*time.Second, "lead and holder to end", func() bool {
		for _, id := range []kin.AgentID{lead.ID, holder.ID} {
			a, err := d.Client.Agent(context.Background(), id)
			if err != nil || a.Running() {
				return false
			}
		}
		return true
	})
}

func TestMCPRefusalsAreToolErrorsWithKinCodes(t *testing.T) {
	d := kintest.StartDaemon(t)
	cs := connect(t, d.Client)
	for _, c := range []struct {
		tool string
		args map[string]any
		code kin.ErrorCode
	}{
		{"wait_agent", map[string]any{"id": 999}, kin.ECodeNotFound},
		{"get_result", map[string]any{"id": 999}, kin.ECodeNotFound},
		{"stop_agent", map[string]any{"id": 999}, kin.ECodeNotFound},
		{"spawn_agent", map[string]any{"command": []string{"/bin/true"}, "name": "bad/name"}, kin.ECodeInvalid}, // a root no longer needs responsible: a bad name instead
		{"spawn_agent", map[string]any{"command": []string{"/bin/true"}, "responsible": "ops", "refs": []string{"/etc/hostname"}}, kin.ECodeInvalid},
		{"spawn_agent", map[string]any{"command": []string{"/bin/true"}, "responsible": "ops", "policy": map[string]any{"bogus": 1}}, kin.ECodeInvalid},
		{"wait_agent", map[string]any{"id": 1, "timeout": "soon"}, kin.ECodeInvalid},
	} {
		res := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.HasPrefix(text(res), string(c.code)+": ") {
			t.Errorf("%s(%v): IsError %v, %q; want a tool error starting %q", c.tool, c.args, res.IsError, text(res), c.code+": ")
		}
	}
}

func TestMCPMessagesUsageAndAuthorize(t *testing.T) {
	d := kintest.StartDaemon(t)
	cs := connect(t, d.Client)
	var a mcpserver.SpawnOutput
	ok(t, cs, "spawn_agent", map[string]any{"name": "inboxed", "responsible": "ops", "command": []string{"/bin/sh", "-c", "exec sleep 600"}}, &a)
	t.Cleanup(func() { d.Client.Stop(context.Background(), kin.StopRequest{ID: a.ID}) })

	ok(t, cs, "send_message", map[string]any{"to": "inboxed", "text": "hello"}, nil)
	var inbox mcpserver.InboxOutput
	ok(t, cs, "read_inbox", map[string]any{"agent": a.ID}, &inbox)
	if len(inbox.Messages) != 1 || inbox.Messages[0].Text != "hello" || inbox.Messages[0].To != a.ID {
		t.Errorf("read_inbox: %+v", inbox.Messages)
	}

	var spend kin.Spend
	ok(t, cs, "report_usage", map[string]any{"agent": a.ID, "tokens": 120, "cost": 0.5}, &spend)
	if spend.Tokens != 120 || spend.Cost != 0.5 {
		t.Errorf("report_usage: %+v", spend)
	}

	var dec kin.Decision
	said := ok(t, cs, "authorize_tool", map[string]any{"agent": a.ID, "tool": "read"}, &dec)
	if !strings.HasPrefix(said, "read ") || dec.Reason == "" {
		t.Errorf("authorize_tool said %q: %+v", said, dec)
	}
}

// TestMCPWaitOnAnAgentWithoutHandoffSaysHowItEnded: an agent spawned with no
// handoff hands no result back; wait_agent says so (status none) and how it
// ended, instead of an empty status.
func TestMCPWaitOnAnAgentWithoutHandoffSaysHowItEnded(t *testing.T) {
	d := kintest.StartDaemon(t)
	cs := connect(t, d.Client)
	var plain mcpserver.SpawnOutput
	ok(t, cs, "spawn_agent", map[string]any{"name": "plain", "responsible": "ops", "command": []string{"/bin/sh", "-c", "exit 3"}}, &plain)
	var waited mcpserver.ResultOutput
	said := ok(t, cs, "wait_agent", map[string]any{"id": plain.ID, "timeout": "30s"}, &waited)
	if waited.Status != kin.ResultNone || waited.State != kin.StateExited || waited.Exit == nil || waited.Exit.Code != 3 {
		t.Fatalf("wait_agent: %+v (%s); want status none, state exited, exit 3", waited, said)
	}
	if !strings.Contains(said, "no result to hand back (it had no handoff); it is exited, exit 3") {
		t.Errorf("wait_agent said %q", said)
	}
}

// TestMCPRateLimitedCarriesRetryAfter: an agent past its report quota gets
// a tool error with the rate_limited code and when to retry.
func TestMCPRateLimitedCarriesRetryAfter(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "quotas.json")
	if err := os.WriteFile(prof, []byte(`{"name": "quotas", "quotas": {"reports": {"per_second": 0.5, "burst": 1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	a, err := d.Client.Spawn(context.Background(), kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "reporter", Responsible: "ops"},
		Command:         []string{"/bin/sh", "-c", "exec sleep 600"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.Stop(context.Background(), kin.StopRequest{ID: a.ID}) })
	cs := connect(t, d.Client.ActingAs(a.ID.String())) // as the agent's own kin mcp would
	ok(t, cs, "report_usage", map[string]any{"tokens": 1}, nil)
	res := call(t, cs, "report_usage", map[string]any{"tokens": 1})
	if !res.IsError || !strings.HasPrefix(text(res), string(kin.ECodeRateLimited)+": ") || !strings.Contains(text(res), "quotas.reports") || !strings.Contains(text(res), "(retry after ") {
		t.Fatalf("past the quota: IsError %v, %q", res.IsError, text(res))
	}
}
