package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Claude Code's PreToolUse input, as its hooks reference gives it.
const (
	claudeBash = `{"session_id":"abc123","transcript_path":"/home/dev/.claude/projects/work/abc123.jsonl","cwd":"/work",` +
		`"permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash",` +
		`"tool_input":{"command":"rm -rf /tmp/build","description":"Remove the build directory"},"tool_use_id":"toolu_01ABC123"}`
	claudeRead = `{"session_id":"abc123","transcript_path":"/home/dev/.claude/projects/work/abc123.jsonl","cwd":"/work",` +
		`"permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Read",` +
		`"tool_input":{"file_path":"/work/src/main.go"},"tool_use_id":"toolu_01DEF456"}`
)

// TestHookClaudeCode: a Bash call against a policy that denies exec, a
// Read call against one that allows read; the exact decision JSON. The
// hook runs inside agent 3 (whoami says so).
func TestHookClaudeCode(t *testing.T) {
	svc := &fakeService{denied: map[string]string{"exec": "exec is denied by agent 3's policy"}, whoami: &kin.Agent{ID: 3, Name: "coder"}}
	r := runFake(t, svc, claudeBash, "hook", "claude-code")
	want := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"kin: denied: exec is denied by agent 3's policy (rule \"deny exec\")"}}` + "\n"
	if r.code != ExitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("Bash: exit %d\nstdout %s\nwant   %s\nstderr %q", r.code, r.stdout, want, r.stderr)
	}
	r = runFake(t, svc, claudeRead, "hook", "claude-code", "--json")
	want = `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"kin: allowed: read is allowed by agent 3's policy (rule \"allow *\")"}}` + "\n"
	if r.code != ExitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("Read: exit %d\nstdout %s\nwant   %s\nstderr %q", r.code, r.stdout, want, r.stderr)
	}
	// tool_input goes to kin as Claude Code sent it; --agent names the agent.
	wantOK(t, runFake(t, svc, claudeRead, "hook", "claude-code", "--agent", "7"))
	wantReqs := []kin.AuthorizeRequest{
		{Tool: "exec", Input: json.RawMessage(`{"command":"rm -rf /tmp/build","description":"Remove the build directory"}`)},
		{Tool: "read", Input: json.RawMessage(`{"file_path":"/work/src/main.go"}`)},
		{Agent: 7, Tool: "read", Input: json.RawMessage(`{"file_path":"/work/src/main.go"}`)},
	}
	if !reflect.DeepEqual(svc.authorizes, wantReqs) {
		t.Errorf("requests %+v\nwant %+v", svc.authorizes, wantReqs)
	}
}

// hookDecision runs the hook on stdin and returns its decision, which must
// be Claude Code's PreToolUse JSON with exit status 0.
func hookDecision(t *testing.T, r result) claudePreToolUse {
	t.Helper()
	if r.code != ExitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q; the hook must answer with exit 0", r.code, r.stderr)
	}
	var out claudeHookOutput
	decodeOne(t, r.stdout, &out)
	if out.HookSpecificOutput.HookEventName != "PreToolUse" {
		t.Fatalf("hookEventName %q", out.HookSpecificOutput.HookEventName)
	}
	return out.HookSpecificOutput
}

// TestHookClaudeCodeFailsClosed: whatever goes wrong, the answer is a
// deny naming the problem, with exit status 0 (Claude Code takes any other
// status but 2 as "go ahead").
func TestHookClaudeCodeFailsClosed(t *testing.T) {
	svc := &fakeService{whoami: &kin.Agent{ID: 3, Name: "coder"}}
	for _, tc := range []struct{ name, stdin, want string }{
		{"empty", "", "stdin is empty"},
		{"blank", " \n", "stdin is empty"},
		{"not JSON", "{not json", "not Claude Code's PreToolUse JSON"},
		{"cut short", `{"tool_name":"Bash"`, "not Claude Code's PreToolUse JSON"},
		{"an array", `[1,2]`, "not Claude Code's PreToolUse JSON"},
		{"tool_name a number", `{"tool_name":5}`, "not Claude Code's PreToolUse JSON"},
		{"two values", `{"tool_name":"Bash"} {"tool_name":"Read"}`, "more than one JSON value"},
		{"null", `null`, "no tool_name"},
		{"no tool_name", `{"hook_event_name":"PreToolUse","tool_input":{}}`, "no tool_name"},
		{"another event", `{"hook_event_name":"PostToolUse","tool_name":"Bash"}`, `PreToolUse only, not "PostToolUse"`},
		{"too large", `{"tool_name":"Write","tool_input":{"content":"` + strings.Repeat("x", maxHookInput) + `"}}`, "larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := hookDecision(t, runFake(t, svc, tc.stdin, "hook", "claude-code"))
			if d.PermissionDecision != "deny" || !strings.Contains(d.PermissionDecisionReason, tc.want) || !strings.HasPrefix(d.PermissionDecisionReason, "kin: ") {
				t.Errorf("decision %+v, want a deny saying %q", d, tc.want)
			}
		})
	}
	if len(svc.authorizes) != 0 {
		t.Errorf("bad input reached the service: %+v", svc.authorizes)
	}

	// kin refusing the question, or not there at all.
	svc.authErr = kin.Errorf(kin.ECodeForbidden, "agent 9 is not one of yours")
	d := hookDecision(t, runFake(t, svc, claudeBash, "hook", "claude-code", "--agent", "9"))
	if d.PermissionDecision != "deny" || d.PermissionDecisionReason != "kin: denied: kin could not decide whether Bash (exec) is allowed: agent 9 is not one of yours (forbidden)" {
		t.Errorf("decision %+v", d)
	}
	t.Setenv("KIN_ADDR", "")
	home := kintest.TempHome(t) // no daemon there
	d = hookDecision(t, runCLIStdin(t, claudeRead, "--home", home, "hook", "claude-code"))
	if d.PermissionDecision != "deny" || !strings.Contains(d.PermissionDecisionReason, "cannot reach kin") || !strings.Contains(d.PermissionDecisionReason, "(unavailable)") {
		t.Errorf("kin not running: %+v", d)
	}

	// A wrong command line is exit status 2, which Claude Code takes as a
	// blocking error.
	wantUsage(t, runFake(t, svc, claudeBash, "hook", "claude-code", "--bogus"), "--bogus")
	wantUsage(t, runFake(t, svc, claudeBash, "hook", "claude-code", "extra"), "extra")
}

func TestClaudeToolName(t *testing.T) {
	for in, want := range map[string]string{
		"Bash": "exec", "Read": "read", "Glob": "read", "Grep": "read", "LS": "read",
		"Write": "write", "Edit": "edit", "MultiEdit": "edit", "NotebookEdit": "edit",
		"WebFetch": "web_fetch", "WebSearch": "web_search", "Task": "spawn", "TodoWrite": "todo",
		"mcp__github__create_issue": "mcp__github__create_issue",
		"mcp__Memory__ReadGraph":    "mcp__Memory__ReadGraph",
		"BashOutput":                "bash_output",
		"KillShell":                 "kill_shell",
		"ExitPlanMode":              "exit_plan_mode",
		"NotebookRead":              "notebook_read",
		"HTTPGet":                   "http_get",
		"Fetch2URL":                 "fetch2_url",
		"Skill":                     "skill",
		"already_snake":             "already_snake",
		"Ünïcode":                   "ünïcode",
	} {
		if got := claudeToolName(in); got != want {
			t.Errorf("claudeToolName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHookClaudeCodeAs: the hook acts for the agent kin mcp --as acts for,
// named as kin mcp --as names it (a live name or an id).
func TestHookClaudeCodeAs(t *testing.T) {
	svc := &fakeService{agents: map[kin.AgentID]*kin.Agent{4: {ID: 4, Name: "claude-session", Status: kin.StatusActive}}}
	wantOK(t, runFake(t, svc, claudeRead, "hook", "claude-code", "--as", "claude-session"))
	wantOK(t, runFake(t, svc, claudeRead, "hook", "claude-code", "--as", "#4"))
	if len(svc.authorizes) != 2 || svc.authorizes[0].Agent != 4 || svc.authorizes[1].Agent != 4 {
		t.Errorf("requests %+v, want both for agent 4", svc.authorizes)
	}
}

// TestHookClaudeCodeOutsideAnyAgentMakesNoDecision: the operator's own
// Claude Code, outside any agent and with no --as, gets no decision (exit 0,
// nothing on stdout, a note on stderr), so Claude Code's own permissions
// apply; kin is not asked about the tool.
func TestHookClaudeCodeOutsideAnyAgentMakesNoDecision(t *testing.T) {
	svc := &fakeService{}
	r := runFake(t, svc, claudeBash, "hook", "claude-code")
	if r.code != ExitOK || r.stdout != "" || r.stderr != stepAside+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 0, no decision, the note", r.code, r.stdout, r.stderr)
	}
	if len(svc.authorizes) != 0 {
		t.Errorf("kin was asked %+v", svc.authorizes)
	}
}
