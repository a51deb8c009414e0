package kin

import "time"

// Policy is what an agent may do (seed 001, "Permission Attenuation"; seed
// 003's tool presets). It is given at spawn (kin spawn --policy FILE, JSON
// or YAML; unknown keys are an error) and only ever narrows down the tree:
// an agent's effective policy is the intersection of the global deny list,
// its stage's preset, its own policy and its parent's effective policy.
//
// Every field is optional. An absent field (nil) restricts nothing at this
// layer: the agent keeps what its parent has. A present field restricts:
// e.g. "mounts": {"/work": "ro"} hides every path but /work. An empty list
// or map is present, and restricts to nothing ("mounts": {} hides every
// path, "groups": [] drops every group): that is why the lists and maps
// below are omitzero, not omitempty, which would turn them into nil (no
// restriction) when the policy is stored as JSON and read back.
type Policy struct {
	// Tools are glob patterns over tool names ("read", "exec", "web_*").
	Tools *ToolRules `json:"tools,omitempty"`
	// Models are glob patterns over model names ("gpt-4o*",
	// "claude-*") the agent may call through kin's model gateway, allowed
	// and denied as tools are, and attenuated down the tree the same way.
	Models *ToolRules `json:"models,omitempty"`
	// Mounts maps absolute paths to a mode; a path not listed (and not
	// under a listed one) is hidden. The mode of a path is that of its
	// longest listed prefix.
	Mounts map[string]Mode `json:"mounts,omitzero"`
	// Groups are the supplementary group ids the agent's processes hold.
	Groups []uint32 `json:"groups,omitzero"`
	// Env are glob patterns over the names of environment variables a
	// spawner may pass down to the agent.
	Env []string `json:"env,omitzero"`
	// UID and GID run the agent's processes as that user and group
	// instead of kin's own per-agent ids (a root daemon only).
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// Detach lets the agent spawn detached children (the profile must
	// allow detached children too).
	Detach *bool `json:"detach,omitempty"`
	// Spawn says whether the agent may spawn, and which roles.
	Spawn *SpawnRules `json:"spawn,omitempty"`
	// Budget caps what the agent's subtree may spend.
	Budget *Budget `json:"budget,omitempty"`
	// Visibility is seed 003's consented cross-workspace reading.
	Visibility *Visibility `json:"visibility,omitempty"`
}

// ToolRules allow and deny tools by glob pattern ('*' any run of bytes,
// '?' one byte; nothing else is special). A tool is
// allowed when it matches an Allow pattern (a nil Allow allows every
// tool, an empty one none) and no Deny pattern.
type ToolRules struct {
	Allow []string `json:"allow,omitzero"`
	Deny  []string `json:"deny,omitempty"`
}

// Mode is how a mounted path is visible: rw > ro > hidden.
type Mode string

const (
	ModeRW     Mode = "rw"
	ModeRO     Mode = "ro"
	ModeHidden Mode = "hidden"
)

// Rank orders modes: hidden 0, ro 1, rw 2, anything else -1.
func (m Mode) Rank() int {
	switch m {
	case ModeHidden:
		return 0
	case ModeRO:
		return 1
	case ModeRW:
		return 2
	}
	return -1
}

// SpawnRules say whether an agent may spawn children. A nil Allow keeps
// the parent's answer; a nil Roles allows every role (the governor's role
// graph still applies).
type SpawnRules struct {
	Allow *bool    `json:"allow,omitempty"`
	Roles []string `json:"roles,omitzero"`
}

// Budget caps a subtree: what the agent and all its descendants spend
// counts against it, and against every ancestor's budget.
type Budget struct {
	// Deadline is wall-clock time from the spawn; the subtree is stopped
	// when it runs out.
	Deadline *Duration `json:"deadline,omitempty"`
	// MaxDescendants is the number of spawns over the subtree's life.
	MaxDescendants *int64 `json:"max_descendants,omitempty"`
	// MaxTokens and MaxCost cap usage: what agents report (kin usage) and
	// what kin's model gateway metered from the upstream's answers.
	MaxTokens *int64   `json:"max_tokens,omitempty"`
	MaxCost   *float64 `json:"max_cost,omitempty"`
	// Process limits of each of the agent's processes: CPU seconds,
	// memory in bytes, open files.
	CPUSeconds  *int64 `json:"cpu_seconds,omitempty"`
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	OpenFiles   *int64 `json:"open_files,omitempty"`
	// Kernel limits of the agent's whole subtree (its processes and its
	// owned descendants'), from the cgroup controllers where the host's
	// cgroup v2 hierarchy has them: Pids tasks (pids.max), Memory bytes
	// (memory.max, with no swap beyond it), CPU cores (cpu.max, 0.5 is
	// half a core). Where a controller is missing kin falls back to what
	// the kernel offers and says so (docs/POLICY.md, "Limits").
	Pids   *int64   `json:"pids,omitempty"`
	Memory *int64   `json:"memory,omitempty"`
	CPU    *float64 `json:"cpu,omitempty"`
}

// Visibility is one side of seed 003's mutual consent: ReadFrom names the
// agents this one wants to read, ReadableTo the agents that may read this
// one; Scope are glob patterns over paths relative to the workspace that
// this side consents to ("memory/**", "SOUL.md"). A read happens only where
// both sides' scopes match.
type Visibility struct {
	ReadFrom   []string `json:"read_from,omitempty"`
	ReadableTo []string `json:"readable_to,omitempty"`
	Scope      []string `json:"scope,omitempty"`
}

// PolicyLayer is one term of an effective policy's intersection, with
// where it comes from, so that every decision can name its rule.
type PolicyLayer struct {
	// Source is "global", "preset" or "policy" (see the PolicySource
	// constants).
	Source PolicySource `json:"source"`
	// Agent is the agent whose policy or stage this layer is (0 for the
	// global deny list).
	Agent AgentID `json:"agent,omitempty"`
	// Name names the preset for a preset layer.
	Name   string `json:"name,omitempty"`
	Policy Policy `json:"policy"`
}

// PolicySource says where a layer comes from.
type PolicySource string

const (
	SourceGlobal PolicySource = "global" // the operator's global deny list
	SourcePreset PolicySource = "preset" // an agent's stage preset
	SourcePolicy PolicySource = "policy" // an agent's own policy
)

// EffectivePolicy is what an agent holds: the layers of its own and every
// ancestor's policy and stage, in order from the global list down to the
// agent itself, plus the budget's absolute deadline.
type EffectivePolicy struct {
	Layers []PolicyLayer `json:"layers"`
	// DeadlineAt is the earliest deadline of the layers (zero: none).
	DeadlineAt time.Time `json:"deadline_at,omitzero"`
	// Flat is the layers resolved into one policy: the mounts Landlock
	// enforces, the groups, the limits. Tools stay in the layers (glob
	// intersections are not one list).
	Flat Policy `json:"flat"`
	// Limits are the kernel limits that bind the agent on this host, the
	// profile's default pids limit included, each with how it is
	// enforced here.
	Limits []ResourceLimit `json:"limits,omitempty"`
}

// ResourceLimit is one kernel limit and how this host enforces it: the
// same policy field binds a whole subtree on one host and one process on
// another, and kin says which.
type ResourceLimit struct {
	// Name is the budget field: "pids", "memory", "cpu", "cpu_seconds",
	// "memory_bytes", "open_files".
	Name string `json:"name"`
	// Value is in tasks, bytes, cores, seconds or files; absent in a
	// daemon's status, which describes the host, not an agent.
	Value float64 `json:"value,omitempty"`
	// Scope is what the value bounds: "subtree" (the agent and its owned
	// descendants together), "agent" (the agent's own processes, not its
	// children's: each has its own), "process" (each process alone), or
	// "none" where it is not enforced.
	Scope string `json:"scope"`
	// By is the kernel's mechanism ("pids.max", "RLIMIT_NPROC", ...); ""
	// where it is not enforced.
	By string `json:"by,omitempty"`
	// Note says why, where the scope is not "subtree" or "process".
	Note string `json:"note,omitempty"`
}

// The scopes of a ResourceLimit.
const (
	LimitSubtree = "subtree"
	LimitAgent   = "agent"
	LimitProcess = "process"
	LimitNone    = "none"
)

// Excess is one item of a child's request that its parent lacks.
type Excess struct {
	Field  string `json:"field"`  // "tools", "mounts", "groups", "env", "budget.max_tokens", ...
	Asked  string `json:"asked"`  // what the child asked for
	Parent string `json:"parent"` // what the parent has
}

// Decision is kin's answer to "may this agent do that", with the rule.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	// Rule is the pattern or mount that decided ("deny exec", "/work ro").
	Rule string `json:"rule,omitempty"`
	// Source and Agent say which layer the rule comes from.
	Source PolicySource `json:"source,omitempty"`
	Agent  AgentID      `json:"agent,omitempty"`
	Preset string       `json:"preset,omitempty"`
}
