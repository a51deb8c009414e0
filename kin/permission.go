package kin

import (
	"encoding/json"
	"time"
)

// Error codes of the permission authority.
const (
	// ECodeEscalation: a spawn, promotion or template asked for more than
	// the parent's effective policy; the message lists every item.
	ECodeEscalation ErrorCode = "permission_escalation"
	// ECodeDenied: the agent's effective policy denies the action.
	ECodeDenied ErrorCode = "permission_denied"
	// ECodeBudget: the agent's subtree has spent its budget or passed its
	// deadline.
	ECodeBudget ErrorCode = "budget_exhausted"
	// ECodeSandbox: kin cannot enforce the agent's mounts here (no
	// Landlock) and the operator did not allow best effort.
	ECodeSandbox ErrorCode = "sandbox_unavailable"
)

// EscalationError is ECodeEscalation with every item that exceeds the
// parent, for clients that show them one by one. The API sends it as an
// error body {"code", "message", "excess"}, and the client SDK returns it
// as an *EscalationError again.
//
// Err is a named field, not an embedded Error: an embedded field named
// Error would hide the Error method, and *EscalationError would not be an
// error at all.
type EscalationError struct {
	Err    Error    `json:"error"` // Code is ECodeEscalation; Message lists every item
	Excess []Excess `json:"excess"`
}

// Escalationf returns an *EscalationError with a formatted message.
func Escalationf(excess []Excess, format string, args ...any) *EscalationError {
	return &EscalationError{Err: *Errorf(ECodeEscalation, format, args...), Excess: excess}
}

func (e *EscalationError) Error() string { return e.Err.Error() }

// Unwrap lets errors.As find the *Error inside, so ErrorCodeOf and every
// boundary treat an escalation like any other kin error.
func (e *EscalationError) Unwrap() error { return &e.Err }

// AuthorizeRequest asks whether an agent may use a tool now. Agent 0 is
// the calling agent.
type AuthorizeRequest struct {
	Agent AgentID         `json:"agent,omitempty"`
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ExplainRequest asks why an agent may or may not use a tool or reach a
// path; exactly one of Tool and Path is set.
type ExplainRequest struct {
	Agent AgentID `json:"agent"`
	Tool  string  `json:"tool,omitempty"`
	Path  string  `json:"path,omitempty"`
}

// Explanation is a decision with the whole chain that led to it.
type Explanation struct {
	Agent    AgentID  `json:"agent"`
	Tool     string   `json:"tool,omitempty"`
	Path     string   `json:"path,omitempty"`
	Mode     Mode     `json:"mode,omitempty"` // for a path: its effective mode
	Decision Decision `json:"decision"`
	// Steps are what each layer says, from the global list down.
	Steps []Decision `json:"steps"`
}

// UsageRequest reports spend by an agent (0: the caller).
type UsageRequest struct {
	Agent  AgentID `json:"agent,omitempty"`
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// Spend is what an agent and its subtree have used, against the budget in
// force for the subtree.
type Spend struct {
	Tokens         int64     `json:"tokens"`         // the agent's own
	Cost           float64   `json:"cost"`           // the agent's own
	SubtreeTokens  int64     `json:"subtree_tokens"` // it and all descendants
	SubtreeCost    float64   `json:"subtree_cost"`   // it and all descendants
	SubtreeSpawns  int64     `json:"subtree_spawns"` // descendants ever spawned
	MaxTokens      *int64    `json:"max_tokens,omitempty"`
	MaxCost        *float64  `json:"max_cost,omitempty"`
	MaxDescendants *int64    `json:"max_descendants,omitempty"`
	DeadlineAt     time.Time `json:"deadline_at,omitzero"`
	Exhausted      string    `json:"exhausted,omitempty"` // why the subtree was stopped, if it was
}

// AgentPolicy is an agent's requested and effective policy and its spend.
type AgentPolicy struct {
	Agent     AgentID         `json:"agent"`
	Stage     string          `json:"stage,omitempty"` // its own or inherited stage
	Requested *Policy         `json:"requested,omitempty"`
	Effective EffectivePolicy `json:"effective"`
	Spend     Spend           `json:"spend"`
}

// PromoteRequest changes an agent's stage (seed 003 §2).
type PromoteRequest struct {
	Agent AgentID `json:"agent"`
	Stage string  `json:"stage"`
}

// ReadRequest reads a file of another agent's workspace through kin (seed
// 003 §4). Reader 0 is the caller; the operator must name a reader.
type ReadRequest struct {
	Reader AgentID `json:"reader,omitempty"`
	Owner  string  `json:"owner"` // agent id or name
	Path   string  `json:"path"`  // relative to the owner's workspace
}

// Message is one line of a session's messages.jsonl sent through kin.
type Message struct {
	Seq     int64     `json:"seq,omitempty"` // the event that carried it
	From    AgentID   `json:"from"`          // 0: the operator
	To      AgentID   `json:"to"`
	Session string    `json:"session"`
	Text    string    `json:"text"`
	At      time.Time `json:"at"`
}

// SendRequest sends a message to an agent's main session, or to Session.
type SendRequest struct {
	To      string `json:"to"` // agent id or name
	Session string `json:"session,omitempty"`
	Text    string `json:"text"`
}

// MaxMessageLen bounds a message's text.
const MaxMessageLen = 64 << 10

// InboxRequest reads the messages sent to an agent (0: the caller).
type InboxRequest struct {
	Agent  AgentID `json:"agent,omitempty"`
	Since  int64   `json:"since,omitempty"` // event seq to start after
	Follow bool    `json:"follow,omitempty"`
}

// Template is a workspace template as read by the spawner (seed 003 §3):
// its files, placeholders not yet replaced, and the values of --set.
type Template struct {
	Files []TemplateFile    `json:"files"`
	Vars  map[string]string `json:"vars,omitempty"`
}

// TemplateFile is one file or directory of a template.
type TemplateFile struct {
	Path string `json:"path"` // slash-separated, relative, clean
	Dir  bool   `json:"dir,omitempty"`
	Mode uint32 `json:"mode,omitempty"` // permission bits
	Data string `json:"data,omitempty"`
}
