package governor

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

// Seed 000's messages for its four rules, verbatim.
const (
	MsgParentNotFound = "Parent agent not found"
	MsgParentInactive = "Parent agent not active"
	MsgDepthExceeded  = "Max generation depth exceeded"
	MsgWalletTaken    = "Wallet already registered to another agent"
)

// Role returns the role a new agent gets under p: the requested one, or,
// when none was asked for and the profile has closed roles, the role part of
// its name if that is one of them (so `--name HO@Server1` is an HO).
func Role(p kin.Profile, requested string, name kin.Name) string {
	if requested != "" || len(p.Roles) == 0 {
		return requested
	}
	if _, ok := p.Roles[name.Role]; ok {
		return name.Role
	}
	return ""
}

// Needs says which counts CheckSpawn needs for a child of role under p, so
// the daemon runs only the queries that matter.
type Needs struct {
	LiveChildren bool
	Cardinality  kin.Cardinality
}

// NeedsFor returns the counts to gather for a spawn of role.
func NeedsFor(p kin.Profile, role string, hasParent bool) Needs {
	return Needs{LiveChildren: hasParent && p.MaxChildren > 0, Cardinality: p.Roles[role].Cardinality}
}

// Escalates reports whether an agent of role asker asks an ancestor to
// spawn a child of role rather than spawning it itself (RoleRule.Escalates).
func Escalates(p kin.Profile, asker, role string) bool {
	return slices.Contains(p.Roles[asker].Escalates, role)
}

// EscalationTarget is the index in chainRoles (the roles of the asker's
// ancestors, nearest first) of the ancestor a child of role is placed
// under when its spawn is escalated: the nearest whose rule spawns role;
// -1 and a refusal when none does.
func EscalationTarget(p kin.Profile, asker, role string, chainRoles []string) (int, *kin.Error) {
	for i, r := range chainRoles {
		if slices.Contains(p.Roles[r].Spawns, role) {
			return i, nil
		}
	}
	return -1, kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q escalates the spawn of role %s under profile %s, but none of its ancestors may spawn %s (spawned by %s)", asker, role, p.Name, role, spawnersOf(p, role))
}

// SpawnFacts is what the daemon read, inside the write transaction, about a
// registration request.
type SpawnFacts struct {
	ParentID     kin.AgentID // as requested; 0 for a root
	Parent       *kin.Agent  // nil if ParentID is 0 or the parent does not exist
	Role         string      // the child's role, after Role()
	Name         kin.Name
	LiveChildren int // the parent's live children (if Needs.LiveChildren)
	LiveSameRole int // live agents of Role (and of Name.Context when per_context, on Host when per_host)
	// Host is the host of the fleet the agent is placed on (per_host
	// counts there).
	Host        string
	WalletTaken bool // the requested wallet is already registered
	Life        kin.Life
	Now         time.Time
}

// Generation is the generation a child of facts.Parent gets.
func (f SpawnFacts) Generation() int {
	if f.Parent == nil {
		return 0
	}
	return f.Parent.Generation + 1
}

// CheckSpawn applies p's rules to a registration and returns the first rule
// it breaks, or nil. The order is fixed so that a rule's error is
// predictable: existence and status of the parent, the circuit breaker,
// depth (so a Worker's spawn reports spawn_depth_exceeded, as seed 002
// says), who-spawns-whom, cardinality, the children limit, the wallet.
func CheckSpawn(p kin.Profile, f SpawnFacts) *kin.Error {
	if f.ParentID != 0 {
		if f.Parent == nil {
			return &kin.Error{Code: kin.ECodeParentNotFound, Message: MsgParentNotFound}
		}
		if err := CheckAsker(p, f.Parent, f.Now); err != nil {
			return err
		}
	}
	if f.Generation() > p.MaxGenerationDepth {
		return &kin.Error{Code: kin.ECodeSpawnDepth, Message: MsgDepthExceeded}
	}
	if err := checkRoles(p, f); err != nil {
		return err
	}
	if f.Life == kin.LifeDetached && f.Parent != nil && !p.AllowDetach {
		return kin.Errorf(kin.ECodeSpawnNotAllowed, "profile %s does not grant detach: detached children, which outlive their parent, need an explicit grant (seed 001)", p.Name)
	}
	if err := checkCardinality(p, f); err != nil {
		return err
	}
	if f.Parent != nil && p.MaxChildren > 0 && f.LiveChildren >= p.MaxChildren {
		return kin.Errorf(kin.ECodeMaxChildren, "agent %d already has %d live children; profile %s allows at most %d", f.Parent.ID, f.LiveChildren, p.Name, p.MaxChildren)
	}
	if f.WalletTaken {
		return &kin.Error{Code: kin.ECodeWalletTaken, Message: MsgWalletTaken}
	}
	return nil
}

// CheckAsker refuses a spawn asked by an agent that may not spawn now: one
// not active, or whose circuit breaker is open. CheckSpawn applies it to
// the parent; an escalated spawn (Escalates) to the asker as well.
func CheckAsker(p kin.Profile, a *kin.Agent, now time.Time) *kin.Error {
	if a.Status != kin.StatusActive || a.State.Terminal() || a.State == kin.StateStopping {
		return &kin.Error{Code: kin.ECodeParentNotActive, Message: MsgParentInactive}
	}
	if now.Before(a.SpawnBlockedUntil) {
		return kin.Errorf(kin.ECodeCircuitOpen, "spawns by agent %d are refused until %s: more than %d of its spawns were rejected within %s",
			a.ID, a.SpawnBlockedUntil.Format(time.RFC3339), p.CircuitBreaker.MaxRejections, time.Duration(p.CircuitBreaker.Window))
	}
	return nil
}

func checkRoles(p kin.Profile, f SpawnFacts) *kin.Error {
	if len(p.Roles) == 0 {
		return nil
	}
	rule, ok := p.Roles[f.Role]
	if !ok {
		if f.Role == "" {
			return kin.Errorf(kin.ECodeSpawnNotAllowed, "profile %s needs a role (one of %s): give --role or a name that starts with one", p.Name, roleList(p))
		}
		return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q is not a role of profile %s (roles: %s)", f.Role, p.Name, roleList(p))
	}
	if f.Parent == nil {
		if !rule.Root {
			return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %s cannot be a root under profile %s: it is spawned by %s", f.Role, p.Name, spawnersOf(p, f.Role))
		}
		return nil
	}
	parentRule := p.Roles[f.Parent.Role]
	for _, r := range parentRule.Spawns {
		if r == f.Role {
			return nil
		}
	}
	if len(parentRule.Escalates) > 0 {
		escalates := fmt.Sprintf("it asks its nearest ancestor that may to spawn %s", strings.Join(parentRule.Escalates, ", "))
		if len(parentRule.Spawns) == 0 {
			return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q may not spawn role %s under profile %s (it spawns nothing itself; %s)", f.Parent.Role, f.Role, p.Name, escalates)
		}
		return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q may not spawn role %s under profile %s (it may spawn: %s; %s)", f.Parent.Role, f.Role, p.Name, strings.Join(parentRule.Spawns, ", "), escalates)
	}
	if len(parentRule.Spawns) == 0 {
		return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q may not spawn agents under profile %s", f.Parent.Role, p.Name)
	}
	return kin.Errorf(kin.ECodeSpawnNotAllowed, "role %q may not spawn role %s under profile %s (it may spawn: %s)", f.Parent.Role, f.Role, p.Name, strings.Join(parentRule.Spawns, ", "))
}

func checkCardinality(p kin.Profile, f SpawnFacts) *kin.Error {
	switch p.Roles[f.Role].Cardinality {
	case kin.CardinalitySingleton:
		if f.LiveSameRole > 0 {
			return kin.Errorf(kin.ECodeCardinality, "role %s is a singleton under profile %s and one is already live", f.Role, p.Name)
		}
	case kin.CardinalityPerContext:
		if f.Name.Context == "" {
			return kin.Errorf(kin.ECodeInvalid, "role %s is one per context under profile %s: name it %s@<host or human> or %s-<project>", f.Role, p.Name, f.Role, f.Role)
		}
		if f.LiveSameRole > 0 {
			return kin.Errorf(kin.ECodeCardinality, "role %s allows one live agent per context under profile %s, and %q already has one", f.Role, p.Name, f.Name.Context)
		}
	case kin.CardinalityPerHost:
		if f.LiveSameRole > 0 {
			return kin.Errorf(kin.ECodeCardinality, "role %s allows one live agent per host under profile %s, and host %q already runs one", f.Role, p.Name, f.Host)
		}
	}
	return nil
}

func roleList(p kin.Profile) string {
	roles := make([]string, 0, len(p.Roles))
	for r := range p.Roles {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return strings.Join(roles, ", ")
}

func spawnersOf(p kin.Profile, role string) string {
	var by []string
	for r, rule := range p.Roles {
		for _, c := range rule.Spawns {
			if c == role {
				by = append(by, r)
			}
		}
	}
	if len(by) == 0 {
		return "no role"
	}
	sort.Strings(by)
	return strings.Join(by, ", ")
}

// CountsForBreaker reports whether a rejection with code counts towards the
// circuit breaker: every rule rejection except the breaker's own refusals,
// which would otherwise keep it open for ever.
func CountsForBreaker(code kin.ErrorCode) bool { return code != kin.ECodeCircuitOpen }

// Trip reports whether the breaker opens after a parent's counted rejections
// within the window reached recent, and until when.
func Trip(p kin.Profile, recent int, now time.Time) (until time.Time, trip bool) {
	cb := p.CircuitBreaker
	if cb.MaxRejections <= 0 || recent <= cb.MaxRejections {
		return time.Time{}, false
	}
	return now.Add(time.Duration(cb.Cooldown)), true
}

// IsRuleCode reports whether code is one of the governor's spawn rules (and
// so a rejection that is recorded as a spawn.rejected event).
func IsRuleCode(code kin.ErrorCode) bool {
	switch code {
	case kin.ECodeParentNotFound, kin.ECodeParentNotActive, kin.ECodeSpawnDepth, kin.ECodeWalletTaken,
		kin.ECodeMaxChildren, kin.ECodeSpawnNotAllowed, kin.ECodeCardinality, kin.ECodeCircuitOpen:
		return true
	}
	return false
}

// SetSetting applies `kin governor set key=value` to p.
func SetSetting(p *kin.Profile, key string, value int) error {
	if value < 0 {
		return fmt.Errorf("%s must not be negative", key)
	}
	switch key {
	case "max_generation_depth":
		p.MaxGenerationDepth = value
	case "max_children":
		p.MaxChildren = value
	default:
		return fmt.Errorf("unknown governor setting %q (settable: %s)", key, strings.Join(kin.GovernorSettings, ", "))
	}
	return nil
}
