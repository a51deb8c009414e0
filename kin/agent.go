package kin

import (
	"iter"
	"strconv"
	"strings"
	"time"
)

// AgentID identifies an agent. IDs are sequential from 1; 0 means "no
// parent" (seed 000's parentAgentId = 0 for a root).
type AgentID int64

func (id AgentID) String() string { return strconv.FormatInt(int64(id), 10) }

// ParseAgentID parses a decimal agent id; it accepts an optional leading '#'
// (as in seed 000's "Agent #7").
func ParseAgentID(s string) (AgentID, error) {
	t := s
	if len(t) > 0 && t[0] == '#' {
		t = t[1:]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, Errorf(ECodeInvalid, "%q is not an agent id (a positive integer)", s)
	}
	return AgentID(n), nil
}

// Status is the governance status of an agent (seed 000): what it is allowed
// to do. Only active agents may register children.
type Status string

const (
	StatusActive     Status = "active"
	StatusSuspended  Status = "suspended"
	StatusRevoked    Status = "revoked"
	StatusTerminated Status = "terminated"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusActive, StatusSuspended, StatusRevoked, StatusTerminated:
		return true
	}
	return false
}

// State is the runtime and liveness state of an agent (seed 002 §5, seed
// 001's cancellation). The registry alone leaves every agent "registered";
// the supervisor drives the rest.
type State string

const (
	StateRegistered State = "registered"
	StateActive     State = "active"
	StateStale      State = "stale"
	StateOffline    State = "offline"
	StateSuspended  State = "suspended"
	StateStopping   State = "stopping"
	StateCancelled  State = "cancelled"
	StateExited     State = "exited"
	StateFailed     State = "failed"
	StateTerminated State = "terminated"
)

// TerminalStates are the states an agent never leaves: it no longer runs and
// no longer counts as a live child.
var TerminalStates = []State{StateCancelled, StateExited, StateFailed, StateTerminated}

// AllStates lists every state, in lifecycle order.
var AllStates = []State{StateRegistered, StateActive, StateStale, StateOffline, StateSuspended, StateStopping,
	StateCancelled, StateExited, StateFailed, StateTerminated}

// Valid reports whether s is one of AllStates.
func (s State) Valid() bool {
	for _, v := range AllStates {
		if s == v {
			return true
		}
	}
	return false
}

// StateList is AllStates as a comma-separated list, for messages.
func StateList() string {
	names := make([]string, len(AllStates))
	for i, s := range AllStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Terminal reports whether s is one of TerminalStates.
func (s State) Terminal() bool {
	for _, t := range TerminalStates {
		if s == t {
			return true
		}
	}
	return false
}

// Life says whether an agent dies with its parent (seed 001).
type Life string

const (
	LifeOwned    Life = "owned"
	LifeDetached Life = "detached"
)

// Valid reports whether l is owned or detached.
func (l Life) Valid() bool { return l == LifeOwned || l == LifeDetached }

// Operator is the created_by value of agents registered by the operator
// (whoever holds the daemon's socket or operator token).
const Operator = "operator"

// Agent is one registered agent: its lineage, accountability and state.
type Agent struct {
	ID               AgentID   `json:"id"`
	Name             string    `json:"name"`
	Role             string    `json:"role"`
	Parent           AgentID   `json:"parent"`
	Generation       int       `json:"generation"`
	Responsible      string    `json:"responsible"`
	Wallet           string    `json:"wallet,omitempty"`
	ConstitutionHash string    `json:"constitution_hash,omitempty"`
	CapabilityHash   string    `json:"capability_hash,omitempty"`
	Scope            string    `json:"scope,omitempty"`
	SelfModifying    bool      `json:"self_modifying"`
	Life             Life      `json:"life"`
	Status           Status    `json:"status"`
	State            State     `json:"state"`
	CreatedAt        time.Time `json:"created_at"`
	CreatedBy        string    `json:"created_by"`
	UpdatedAt        time.Time `json:"updated_at"`
	// SpawnBlockedUntil is set while the governor's circuit breaker refuses
	// this agent's spawns.
	SpawnBlockedUntil time.Time `json:"spawn_blocked_until,omitzero"`

	// The runtime of a spawned agent (zero for registered-only agents).
	PID           int           `json:"pid,omitempty"`
	Command       []string      `json:"command,omitempty"`
	Restart       RestartPolicy `json:"restart,omitempty"`
	Grace         Duration      `json:"grace,omitempty"`
	StartedAt     time.Time     `json:"started_at,omitzero"`
	EndedAt       time.Time     `json:"ended_at,omitzero"`
	Exit          *Exit         `json:"exit,omitempty"`
	EndReason     string        `json:"end_reason,omitempty"` // exited, crashed, parent_dead, stopped, offline, lost, ...
	Replaces      AgentID       `json:"replaces,omitempty"`   // the agent this one replaced after a crash
	Cursor        string        `json:"cursor,omitempty"`     // the last cursor it reported
	LastHeartbeat time.Time     `json:"last_heartbeat,omitzero"`

	// The agent filesystem (seed 001): its session id under
	// home/<uid>/agent/<name>/session/, and where its handed-back result
	// stands ("" when it has no result channel: no parent session and no
	// handoff).
	Session string       `json:"session,omitempty"`
	Result  ResultStatus `json:"result,omitempty"`

	// Stage is the agent's own stage ("" when it follows its parent's).
	Stage string `json:"stage,omitempty"`

	// Host is the fleet's host that runs the agent's process (or, for an
	// agent without one, that registered it): its --host-name.
	Host string `json:"host,omitempty"`

	// RequestedBy is the agent that asked for this one's spawn when the
	// governor placed it under an ancestor instead (seed 002 §4.1: a
	// Specialist's Worker becomes its PO's child); 0 otherwise. The agent
	// never has more than RequestedBy had: its permissions are evaluated
	// through RequestedBy's chain.
	RequestedBy AgentID `json:"requested_by,omitempty"`

	// Reconciling is true while a restarted daemon has not yet checked
	// whether this agent's process, which the store says runs, still does:
	// its State is the store's last word, not yet confirmed. It is never
	// stored; the daemon checks every such agent in the background after
	// a restart (re-adopting it, or recording it lost), and a stop or
	// freeze of it waits for that check.
	Reconciling bool `json:"reconciling,omitempty"`
}

// Running reports whether the agent has a process that has not ended.
func (a *Agent) Running() bool { return a.PID != 0 && a.EndedAt.IsZero() }

// SpansHosts reports whether agents run on more than one host of a fleet:
// where the views (kin ps, kin tree, kin top) name each agent's host.
func SpansHosts(agents iter.Seq[*Agent]) bool {
	host, first := "", true
	for a := range agents {
		if first {
			host, first = a.Host, false
		} else if a.Host != host {
			return true
		}
	}
	return false
}

// Live reports whether the agent counts against its parent's children limit
// and its role's cardinality: not revoked or terminated, and still running or
// able to run. (A cardinality slot also needs the agent accountable: one in
// state offline, whose host's lease expired or whose heartbeats stopped,
// holds none, so a replacement may take it.)
func (a *Agent) Live() bool {
	return (a.Status == StatusActive || a.Status == StatusSuspended) && !a.State.Terminal()
}

// AgentCreatedBy is the created_by value for an agent spawned by agent id.
func AgentCreatedBy(id AgentID) string { return "agent:" + id.String() }

// Field size limits for registration input.
const (
	MaxResponsibleLen = 256
	MaxRoleLen        = 64
	MaxWalletLen      = 256
	MaxHashLen        = 256
	MaxScopeLen       = 4096
)

// RegisterRequest asks the registry for a new agent. Generation is never
// supplied: it is the parent's plus one.
type RegisterRequest struct {
	Name             string  `json:"name"`
	Role             string  `json:"role,omitempty"`
	Parent           AgentID `json:"parent,omitempty"`
	Responsible      string  `json:"responsible,omitempty"`
	Wallet           string  `json:"wallet,omitempty"`
	ConstitutionHash string  `json:"constitution_hash,omitempty"`
	CapabilityHash   string  `json:"capability_hash,omitempty"`
	Scope            string  `json:"scope,omitempty"`
	SelfModifying    bool    `json:"self_modifying,omitempty"`
	Life             Life    `json:"life,omitempty"`
	// Policy is the agent's own policy (nil: it keeps its parent's). It
	// must be a subset of the parent's effective policy.
	Policy *Policy `json:"policy,omitempty"`
	// Stage names the preset the agent's tools follow ("": its parent's).
	Stage string `json:"stage,omitempty"`
	// Template provisions the agent's workspace (seed 003 §3).
	Template *Template `json:"template,omitempty"`
}

// Validate checks the request's own fields (not the governor's rules) and
// names the first bad one.
func (r *RegisterRequest) Validate() error {
	if _, err := ParseName(r.Name); err != nil {
		return err
	}
	if r.Parent < 0 {
		return Errorf(ECodeInvalid, "parent %d is not an agent id (0 for a root)", r.Parent)
	}
	if r.Parent == 0 && r.Responsible == "" {
		return Errorf(ECodeInvalid, "responsible is required for a root agent (the accountable human or organisation): give --responsible WHO, or --parent ID to make it a child")
	}
	if r.Life != "" && !r.Life.Valid() {
		return Errorf(ECodeInvalid, "life %q is not owned or detached", r.Life)
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"role", r.Role, MaxRoleLen},
		{"responsible", r.Responsible, MaxResponsibleLen},
		{"wallet", r.Wallet, MaxWalletLen},
		{"constitution_hash", r.ConstitutionHash, MaxHashLen},
		{"capability_hash", r.CapabilityHash, MaxHashLen},
		{"scope", r.Scope, MaxScopeLen},
	} {
		if len(f.value) > f.max {
			return Errorf(ECodeInvalid, "%s is %d bytes long; at most %d are allowed", f.name, len(f.value), f.max)
		}
		if err := checkText(f.name, f.value, f.name == "scope"); err != nil {
			return err
		}
	}
	if r.Role != "" {
		if n, err := ParseName(r.Role); err != nil || n.Sep != 0 || strings.ContainsAny(r.Role, "@-") {
			return Errorf(ECodeInvalid, "role %q must be letters, digits, '_', '.', ':' and start and end with a letter or digit", r.Role)
		}
	}
	return nil
}

// checkText rejects control characters (newlines only where multiline text
// makes sense) and invalid UTF-8: these values end up in files, logs and
// terminals.
func checkText(field, s string, multiline bool) error {
	for i, r := range s {
		if r == 0xFFFD {
			return Errorf(ECodeInvalid, "%s is not valid UTF-8 at byte %d", field, i)
		}
		if r < 0x20 && !(multiline && (r == '\n' || r == '\t')) || r == 0x7f {
			return Errorf(ECodeInvalid, "%s has a control character at byte %d", field, i)
		}
	}
	return nil
}

// AgentFilter selects agents for listing. Zero fields match everything;
// HasParent distinguishes "parent = 0" (roots) from "any parent".
type AgentFilter struct {
	Status      Status  `json:"status,omitempty"`
	State       State   `json:"state,omitempty"`
	Role        string  `json:"role,omitempty"`
	Parent      AgentID `json:"parent,omitempty"`
	HasParent   bool    `json:"has_parent,omitempty"`
	Responsible string  `json:"responsible,omitempty"`
	// Name keeps agents of this name (at most one is live: names are
	// unique among agents that are not terminated).
	Name  string `json:"name,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// TreeNode is an agent with its children, for `kin tree`.
type TreeNode struct {
	Agent
	// Spend is the subtree's spend against its budget, for agents under a
	// policy that has one or that reported usage.
	Spend    *Spend      `json:"spend,omitempty"`
	Children []*TreeNode `json:"children"`
}

// TreeRowsHead is what goes before a subtree's stored rows when the daemon
// streams them as the store reads them (the compact tree form v2): what
// the rows do not hold.
type TreeRowsHead struct {
	// Fields names the rows' fields in order (store.Reader.AgentRowFields).
	Fields []string
	// N is how many agents the subtree had when it was listed: at most N
	// rows follow.
	N int
	// Spend is each agent's TreeNode.Spend that is not nil.
	Spend map[AgentID]*Spend
	// Reconciling lists the agents the daemon is re-adopting: an agent in
	// it that is Running is Reconciling.
	Reconciling []AgentID
}

// StatusAction is an operator's status change (seed 000).
type StatusAction string

const (
	ActionSuspend   StatusAction = "suspend"
	ActionResume    StatusAction = "resume"
	ActionRevoke    StatusAction = "revoke"
	ActionTerminate StatusAction = "terminate"
)

// Transition returns the status an agent in status from moves to under a,
// or ok=false if a does not apply to from.
func (a StatusAction) Transition(from Status) (to Status, ok bool) {
	switch a {
	case ActionSuspend:
		return StatusSuspended, from == StatusActive
	case ActionResume:
		return StatusActive, from == StatusSuspended
	case ActionRevoke:
		return StatusRevoked, from == StatusActive || from == StatusSuspended
	case ActionTerminate:
		return StatusTerminated, from != StatusTerminated
	}
	return "", false
}

// Valid reports whether a is one of the four actions.
func (a StatusAction) Valid() bool {
	switch a {
	case ActionSuspend, ActionResume, ActionRevoke, ActionTerminate:
		return true
	}
	return false
}

// StatusRequest changes an agent's status, and with Cascade every descendant's
// for which the change applies (descendants already past it are skipped).
type StatusRequest struct {
	ID      AgentID      `json:"id"`
	Action  StatusAction `json:"action"`
	Cascade bool         `json:"cascade,omitempty"`
	Reason  string       `json:"reason,omitempty"`
}
