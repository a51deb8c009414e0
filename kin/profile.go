package kin

import (
	"encoding/json"
	"fmt"
	"time"
)

// Profile is the governor's rule set: data, not code (seed 000's registry
// defaults, seed 002's hierarchy, seed 004's single-level depth). Profiles are
// JSON files; the shipped ones live in internal/governor/profiles.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// MaxGenerationDepth is the deepest generation an agent may have: a
	// root is generation 0, so 0 allows roots only (seed 000's
	// maxGenerationDepth, default 10).
	MaxGenerationDepth int `json:"max_generation_depth"`
	// MaxChildren limits the live children of one parent; 0 is no limit.
	MaxChildren int `json:"max_children"`
	// Roles, when not empty, is the closed set of roles and who may spawn
	// whom. When empty, any role may spawn any role.
	Roles map[string]RoleRule `json:"roles,omitempty"`
	// CircuitBreaker refuses a parent's spawns for a cool-down once too
	// many of them were rejected within a window (seed 002 §4.2).
	CircuitBreaker CircuitBreaker `json:"circuit_breaker"`
	// AllowDetach lets agents have detached children, which outlive them.
	// Seed 001: detached requires an explicit grant; denied by default.
	AllowDetach bool `json:"allow_detach,omitempty"`
	// Heartbeat is the liveness window (seed 002 §5).
	Heartbeat Heartbeat `json:"heartbeat"`
	// Restart limits crash replacements: at most MaxRestarts in Period
	// for one agent and its replacements, like an OTP supervisor.
	Restart RestartIntensity `json:"restart"`
	// Limits are the kernel limits every agent gets when its policy says
	// nothing smaller (docs/POLICY.md, "Limits").
	Limits AgentLimits `json:"limits"`
	// Quotas bound what one agent makes kin write: its log, its messages,
	// its reports (docs/POLICY.md, "Quotas").
	Quotas Quotas `json:"quotas"`
	// HostLoss is what a fleet does to the owned children, on other
	// hosts, of the agents of a host whose lease expired (its daemon died,
	// or it lost the store): HostLossRun (the default, "" too) leaves them
	// to their parent, which may come back (seed 002 §5.2); HostLossCancel
	// cancels them (seed 001's sequence, end reason parent_offline), so that
	// no owned subtree runs on without a supervised parent.
	HostLoss string `json:"host_loss,omitempty"`
}

// The values of Profile.HostLoss.
const (
	HostLossRun    = "run"
	HostLossCancel = "cancel"
)

// AgentLimits are the limits every agent gets by default.
type AgentLimits struct {
	// Pids bounds the processes of one agent: of its whole subtree where
	// the cgroup pids controller is on (pids.max on its group), of its own
	// uid otherwise (RLIMIT_NPROC). A policy's budget.pids may only lower
	// it. Default 4096, so that no agent can exhaust the host's pids.
	Pids int `json:"pids"`
}

// Quotas bound what one agent makes kin write on its behalf.
type Quotas struct {
	// LogBytes is the size at which logs/<id>.log is rotated to .1 (the
	// older ones to .2 ...); LogKeep is how many rotated files are kept
	// (0: none; left out of a profile file: 2). At most
	// LogBytes × (1 + LogKeep) of one agent's output is on disk.
	LogBytes int64 `json:"log_bytes"`
	LogKeep  int   `json:"log_keep"`
	// MessageBytes is the largest message body one agent may send.
	MessageBytes int `json:"message_bytes"`
	// Messages is the rate of messages one agent may send.
	Messages Rate `json:"messages"`
	// Reports is the rate of everything else an agent makes kin record
	// (usage reports, heartbeats, status and progress changes, events).
	Reports Rate `json:"reports"`
	// ModelRequests and ModelTokens bound calls through kin's model
	// gateway: requests, and the tokens the upstreams' answers reported
	// (charged after each call, so a bucket in debt refuses the next
	// call until it refills). Absent (zero): no limit.
	ModelRequests Rate `json:"model_requests,omitzero"`
	ModelTokens   Rate `json:"model_tokens,omitzero"`
}

// Rate is a token bucket: Burst requests at once, then PerSecond.
type Rate struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// Heartbeat configures liveness: an agent that has heartbeated is stale
// after one missed Window and offline after OfflineAfter missed windows.
type Heartbeat struct {
	Window       Duration `json:"window"`
	OfflineAfter int      `json:"offline_after"`
}

// RestartIntensity is the restart limit.
type RestartIntensity struct {
	MaxRestarts int      `json:"max_restarts"`
	Period      Duration `json:"period"`
}

// RoleRule is what a role may do under a profile.
type RoleRule struct {
	// Spawns lists the roles an agent of this role may spawn.
	Spawns []string `json:"spawns"`
	// Escalates lists the roles an agent of this role may ask for but not
	// spawn itself (seed 002 §4.1: a Specialist escalates a Worker's spawn
	// to its PO): the new agent is placed under the nearest ancestor whose
	// rule spawns that role, recorded as requested by the asker, and gets
	// no more than the asker has.
	Escalates []string `json:"escalates,omitempty"`
	// Root allows agents of this role to be registered without a parent.
	Root bool `json:"root,omitempty"`
	// Cardinality limits how many live agents of this role exist.
	Cardinality Cardinality `json:"cardinality,omitempty"`
}

// Cardinality limits the live agents of one role.
type Cardinality string

const (
	CardinalityAny        Cardinality = ""            // no limit
	CardinalitySingleton  Cardinality = "singleton"   // one in the whole registry (seed 002's GO)
	CardinalityPerContext Cardinality = "per_context" // one per name context: HO@<host>, PO-<project>, IO@<human>
	// CardinalityPerHost is one live agent of the role on each host of the
	// fleet, counted on the host the agent is placed on (seed 002's one HO
	// per physical host).
	CardinalityPerHost Cardinality = "per_host"
)

// CircuitBreaker is seed 002's "violation triggers a circuit breaker alert":
// more than MaxRejections rejected spawns by one parent within Window
// refuse that parent's spawns for Cooldown. MaxRejections 0 disables it.
type CircuitBreaker struct {
	MaxRejections int      `json:"max_rejections"`
	Window        Duration `json:"window"`
	Cooldown      Duration `json:"cooldown"`
}

// Duration is a time.Duration written as a Go duration string ("90s") in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string like \"90s\" or \"5m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// GovernorInfo is the governor's configuration in force: the profile and
// the operator's runtime overrides (already applied to Profile).
type GovernorInfo struct {
	Profile   Profile           `json:"profile"`
	Source    string            `json:"source"`              // the profile's name or file path
	Overrides map[string]string `json:"overrides,omitempty"` // settings changed at runtime
}

// GovernorReset, as a SetGovernor value, puts a setting back to the
// profile's own value (`kin governor reset KEY`).
const GovernorReset = "profile"

// GovernorSettings are the keys `kin governor set` accepts.
var GovernorSettings = []string{"max_generation_depth", "max_children"}
