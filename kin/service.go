package kin

import (
	"context"
	"time"
)

// HeaderActAs is the HTTP header with which the operator acts for one of its
// agents: its value is the agent's id, or the name of a live agent, and
// every request carrying it is
// answered as if that agent had sent it (on itself and its descendants
// only). Only the operator may send it; an agent that does is refused.
// "kin mcp --as" uses it so that an MCP client outside any agent acts for
// a root the operator registered, not with the operator's full power.
const HeaderActAs = "Kin-Act-As"

// Service is what kin offers: every method of its parts. The daemon
// implements it in process; the client SDK implements it over HTTP. The CLI
// holds only a Service. The parts say which methods belong together, and
// which of the daemon's services answers them (docs/ARCHITECTURE.md).
type Service interface {
	RegistryService
	RunnerService
	AuthorityService
	ExchangeService
	IdentityService
	LogService
	FleetService
}

// RegistryService is the lineage registry (seed 000) and the governor's
// rules (seed 002): who exists, under whom, and the events that say so.
type RegistryService interface {
	// Register adds an agent under the governor's rules.
	Register(ctx context.Context, req RegisterRequest) (*Agent, error)
	// Agent returns one agent.
	Agent(ctx context.Context, id AgentID) (*Agent, error)
	// Agents lists agents matching f, by id.
	Agents(ctx context.Context, f AgentFilter) ([]*Agent, error)
	// Children lists an agent's direct children, by id.
	Children(ctx context.Context, id AgentID) ([]*Agent, error)
	// Ancestors returns the responsibility chain: the agent itself first,
	// then its parent, up to its root.
	Ancestors(ctx context.Context, id AgentID) ([]*Agent, error)
	// Tree returns the subtree rooted at id, or every root's tree for id 0.
	Tree(ctx context.Context, id AgentID) ([]*TreeNode, error)
	// SetStatus suspends, resumes, revokes or terminates an agent (and with
	// Cascade its subtree) and returns the agents whose status changed.
	SetStatus(ctx context.Context, req StatusRequest) ([]*Agent, error)
	// Events returns stored events matching f, oldest first.
	Events(ctx context.Context, f EventFilter) ([]Event, error)
	// FollowEvents calls fn for every matching event from f.Since on, then
	// for each new one as it is committed, until ctx ends or fn fails.
	FollowEvents(ctx context.Context, f EventFilter, fn func(Event) error) error
	// Governor returns the rules in force.
	Governor(ctx context.Context) (*GovernorInfo, error)
	// SetGovernor changes one governor setting at runtime (operator only).
	SetGovernor(ctx context.Context, key, value string) (*GovernorInfo, error)
	// Status describes the daemon.
	Status(ctx context.Context) (*DaemonStatus, error)
}

// RunnerService runs agents: their processes, liveness, output and
// results (seed 001's handoff).
type RunnerService interface {
	// Spawn registers an agent and starts its process, supervised.
	Spawn(ctx context.Context, req SpawnRequest) (*Agent, error)
	// Stop stops an agent's process and cancels its owned subtree, and
	// returns the agents it stopped.
	Stop(ctx context.Context, req StopRequest) ([]*Agent, error)
	// Heartbeat reports an agent alive (seed 002 §5).
	Heartbeat(ctx context.Context, req HeartbeatRequest) (*Agent, error)
	// Logs calls fn with an agent's captured output from req.Offset on,
	// and with Follow keeps doing so until the agent ends or ctx is done.
	Logs(ctx context.Context, req LogsRequest, fn func([]byte) error) error
	// Whoami returns the calling agent, or nil for the operator.
	Whoami(ctx context.Context) (*Agent, error)
	// Resources reads what a running agent's cgroups account for now: CPU
	// time, and memory and pids where those controllers are enabled.
	Resources(ctx context.Context, id AgentID) (*AgentResources, error)

	// Wait blocks until the agent has ended and its result (if it has a
	// result channel) is checked and kept, then returns it; a timeout
	// returns ECodeTimeout.
	Wait(ctx context.Context, req WaitRequest) (*AgentResult, error)
	// Result returns an agent's result as kin kept it, ended or not.
	Result(ctx context.Context, id AgentID) (*AgentResult, error)
	// ContextPack returns what the agent's context should include about
	// its children (seed 001).
	ContextPack(ctx context.Context, id AgentID) (*ContextPack, error)
}

// AuthorityService is the permission authority (seeds 001, 003): effective
// policies, tool decisions, budgets and stages.
type AuthorityService interface {
	// Policy returns an agent's requested and effective policy and spend.
	Policy(ctx context.Context, id AgentID) (*AgentPolicy, error)
	// Authorize decides whether an agent may use a tool now (seed 003's
	// tool presets; kin is the decision point for what the kernel cannot
	// see). A denial is a Decision, not an error.
	Authorize(ctx context.Context, req AuthorizeRequest) (*Decision, error)
	// Explain says why an agent may or may not use a tool or reach a path,
	// naming the rule and the ancestor it comes from.
	Explain(ctx context.Context, req ExplainRequest) (*Explanation, error)
	// Usage reports spend; it counts against the agent and every ancestor.
	Usage(ctx context.Context, req UsageRequest) (*Spend, error)
	// Promote changes an agent's stage (its parent or the operator only).
	Promote(ctx context.Context, req PromoteRequest) (*Agent, error)
}

// ExchangeService is what agents share with consent (seed 003): another's
// files, and messages.
type ExchangeService interface {
	// ReadFile reads a file of another agent's workspace where both sides
	// consent (seed 003 §4).
	ReadFile(ctx context.Context, req ReadRequest) ([]byte, error)
	// Send appends a message to an agent's session (seed 003 §5).
	Send(ctx context.Context, req SendRequest) (*Message, error)
	// Inbox calls fn for each message sent to the agent, and with Follow
	// for each new one until ctx ends or fn fails.
	Inbox(ctx context.Context, req InboxRequest, fn func(Message) error) error
}

// IdentityService is the identity provider (seed 004, AAuth): agent
// tokens, grants, auth tokens and signing keys.
type IdentityService interface {
	// Token returns the calling agent's current agent token, issued or
	// refreshed when less than half its lifetime is left (agents only).
	Token(ctx context.Context) (*AgentToken, error)
	// Grant lets a top-level agent obtain auth tokens for a resource
	// (operator only).
	Grant(ctx context.Context, req GrantRequest) (*Grant, error)
	// Grants lists the grants of one agent (0: all).
	Grants(ctx context.Context, agent AgentID) ([]Grant, error)
	// Ungrant removes a grant and revokes the auth tokens issued under it.
	Ungrant(ctx context.Context, req UngrantRequest) (*Grant, error)
	// AuthTokens lists the auth tokens kin issued, revoked ones included.
	AuthTokens(ctx context.Context, f AuthTokenFilter) ([]AuthToken, error)
	// RotateKeys makes a new signing key for a role (KeyRoleAgent or
	// KeyRolePerson); the old one stays published (operator only).
	RotateKeys(ctx context.Context, role string) (*KeyRotation, error)
}

// LogService is the verifiable event log (seed 000's permanent, auditable
// record): checkpoints, proofs and verification.
type LogService interface {
	// LogCheckpoint returns a signed checkpoint covering every event so
	// far, with the log's public key (any caller).
	LogCheckpoint(ctx context.Context) (*LogCheckpoint, error)
	// LogCheckpoints lists every kept checkpoint, by size (operator only,
	// like the rest of the log's methods but AncestryProof).
	LogCheckpoints(ctx context.Context) ([]LogCheckpoint, error)
	// LogProof proves that event seq is in the log.
	LogProof(ctx context.Context, seq int64) (*LogProof, error)
	// LogConsistency proves that the tree of size from is a prefix of the
	// tree of size to (0: the latest).
	LogConsistency(ctx context.Context, from, to int64) (*LogConsistency, error)
	// LogLeaves returns the exact leaves of the events from seq from on,
	// at most limit of them (0: a page).
	LogLeaves(ctx context.Context, from int64, limit int) ([]string, error)
	// LogVerify recomputes the whole log and checks it against its stored
	// hashes, every checkpoint and the caller's.
	LogVerify(ctx context.Context, req LogVerifyRequest) (*LogReport, error)
	// AncestryProof is Ancestors with an inclusion proof of every link's
	// registration event.
	AncestryProof(ctx context.Context, id AgentID) (*AncestryProof, error)
}

// DaemonStatus describes a running daemon.
type DaemonStatus struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Home    string `json:"home"`
	Socket  string `json:"socket"`
	HTTP    string `json:"http,omitempty"`
	Store   string `json:"store"`
	// Host is the daemon's name in the fleet of daemons on its store.
	Host      string    `json:"host"`
	Profile   string    `json:"profile"`
	StartedAt time.Time `json:"started_at"`
	Agents    int       `json:"agents"`
	LastEvent int64     `json:"last_event"`
	// Containment is how agents' processes are held: "cgroup2",
	// "pid-namespaces" (no writable cgroup v2, but user and PID namespaces)
	// or "process-groups" (neither).
	Containment       string `json:"containment"`
	ContainmentReason string `json:"containment_reason,omitempty"`
	CgroupRoot        string `json:"cgroup_root,omitempty"`
	// Sandbox says what confines every agent besides its containment, e.g.
	// "Landlock ABI 7".
	Sandbox string `json:"sandbox,omitempty"`
	// Missing lists the guarantees this kernel and containment cannot give,
	// in words: kin never claims them.
	Missing []string `json:"missing,omitempty"`
	// Limits says how this host enforces each kernel limit of a policy's
	// budget (no values: those are each agent's).
	Limits []ResourceLimit `json:"limits,omitempty"`
	// AgentUIDRange is the uids agents run as, START:COUNT (agent id N
	// runs as START+N); "" when they run as the daemon's user.
	AgentUIDRange string `json:"agent_uid_range,omitempty"`
	Running       int    `json:"running"`
	// Reconciling is, after a restart, how many agents the store says run
	// whose processes the daemon has not yet checked (re-adopted or
	// recorded lost): it serves while it checks them in the background.
	Reconciling int `json:"reconciling,omitempty"`
}
