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
