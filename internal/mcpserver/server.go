// Package mcpserver serves kin as a Model Context Protocol server: the
// tools an agent (or the operator) needs to spawn, wait for, read, message
// and stop agents, acting through a kin.Service exactly as the CLI does. A
// kin refusal (a governor rule, permission_escalation, a spent budget)
// comes back as a tool error whose text starts with the kin error code, so
// that the model sees it and can correct itself; only a broken protocol is
// a protocol error.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/agentreq"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/kin"
)

// Options adjust the server.
type Options struct {
	// Version is reported to clients as the server's version.
	Version string
	// Dir is the working directory a spawned agent starts in when the
	// call gives none, and what a relative dir is joined to. Empty: the
	// daemon's default (inside an agent, the child's own session).
	Dir string
	// LookPath resolves a command name without a slash, as a shell would
	// (nil: exec.LookPath, in this server's PATH). A name not found is left
	// for the daemon.
	LookPath func(string) (string, error)
}

// New returns an MCP server whose tools act through svc: as the agent svc
// speaks for (an agent's socket), or as the operator.
func New(svc kin.Service, opts Options) *mcp.Server {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "kin", Title: "kin: spawn and govern trees of AI agents", Version: opts.Version},
		&mcp.ServerOptions{Instructions: instructions})
	t := &tools{svc: svc, opts: opts}
	t.add(s)
	return s
}

// Caller is who an HTTP request comes from, as the authentication in front
// of NewHTTPHandler found: the service the tools act through, and what they
// may do for it on this server's side.
type Caller struct {
	// Service is what the tools act through, with the request's context
	// (which says, to the daemon, who the caller is).
	Service kin.Service
	// ReadsFiles lets spawn_agent read the files a call names (refs to
	// hash, a template to provision from) with this server's rights. Give it
	// to the operator only: an agent's files are read by "kin mcp" running
	// inside it, under its own sandbox, and never by the daemon for it.
	ReadsFiles bool
}

// WithCaller returns ctx carrying c, for NewHTTPHandler's tools.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerKey carries an HTTP request's Caller to the tools answering it (the
// SDK hands the request's context on to them).
type callerKey struct{}

// NewHTTPHandler serves kin's MCP tools over the streamable HTTP transport,
// stateless: each POST is one JSON-RPC message, answered on its own. The
// handler authenticates nobody: whatever is in front of it must put the
// request's Caller in its context (WithCaller); a request without one is
// refused with 401. One server serves every request, its tools acting
// through the Caller of the request they answer. Browsers' cross-origin
// requests, and requests to a loopback address naming another host (DNS
// rebinding), are refused with 403.
func NewHTTPHandler(opts Options) http.Handler {
	srv := New(nil, opts)
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if _, ok := r.Context().Value(callerKey{}).(Caller); !ok {
			return nil
		}
		return srv
	}, &mcp.StreamableHTTPOptions{Stateless: true,
		// A client that goes away ends its call: a wait_agent without a
		// timeout does not outlive the request that asked for it.
		PropagateRequestCancellation: true})
	// Browsers' cross-origin requests (CSRF, DNS rebinding) are refused
	// before the SDK sees them: the middleware the SDK's deprecated option
	// wrapped.
	h = http.NewCrossOriginProtection().Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(callerKey{}).(Caller); !ok || c.Service == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(&kin.Error{Code: kin.ECodeUnauthorized, Message: "no caller: the MCP endpoint needs the operator token or an agent's signed request"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

const instructions = `kin registers, governs and supervises trees of AI agents. These tools act
as the caller: inside an agent (KIN_SOCKET set) as that agent, on itself and
its descendants only; otherwise as kin's operator. Spawn a child with
spawn_agent (give it its task as handoff), wait for it with wait_agent, which
returns its result.md, and stop it with stop_agent. A refusal by kin (a
governor rule such as spawn_depth_exceeded, permission_escalation,
budget_exhausted) is a tool error whose text starts with the kin error code.`

// tools holds what the tool handlers share.
type tools struct {
	svc  kin.Service // nil for NewHTTPHandler's: each request brings its own
	opts Options
}

// caller is who a call comes from: its HTTP request's Caller, or the
// server's own service, which reads files as the process kin mcp runs in.
func (t *tools) caller(ctx context.Context) (Caller, error) {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c, nil
	}
	if t.svc == nil {
		return Caller{}, kin.Errorf(kin.ECodeInternal, "no kin service for this call")
	}
	return Caller{Service: t.svc, ReadsFiles: true}, nil
}

// handler is a tool's work, for caller c: the text the model reads and the
// structured output, or an error, which becomes a tool error (toolError).
type handler[In any] func(ctx context.Context, c Caller, in In) (text string, out any, err error)

// addTool adds the tool h does. Its output schema is left out (Out is
// any): kin's JSON has durations as strings and optional times, which
// inferred schemas would misdescribe. The structured output is still
// sent, with its text.
func addTool[In any](s *mcp.Server, t *tools, tool *mcp.Tool, h handler[In]) {
	mcp.AddTool(s, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		c, err := t.caller(ctx)
		if err != nil {
			return nil, nil, toolError(err)
		}
		text, out, err := h(ctx, c, in)
		if err != nil {
			return nil, nil, toolError(err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})
}

// toolError is the tool error for err: "code: message", and for
// rate_limited "retry after Ns" too (a tool error is text only).
func toolError(err error) error {
	if err == nil {
		return nil
	}
	var ke *kin.Error
	if errors.As(err, &ke) {
		out := &kin.Error{Code: ke.Code, Message: ke.Message, RetryAfter: ke.RetryAfter}
		if out.RetryAfter > 0 && !strings.Contains(out.Message, "retry after") {
			out.Message += fmt.Sprintf(" (retry after %.3gs)", out.RetryAfter)
		}
		return out
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return kin.Errorf(kin.ECodeUnavailable, "interrupted: %v", err)
	}
	// Not a kin answer (kin unreachable, a broken connection): the caller
	// is local, and the details are what it needs.
	return kin.Errorf(kin.ECodeInternal, "%v", err)
}

func invalid(format string, args ...any) error { return kin.Errorf(kin.ECodeInvalid, format, args...) }

func jsonText(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// SpawnInput is spawn_agent's input.
type SpawnInput struct {
	Name             string            `json:"name,omitempty" jsonschema:"the agent's name: letters, digits and - _ . : @ (default: made from the command)"`
	Role             string            `json:"role,omitempty" jsonschema:"the agent's role (the governor's profile may require one)"`
	Command          []string          `json:"command" jsonschema:"the agent's process: the program and its arguments, e.g. [\"/bin/sh\", \"-c\", \"...\"]; a program without a slash is looked up in this server's PATH"`
	Parent           int64             `json:"parent,omitempty" jsonschema:"the parent agent's id; default: the calling agent, or for the operator a new root (which needs responsible)"`
	Responsible      string            `json:"responsible,omitempty" jsonschema:"the accountable human or organisation (required for a root agent)"`
	Life             string            `json:"life,omitempty" jsonschema:"owned (default: the agent dies with its parent) or detached"`
	Handoff          string            `json:"handoff,omitempty" jsonschema:"the agent's task, handoff.md (Markdown); the child finds it at $KIN_HANDOFF and writes its result to $KIN_OUTPUT/result.md"`
	Refs             []string          `json:"refs,omitempty" jsonschema:"with handoff: input refs, the paths of files the child should read (best absolute; a relative one is taken from this server's working directory); each is hashed (sha256) here, with the caller's rights"`
	Contract         map[string]any    `json:"contract,omitempty" jsonschema:"with handoff: the output contract (contract.json), e.g. {\"sections\":[{\"name\":\"Summary\"}]}; default: a non-empty result.md with a non-empty Summary section"`
	Policy           map[string]any    `json:"policy,omitempty" jsonschema:"the agent's own policy, a subset of its parent's: tools {allow, deny} (glob patterns), mounts {path: ro|rw}, spawn {allow, roles}, budget {max_tokens, max_cost, max_descendants, deadline}, ...; more than the parent holds is refused with permission_escalation"`
	Stage            string            `json:"stage,omitempty" jsonschema:"the preset the agent's tools follow (default: its parent's)"`
	Template         string            `json:"template,omitempty" jsonschema:"a template directory to provision the agent's workspace from; its .kin.json or .kin.yaml may give a role, a stage and a policy"`
	Set              map[string]string `json:"set,omitempty" jsonschema:"with template: the values of its placeholders, e.g. {\"TOPIC\": \"lineage\"}"`
	Env              []string          `json:"env,omitempty" jsonschema:"entries of the form KEY=VALUE added to the agent's environment (KIN_* are kin's own)"`
	Dir              string            `json:"dir,omitempty" jsonschema:"the process's working directory (default: this server's, or inside an agent the child's own session)"`
	Host             string            `json:"host,omitempty" jsonschema:"the host of kin's fleet to run the agent on (default: the parent's host when the parent runs on one, else the host this server talks to); command and dir then name paths on that host"`
	Restart          string            `json:"restart,omitempty" jsonschema:"never (default), on-failure or always: whether kin replaces the process after it ends"`
	Grace            string            `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL when the agent is stopped, a duration like 5s (default: kin's; 0s kills at once)"`
	Wallet           string            `json:"wallet,omitempty" jsonschema:"the wallet or account the agent's spend is charged to (seed 000's registration data)"`
	Scope            string            `json:"scope,omitempty" jsonschema:"what the agent is for, in a few words (seed 000's registration data)"`
	SelfModifying    bool              `json:"self_modifying,omitempty" jsonschema:"true when the agent may change its own code or prompt (seed 000's registration data)"`
	ConstitutionHash string            `json:"constitution_hash,omitempty" jsonschema:"the hash of the agent's constitution, its standing instructions (seed 000)"`
	CapabilityHash   string            `json:"capability_hash,omitempty" jsonschema:"the hash of the agent's capability set, e.g. its tool list (seed 000)"`
}

// SpawnOutput is spawn_agent's output.
type SpawnOutput struct {
	ID    kin.AgentID `json:"id"`
	Agent *kin.Agent  `json:"agent"`
}

// spawnRequest turns the tool's input into kin's request, reading and
// checking the files it names as kin spawn does, when the caller may have
// files read for it (readsFiles).
func (t *tools) spawnRequest(in SpawnInput, readsFiles bool) (kin.SpawnRequest, error) {
	req := kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{
			Name: in.Name, Role: in.Role, Parent: kin.AgentID(in.Parent),
			Responsible: in.Responsible, Life: kin.Life(in.Life), Stage: in.Stage,
			Wallet: in.Wallet, Scope: in.Scope, SelfModifying: in.SelfModifying,
			ConstitutionHash: in.ConstitutionHash, CapabilityHash: in.CapabilityHash,
		},
		Env: in.Env, Restart: kin.RestartPolicy(in.Restart), Host: in.Host,
	}
	grace, err := parseGrace(in.Grace)
	if err != nil {
		return req, err
	}
	req.Grace = grace
	if !readsFiles && (len(in.Refs) > 0 || in.Template != "") {
		return req, kin.Errorf(kin.ECodeForbidden, "refs and template name files, which kin reads only with the caller's own rights: "+
			"over HTTP an agent cannot have the daemon read them; run \"kin mcp\" inside the agent (stdio), or use \"kin spawn --ref/--template\"")
	}
	if len(in.Command) == 0 || in.Command[0] == "" {
		return req, invalid("command is empty: give the program to run and its arguments")
	}
	req.Command = slices.Clone(in.Command)
	if in.Host == "" { // on another host, its kin serve's PATH decides
		req.Command[0] = agentreq.ResolveCommand(req.Command[0], t.opts.LookPath)
	}
	switch {
	case in.Host != "" && in.Dir == "":
		// On another host: its session directory there.
	case in.Dir != "" && filepath.IsAbs(in.Dir):
		req.Dir = filepath.Clean(in.Dir)
	case in.Dir != "" && t.opts.Dir == "":
		return req, invalid("dir %q is relative: give an absolute path", in.Dir)
	case in.Dir != "":
		req.Dir = filepath.Join(t.opts.Dir, in.Dir)
	default:
		req.Dir = t.opts.Dir
	}

	if in.Handoff == "" && (len(in.Refs) > 0 || in.Contract != nil) {
		return req, invalid("refs and contract are part of a handoff: give handoff, the task to hand the agent")
	}
	if in.Handoff != "" {
		spec := agentreq.Handoff{Task: in.Handoff, Refs: in.Refs, TaskLabel: "handoff", RefsLabel: "refs", ContractLabel: "contract"}
		if in.Contract != nil {
			spec.Contract, _ = json.Marshal(in.Contract)
		}
		ho, err := spec.Build()
		if err != nil {
			return req, err
		}
		req.Handoff = ho
	}

	var own *kin.Policy
	if in.Policy != nil {
		data, _ := json.Marshal(in.Policy)
		pol, err := policy.Parse(data)
		if err != nil {
			return req, invalid("policy: %v", err)
		}
		own = &pol
	}
	if in.Template == "" {
		if len(in.Set) > 0 {
			return req, invalid("set fills a template's placeholders: it needs template")
		}
		req.Policy = own
		return req, nil
	}
	tpl := agentreq.Template{Dir: in.Template, Vars: in.Set, Label: "template", PolicyLabel: "policy"}
	return req, tpl.Apply(&req.RegisterRequest, own)
}

func (t *tools) spawn(ctx context.Context, c Caller, in SpawnInput) (string, any, error) {
	req, err := t.spawnRequest(in, c.ReadsFiles)
	if err != nil {
		return "", nil, err
	}
	a, err := c.Service.Spawn(ctx, req)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("spawned agent %d (%s), pid %d\n%s", a.ID, a.Name, a.PID, jsonText(a)), SpawnOutput{ID: a.ID, Agent: a}, nil
}

// IDInput names one agent.
type IDInput struct {
	ID int64 `json:"id" jsonschema:"the agent's id"`
}

// WaitInput is wait_agent's input.
type WaitInput struct {
	ID      int64  `json:"id" jsonschema:"the agent's id"`
	Timeout string `json:"timeout,omitempty" jsonschema:"how long to wait, a Go duration like 30s, 10m or 1h (default: until the agent ends or the call is cancelled); passing it is a timeout error"`
}

// ResultOutput is an agent's result: wait_agent's and get_result's output.
type ResultOutput struct {
	ID         kin.AgentID      `json:"id"`
	Name       string           `json:"name,omitempty"`
	Status     kin.ResultStatus `json:"status"`
	State      kin.State        `json:"state,omitempty"`
	Result     string           `json:"result"`
	Violations []string         `json:"violations,omitempty"`
	Refs       []kin.Ref        `json:"refs,omitempty"`
	Dir        string           `json:"dir,omitempty"`
	Exit       *kin.Exit        `json:"exit,omitempty"`
}

// resultOutput is an agent's result as the tools give it: its text, and
// its structured output.
func resultOutput(r *kin.AgentResult) (string, any, error) {
	out := ResultOutput{Status: r.Status, Result: r.Result, Violations: r.Violations, Refs: r.Refs, Dir: r.Dir}
	if r.Agent != nil {
		out.ID, out.Name, out.State, out.Exit = r.Agent.ID, r.Agent.Name, r.Agent.State, r.Agent.Exit
	}
	var b strings.Builder
	if out.Status == "" {
		// No handoff, so no result channel: say how it ended instead of
		// an empty status.
		out.Status = kin.ResultNone
		fmt.Fprintf(&b, "agent %d (%s): no result to hand back (it had no handoff); it is %s", out.ID, out.Name, out.State)
		if out.Exit != nil {
			fmt.Fprintf(&b, ", %s", out.Exit)
		}
		b.WriteString("\n")
		return b.String(), out, nil
	}
	fmt.Fprintf(&b, "agent %d (%s): %s\n", out.ID, out.Name, out.Status)
	for _, v := range out.Violations {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	if out.Result != "" {
		fmt.Fprintf(&b, "\n%s", out.Result)
	} else {
		b.WriteString("\n(no result.md)\n")
	}
	return b.String(), out, nil
}

func wait(ctx context.Context, c Caller, in WaitInput) (string, any, error) {
	req := kin.WaitRequest{ID: kin.AgentID(in.ID)}
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 {
			return "", nil, invalid("timeout %q is not a positive duration like 30s or 10m", in.Timeout)
		}
		req.Timeout = kin.Duration(d)
	}
	r, err := c.Service.Wait(ctx, req)
	if err != nil {
		return "", nil, err
	}
	return resultOutput(r)
}

func result(ctx context.Context, c Caller, in IDInput) (string, any, error) {
	r, err := c.Service.Result(ctx, kin.AgentID(in.ID))
	if err != nil {
		return "", nil, err
	}
	return resultOutput(r)
}

// OptionalIDInput names an agent or, left out, the caller.
type OptionalIDInput struct {
	ID int64 `json:"id,omitempty" jsonschema:"the agent's id (default: the calling agent; for the operator, every root agent)"`
}

// AgentsOutput is a list of agents.
type AgentsOutput struct {
	Agents []*kin.Agent `json:"agents"`
}

// agentsResult is a list of agents as the tools give it.
func agentsResult(list []*kin.Agent, what string) (string, any, error) {
	if list == nil {
		list = []*kin.Agent{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s\n", len(list), what)
	for _, a := range list {
		fmt.Fprintf(&b, "- %d %s role=%q status=%s state=%s", a.ID, a.Name, a.Role, a.Status, a.State)
		if a.Result != "" {
			fmt.Fprintf(&b, " result=%s", a.Result)
		}
		b.WriteByte('\n')
	}
	return b.String(), AgentsOutput{Agents: list}, nil
}

func children(ctx context.Context, c Caller, in OptionalIDInput) (string, any, error) {
	id := kin.AgentID(in.ID)
	if id == 0 {
		me, err := c.Service.Whoami(ctx)
		if err != nil {
			return "", nil, err
		}
		if me == nil { // the operator: the roots, as kin ps --parent 0
			roots, err := c.Service.Agents(ctx, kin.AgentFilter{Parent: 0, HasParent: true})
			if err != nil {
				return "", nil, err
			}
			return agentsResult(roots, "root agents")
		}
		id = me.ID
	}
	kids, err := c.Service.Children(ctx, id)
	if err != nil {
		return "", nil, err
	}
	return agentsResult(kids, fmt.Sprintf("children of agent %d", id))
}

// StopInput is stop_agent's input.
type StopInput struct {
	ID    int64  `json:"id" jsonschema:"the agent to stop; its owned subtree is stopped with it"`
	Grace string `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL, a duration like 5s (default: each agent's own; 0s kills at once)"`
}

// parseGrace reads a grace period: nil when s is empty (the default).
func parseGrace(s string) (*kin.Duration, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return nil, invalid("grace %q is not a duration like 5s (0s kills at once)", s)
	}
	g := kin.Duration(d)
	return &g, nil
}

func stop(ctx context.Context, c Caller, in StopInput) (string, any, error) {
	grace, err := parseGrace(in.Grace)
	if err != nil {
		return "", nil, err
	}
	req := kin.StopRequest{ID: kin.AgentID(in.ID), Grace: grace}
	stopped, err := c.Service.Stop(ctx, req)
	if err != nil {
		return "", nil, err
	}
	return agentsResult(stopped, "agents stopped")
}

// SendInput is send_message's input.
type SendInput struct {
	To      string `json:"to" jsonschema:"the receiving agent, by id or name"`
	Text    string `json:"text" jsonschema:"the message"`
	Session string `json:"session,omitempty" jsonschema:"the receiver's session (default: its main one)"`
}

func send(ctx context.Context, c Caller, in SendInput) (string, any, error) {
	m, err := c.Service.Send(ctx, kin.SendRequest{To: in.To, Session: in.Session, Text: in.Text})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("sent message %d to agent %d", m.Seq, m.To), m, nil
}

// InboxInput is read_inbox's input.
type InboxInput struct {
	Agent int64 `json:"agent,omitempty" jsonschema:"whose inbox (default: the calling agent's; the operator must name one)"`
	Since int64 `json:"since,omitempty" jsonschema:"only messages after this seq (exclusive): the last seq read"`
}

// InboxOutput is read_inbox's output.
type InboxOutput struct {
	Messages []kin.Message `json:"messages"`
}

func inbox(ctx context.Context, c Caller, in InboxInput) (string, any, error) {
	out := InboxOutput{Messages: []kin.Message{}}
	err := c.Service.Inbox(ctx, kin.InboxRequest{Agent: kin.AgentID(in.Agent), Since: in.Since}, func(m kin.Message) error {
		out.Messages = append(out.Messages, m)
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d messages\n", len(out.Messages))
	for _, m := range out.Messages {
		from := "operator"
		if m.From != 0 {
			from = "agent " + m.From.String()
		}
		fmt.Fprintf(&b, "- seq %d from %s: %s\n", m.Seq, from, m.Text)
	}
	return b.String(), out, nil
}

// AuthorizeInput is authorize_tool's input.
type AuthorizeInput struct {
	Tool  string         `json:"tool" jsonschema:"the tool's name, e.g. read, exec, web_fetch"`
	Input map[string]any `json:"input,omitempty" jsonschema:"the tool call's input, as the tool would get it"`
	Agent int64          `json:"agent,omitempty" jsonschema:"the agent asking (default: the calling agent)"`
}

func authorize(ctx context.Context, c Caller, in AuthorizeInput) (string, any, error) {
	req := kin.AuthorizeRequest{Agent: kin.AgentID(in.Agent), Tool: in.Tool}
	if in.Input != nil {
		req.Input, _ = json.Marshal(in.Input)
	}
	d, err := c.Service.Authorize(ctx, req)
	if err != nil {
		return "", nil, err
	}
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	text := fmt.Sprintf("%s %s: %s", in.Tool, verdict, d.Reason)
	if d.Rule != "" {
		text += fmt.Sprintf(" (rule %q)", d.Rule)
	}
	return text, d, nil
}

// UsageInput is report_usage's input.
type UsageInput struct {
	Tokens int64   `json:"tokens,omitempty" jsonschema:"tokens used since the last report"`
	Cost   float64 `json:"cost,omitempty" jsonschema:"cost incurred since the last report"`
	Agent  int64   `json:"agent,omitempty" jsonschema:"the agent that spent (default: the calling agent)"`
}

func usage(ctx context.Context, c Caller, in UsageInput) (string, any, error) {
	if in.Tokens < 0 || in.Cost < 0 {
		return "", nil, invalid("tokens and cost are what was spent: they cannot be negative")
	}
	s, err := c.Service.Usage(ctx, kin.UsageRequest{Agent: kin.AgentID(in.Agent), Tokens: in.Tokens, Cost: in.Cost})
	if err != nil {
		return "", nil, err
	}
	text := fmt.Sprintf("spent: %d tokens, cost %g; subtree: %d tokens, cost %g", s.Tokens, s.Cost, s.SubtreeTokens, s.SubtreeCost)
	if s.Exhausted != "" {
		text += "; budget exhausted: " + s.Exhausted
	}
	return text, s, nil
}

// HeartbeatInput is heartbeat's input.
type HeartbeatInput struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"where the agent stands; a replacement after a crash gets it as KIN_RESUME_CURSOR"`
	ID     int64  `json:"id,omitempty" jsonschema:"the agent (default: the calling agent)"`
}

func heartbeat(ctx context.Context, c Caller, in HeartbeatInput) (string, any, error) {
	a, err := c.Service.Heartbeat(ctx, kin.HeartbeatRequest{ID: kin.AgentID(in.ID), Cursor: in.Cursor})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("agent %d (%s) alive, cursor %q", a.ID, a.Name, a.Cursor), a, nil
}

// add adds the tools to s.
func (t *tools) add(s *mcp.Server) {
	addTool(s, t, &mcp.Tool{Name: "spawn_agent", Description: `Spawn an agent: register it under the governor's rules and start its process
under supervision, as a child of the calling agent (or of parent). Give it its
task as handoff; it writes result.md into $KIN_OUTPUT. Returns the child's id and
record. Refusals (spawn_depth_exceeded, permission_escalation, spawn_not_allowed,
budget_exhausted, ...) are tool errors starting with the kin error code.`}, t.spawn)
	addTool(s, t, &mcp.Tool{Name: "wait_agent", Description: `Wait for an agent to end and for kin to check its result; returns the result's
status (completed, contract_violated, failed, cancelled) and result.md.`}, wait)
	addTool(s, t, &mcp.Tool{Name: "get_result", Description: `Read an agent's result as kin kept it, whether it has ended or not (status running
while it runs).`}, result)
	addTool(s, t, &mcp.Tool{Name: "list_children", Description: `List an agent's direct children (default: the calling agent's; for the
operator, the root agents) with their status, state and result status.`}, children)
	addTool(s, t, &mcp.Tool{Name: "stop_agent", Description: `Stop an agent's process and its owned subtree; returns the agents stopped.`}, stop)
	addTool(s, t, &mcp.Tool{Name: "send_message", Description: `Send a message to an agent's session (where both sides consent).`}, send)
	addTool(s, t, &mcp.Tool{Name: "read_inbox", Description: `Read the messages sent to the calling agent (or to agent), oldest first; pass
the last seq read as since to get only new ones. Does not wait.`}, inbox)
	addTool(s, t, &mcp.Tool{Name: "authorize_tool", Description: `Ask kin whether the calling agent may use a tool now, under its policy, stage and
budget. A denial is an answer (allowed: false, with the rule), not an error.`}, authorize)
	addTool(s, t, &mcp.Tool{Name: "report_usage", Description: `Report spend (tokens, cost); it counts against the agent and every ancestor's
budget. Returns the spend so far against the budget.`}, usage)
	addTool(s, t, &mcp.Tool{Name: "heartbeat", Description: `Report the calling agent alive, with a cursor saying where it stands.`}, heartbeat)
}
