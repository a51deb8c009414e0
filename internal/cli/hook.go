package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) hookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Ready hooks that let an agent runtime ask kin before each tool call",
		Long: `Hooks for agent runtimes that ask before they use a tool: each reads the
runtime's hook input, asks kin ("kin authorize") whether the agent may use
the tool, and answers in the runtime's own format. kin is then the decision
point for what the kernel cannot see: a shell command, a web fetch, an MCP
call.

"kin hook claude-code" is Claude Code's PreToolUse hook (see
integrations/claude-code/ for a ready settings snippet).`,
		Example: `  kin hook claude-code < pretooluse.json`,
		Args:    cobra.NoArgs,
		RunE:    run(func(cmd *cobra.Command, _ []string) error { return cmd.Help() }),
	}
	cmd.AddCommand(a.hookClaudeCodeCommand())
	return cmd
}

// maxHookInput bounds the hook's stdin: the API takes request bodies of at
// most 1 MiB, and the tool's input goes to kin whole.
const maxHookInput = 1 << 20

// claudeHookInput is what Claude Code writes on a command hook's stdin for
// PreToolUse. Fields kin does not use are read for the record; unknown
// ones are ignored (Claude Code adds fields over time).
type claudeHookInput struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	PermissionMode string          `json:"permission_mode"`
	HookEventName  string          `json:"hook_event_name"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolUseID      string          `json:"tool_use_id"`
}

// claudeHookOutput is a PreToolUse hook's answer on stdout.
type claudeHookOutput struct {
	HookSpecificOutput claudePreToolUse `json:"hookSpecificOutput"`
}

type claudePreToolUse struct {
	HookEventName            string `json:"hookEventName"`      // "PreToolUse"
	PermissionDecision       string `json:"permissionDecision"` // "allow" or "deny"
	PermissionDecisionReason string `json:"permissionDecisionReason"`
}

// claudeTools maps Claude Code's built-in tools to kin's vocabulary.
var claudeTools = map[string]string{
	"Bash":         "exec",
	"Read":         "read",
	"Glob":         "read",
	"Grep":         "read",
	"LS":           "read",
	"Write":        "write",
	"Edit":         "edit",
	"MultiEdit":    "edit",
	"NotebookEdit": "edit",
	"WebFetch":     "web_fetch",
	"WebSearch":    "web_search",
	"Task":         "spawn",
	"TodoWrite":    "todo",
}

// claudeToolName is kin's name for a Claude Code tool: the built-ins as
// claudeTools says, MCP tools (mcp__<server>__<tool>) unchanged, any other
// CamelCase name in snake_case ("BashOutput" is bash_output, "HTTPGet"
// http_get).
func claudeToolName(name string) string {
	if t, ok := claudeTools[name]; ok {
		return t
	}
	if strings.HasPrefix(name, "mcp__") {
		return name
	}
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]))
			acronymEnd := i > 0 && unicode.IsUpper(r[i-1]) && i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || acronymEnd {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// hookClaudeCodeCommand is Claude Code's PreToolUse hook. It follows the
// hook contract of Claude Code's hooks reference
// (https://code.claude.com/docs/en/hooks: "PreToolUse input", "PreToolUse
// decision control", "Exit code 2 behavior"; read through the copies of
// that page kept at spybara.com/anthropic/claude-code/history/docs/en/, and
// https://stevekinney.com/courses/ai-development/claude-code-hook-control-flow):
//
//   - the hook gets one JSON object on stdin: session_id, transcript_path,
//     cwd, permission_mode, hook_event_name ("PreToolUse"), tool_name,
//     tool_input (the tool's arguments) and tool_use_id;
//   - it answers with exit status 0 and, on stdout and nothing else, the
//     JSON {"hookSpecificOutput": {"hookEventName": "PreToolUse",
//     "permissionDecision": "allow" | "deny" | "ask",
//     "permissionDecisionReason": "..."}}; a deny's reason is shown to
//     Claude, an allow's to the user; "allow" skips Claude Code's own
//     permission prompt (its deny rules still apply);
//   - exit status 2 is a blocking error: the tool call is blocked, stdout
//     is ignored and stderr is fed to Claude;
//   - any other exit status is a non-blocking error: the tool call goes
//     ahead.
//
// So the hook must never exit 1: every failure (bad stdin, kin not
// reachable, kin refusing the question) is answered as a deny, with the
// reason, and exit status 0. Exit status 2 is left to what cannot answer
// at all: a wrong command line (cobra's usage error) or an answer that
// cannot be written; both block.
func (a *app) hookClaudeCodeCommand() *cobra.Command {
	var agent kin.AgentID
	cmd := &cobra.Command{
		Use:   "claude-code [--agent ID]",
		Short: "Claude Code's PreToolUse hook: ask kin before every tool call",
		Long: `Claude Code's PreToolUse hook. Claude Code runs it before every tool call
with the call as JSON on stdin; it asks kin whether the agent may use the
tool ("kin authorize", with tool_input as the input) and prints Claude
Code's decision on stdout:

  {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"kin: exec is denied ..."}}

Claude Code's tools are named in kin's vocabulary: Bash is exec; Read,
Glob, Grep and LS are read; Write is write; Edit, MultiEdit and NotebookEdit
are edit; WebFetch is web_fetch; WebSearch is web_search; Task is spawn;
TodoWrite is todo; MCP tools (mcp__<server>__<tool>) keep their names; any
other tool's CamelCase name becomes snake_case (BashOutput is bash_output).

It fails closed: when kin cannot be reached, refuses the question, or the
input is not a PreToolUse hook's JSON, the answer is "deny" with the reason.

Install it in Claude Code's settings (.claude/settings.json), for every tool:

  {"hooks": {"PreToolUse": [{"matcher": "*",
    "hooks": [{"type": "command", "command": "kin hook claude-code"}]}]}}

(integrations/claude-code/settings.json). When Claude Code runs inside an
agent kin spawned, KIN_SOCKET is in its environment and the hook asks for
that agent; the operator names one with --as (or --agent), e.g. the agent
"kin mcp --as" acts for. Outside any agent and without --as, there is no
agent to decide for: the hook makes no decision (exit 0, nothing on
stdout, a note on stderr), so Claude Code's own permission rules apply,
as if the hook were not installed.

Exit status: 0 with the decision on stdout (or none, outside any agent),
allowed or denied, whatever went wrong (Claude Code reads any other status but 2 as "go ahead"); 2 when
the command line is wrong or the answer cannot be written, which Claude
Code takes as a blocking error. --json changes nothing: the answer is
always JSON.`,
		Example: `  kin hook claude-code < pretooluse.json
  echo '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}' | kin hook claude-code --agent 7`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			allowed, reason := a.claudeCodeDecision(cmd, agent)
			if reason == "" {
				// No agent to decide for: no decision, so Claude Code's
				// own permission rules decide, as without the hook.
				fmt.Fprintln(a.env.Stderr, stepAside)
				return nil
			}
			out := claudeHookOutput{HookSpecificOutput: claudePreToolUse{
				HookEventName:            "PreToolUse",
				PermissionDecision:       "deny",
				PermissionDecisionReason: reason,
			}}
			if allowed {
				out.HookSpecificOutput.PermissionDecision = "allow"
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(out); err != nil {
				return &exitStatus{code: ExitUsage, err: err}
			}
			if _, err := a.env.Stdout.Write(buf.Bytes()); err != nil {
				return &exitStatus{code: ExitUsage, err: err}
			}
			return nil
		}),
	}
	cmd.Flags().Var(a.idFlag(&agent, "agent", false), "agent", "the agent to ask for, an `ID` or a live name (the operator's way; inside an agent, the default is the agent itself)")
	// --as is the name kin mcp --as takes: the hook acts for the agent the
	// MCP server acts for.
	cmd.Flags().Var(a.idFlag(&agent, "as", false), "as", "the same as --agent, as kin mcp --as takes it: an agent `ID` or a live name")
	return cmd
}

// stepAside is what the hook says on stderr when it has no agent to decide
// for: Claude Code outside any kin agent, with no --as. kin governs agents;
// the operator's own Claude Code is the operator's, so the hook makes no
// decision (exit 0, nothing on stdout) and Claude Code's own permission
// rules decide, as if the hook were not installed. Denying every tool there
// would make the README's snippet block a project that merely has kin
// installed.
const stepAside = "kin hook claude-code: no agent to decide for (not inside a kin agent, no --as): no decision, Claude Code's own permissions apply"

// claudeCodeDecision reads the hook's input and asks kin; every failure is
// a denial whose reason names it. An empty reason means no decision (see
// stepAside).
func (a *app) claudeCodeDecision(cmd *cobra.Command, agent kin.AgentID) (allowed bool, reason string) {
	deny := func(format string, args ...any) (bool, string) {
		return false, "kin: " + fmt.Sprintf(format, args...)
	}
	data, err := io.ReadAll(io.LimitReader(a.env.Stdin, maxHookInput+1))
	switch {
	case err != nil:
		return deny("denied: reading the hook's input from stdin failed: %v", err)
	case len(data) > maxHookInput:
		return deny("denied: the tool call's input is larger than %d bytes, more than kin accepts", maxHookInput)
	case len(bytes.TrimSpace(data)) == 0:
		return deny("denied: stdin is empty; kin hook claude-code expects Claude Code's PreToolUse JSON")
	}
	var in claudeHookInput
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&in); err != nil {
		return deny("denied: stdin is not Claude Code's PreToolUse JSON: %v", err)
	}
	if dec.More() {
		return deny("denied: stdin holds more than one JSON value")
	}
	switch {
	case in.HookEventName != "" && in.HookEventName != "PreToolUse":
		return deny("denied: kin hook claude-code answers PreToolUse only, not %q: install it under hooks.PreToolUse", in.HookEventName)
	case in.ToolName == "":
		return deny("denied: the hook's input has no tool_name")
	}
	tool := claudeToolName(in.ToolName)
	svc, err := a.service()
	if err != nil {
		return deny("denied: kin cannot be reached (%s), so %s is not allowed", kin.ErrorMessageOf(err), in.ToolName)
	}
	if agent == 0 {
		me, err := svc.Whoami(cmd.Context())
		if err != nil {
			return deny("denied: kin could not tell which agent asks: %s (%s), so %s is not allowed", kin.ErrorMessageOf(err), kin.ErrorCodeOf(err), in.ToolName)
		}
		if me == nil {
			return false, "" // the operator's Claude Code, outside any agent: see stepAside
		}
	}
	req := kin.AuthorizeRequest{Agent: agent, Tool: tool}
	if t := bytes.TrimSpace(in.ToolInput); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		req.Input = t
	}
	d, err := svc.Authorize(cmd.Context(), req)
	if err != nil {
		code, msg := kin.ErrorCodeOf(err), kin.ErrorMessageOf(err)
		if code == kin.ECodeInternal {
			msg = err.Error()
		}
		return deny("denied: kin could not decide whether %s (%s) is allowed: %s (%s)", in.ToolName, tool, msg, code)
	}
	why := d.Reason
	if d.Rule != "" {
		why += " (rule " + quoteRule(d.Rule) + ")"
	}
	if d.Allowed {
		return true, "kin: allowed: " + why
	}
	return false, "kin: denied: " + why
}
