package governor

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

//go:embed profiles/*.json
var profileFS embed.FS

// MaxProfileSize bounds a profile file.
const MaxProfileSize = 1 << 20

// ShippedProfiles lists the names of the profiles built into kin.
func ShippedProfiles() []string {
	entries, _ := profileFS.ReadDir("profiles")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// Load returns the shipped profile called nameOrPath, or else the profile in
// the file at that path. Source is what was loaded, for display.
func Load(nameOrPath string) (p kin.Profile, source string, err error) {
	if nameOrPath == "" {
		nameOrPath = "default"
	}
	data, err := profileFS.ReadFile("profiles/" + nameOrPath + ".json")
	if err == nil && !strings.ContainsAny(nameOrPath, "/.") {
		p, err = Parse(data)
		return p, nameOrPath, err
	}
	if !strings.ContainsAny(nameOrPath, "/.") {
		return kin.Profile{}, "", fmt.Errorf("profile %q: no such shipped profile (shipped: %s) and not a file path", nameOrPath, strings.Join(ShippedProfiles(), ", "))
	}
	f, err := os.Open(nameOrPath)
	if err != nil {
		return kin.Profile{}, "", fmt.Errorf("profile: %w", err)
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, MaxProfileSize+1))
	if err != nil {
		return kin.Profile{}, "", fmt.Errorf("profile %s: %w", nameOrPath, err)
	}
	if len(data) > MaxProfileSize {
		return kin.Profile{}, "", fmt.Errorf("profile %s: larger than %d bytes", nameOrPath, MaxProfileSize)
	}
	p, err = Parse(data)
	if err != nil {
		return kin.Profile{}, "", fmt.Errorf("profile %s: %w", nameOrPath, err)
	}
	return p, nameOrPath, nil
}

// Parse decodes a profile strictly (unknown keys are errors) and validates it.
func Parse(data []byte) (kin.Profile, error) {
	var p kin.Profile
	// log_keep 0 (no rotated file) is a choice, so "absent" needs a mark
	// of its own (WithDefaults reads it).
	p.Quotas.LogKeep = absentLogKeep
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return kin.Profile{}, fmt.Errorf("invalid profile JSON: %w", err)
	}
	if dec.More() {
		return kin.Profile{}, fmt.Errorf("invalid profile JSON: more than one JSON value")
	}
	p = WithDefaults(p)
	if err := Validate(p); err != nil {
		return kin.Profile{}, err
	}
	return p, nil
}

// Defaults for what a profile leaves out (seed 002 §5: heartbeats every
// minute, offline after more than three missed; OTP-like restarts).
const (
	DefaultHeartbeatWindow = time.Minute
	DefaultOfflineAfter    = 3
	DefaultMaxRestarts     = 3
	DefaultRestartPeriod   = time.Minute
	// No agent can exhaust the host's pids (pid_max is 32,768 on many
	// hosts, 4,194,304 at most).
	DefaultPids = 4096
	// At most 16 MiB × 3 of one agent's output on disk.
	DefaultLogBytes = 16 << 20
	DefaultLogKeep  = 2
	// A message is a note between agents, not a file transfer (handoff
	// carries files): 16 KiB, 2 a second after a burst of 100 (a parent
	// addressing 100 children at once). Each accepted byte costs about 2
	// on disk (measured: 1.02 in kin.db once checkpointed, 1 in the
	// recipient's messages.jsonl), so one agent adds at most ~64 KB/s,
	// 235 MB an hour; 10 a second of 64 KiB (the first defaults) was
	// 1.3 MB/s, 4.7 GB an hour (docs/POLICY.md, "Quotas").
	DefaultMessageBytes = 16 << 10
	DefaultMessageRate  = 2
	DefaultMessageBurst = 100
	DefaultReportRate   = 20
	DefaultReportBurst  = 200
)

// absentLogKeep marks quotas.log_keep absent while a profile is parsed: no
// file says it (math.MinInt), and every negative value is refused.
const absentLogKeep = math.MinInt

// WithDefaults fills the fields a profile file may leave out.
func WithDefaults(p kin.Profile) kin.Profile {
	if p.Heartbeat.Window == 0 {
		p.Heartbeat.Window = kin.Duration(DefaultHeartbeatWindow)
	}
	if p.Heartbeat.OfflineAfter == 0 {
		p.Heartbeat.OfflineAfter = DefaultOfflineAfter
	}
	if p.Restart.Period == 0 {
		p.Restart.Period = kin.Duration(DefaultRestartPeriod)
	}
	if p.Restart.MaxRestarts == 0 {
		p.Restart.MaxRestarts = DefaultMaxRestarts
	}
	if p.Limits.Pids == 0 {
		p.Limits.Pids = DefaultPids
	}
	q := &p.Quotas
	if q.LogBytes == 0 {
		q.LogBytes = DefaultLogBytes
	}
	if q.LogKeep == absentLogKeep { // absent from the file (Parse); 0 keeps no rotated file
		q.LogKeep = DefaultLogKeep
	}
	if q.MessageBytes == 0 {
		q.MessageBytes = DefaultMessageBytes
	}
	if q.Messages == (kin.Rate{}) {
		q.Messages = kin.Rate{PerSecond: DefaultMessageRate, Burst: DefaultMessageBurst}
	}
	if q.Reports == (kin.Rate{}) {
		q.Reports = kin.Rate{PerSecond: DefaultReportRate, Burst: DefaultReportBurst}
	}
	return p
}

// Validate checks a profile's values and names the first bad field.
func Validate(p kin.Profile) error {
	if p.Name == "" {
		return fmt.Errorf("profile: name is required")
	}
	if p.MaxGenerationDepth < 0 {
		return fmt.Errorf("profile %s: max_generation_depth %d is negative", p.Name, p.MaxGenerationDepth)
	}
	if p.MaxChildren < 0 {
		return fmt.Errorf("profile %s: max_children %d is negative (0 means no limit)", p.Name, p.MaxChildren)
	}
	cb := p.CircuitBreaker
	if cb.MaxRejections < 0 {
		return fmt.Errorf("profile %s: circuit_breaker.max_rejections %d is negative (0 disables it)", p.Name, cb.MaxRejections)
	}
	if cb.MaxRejections > 0 && (cb.Window <= 0 || cb.Cooldown <= 0) {
		return fmt.Errorf("profile %s: circuit_breaker needs a positive window and cooldown when max_rejections is set", p.Name)
	}
	if p.Heartbeat.Window < kin.Duration(10*time.Millisecond) {
		return fmt.Errorf("profile %s: heartbeat.window %s is shorter than 10ms", p.Name, time.Duration(p.Heartbeat.Window))
	}
	if p.Heartbeat.OfflineAfter < 1 {
		return fmt.Errorf("profile %s: heartbeat.offline_after %d must be at least 1", p.Name, p.Heartbeat.OfflineAfter)
	}
	if p.Restart.MaxRestarts < 0 || p.Restart.Period <= 0 {
		return fmt.Errorf("profile %s: restart needs max_restarts >= 0 and a positive period", p.Name)
	}
	switch p.HostLoss {
	case "", kin.HostLossRun, kin.HostLossCancel:
	default:
		return fmt.Errorf("profile %s: host_loss %q is not %q (the default: owned children on other hosts run on) or %q (they are cancelled)", p.Name, p.HostLoss, kin.HostLossRun, kin.HostLossCancel)
	}
	if p.Limits.Pids < 1 {
		return fmt.Errorf("profile %s: limits.pids %d must be at least 1", p.Name, p.Limits.Pids)
	}
	q := p.Quotas
	if q.LogBytes < 4096 {
		return fmt.Errorf("profile %s: quotas.log_bytes %d is below 4096", p.Name, q.LogBytes)
	}
	if q.LogKeep < 0 || q.LogKeep > 100 {
		return fmt.Errorf("profile %s: quotas.log_keep %d is not between 0 and 100", p.Name, q.LogKeep)
	}
	if q.MessageBytes < 1 || q.MessageBytes > 16<<20 {
		return fmt.Errorf("profile %s: quotas.message_bytes %d is not between 1 and 16 MiB", p.Name, q.MessageBytes)
	}
	for key, r := range map[string]kin.Rate{"messages": q.Messages, "reports": q.Reports} {
		if !(r.PerSecond > 0) || r.PerSecond > 1e6 || r.Burst < 1 {
			return fmt.Errorf("profile %s: quotas.%s needs per_second above 0 (at most 1e6) and burst of at least 1, got %v and %d", p.Name, key, r.PerSecond, r.Burst)
		}
	}
	for _, key := range []string{"model_requests", "model_tokens"} {
		r := q.ModelRequests
		if key == "model_tokens" {
			r = q.ModelTokens
		}
		if r != (kin.Rate{}) && (!(r.PerSecond > 0) || r.PerSecond > 1e9 || r.Burst < 1) {
			return fmt.Errorf("profile %s: quotas.%s needs per_second above 0 (at most 1e9) and burst of at least 1 (or is left out: no limit), got %v and %d", p.Name, key, r.PerSecond, r.Burst)
		}
	}
	roots := 0
	for role, rule := range p.Roles {
		if err := checkRoleName(role); err != nil {
			return fmt.Errorf("profile %s: roles: %w", p.Name, err)
		}
		switch rule.Cardinality {
		case kin.CardinalityAny, kin.CardinalitySingleton, kin.CardinalityPerContext, kin.CardinalityPerHost:
		default:
			return fmt.Errorf("profile %s: roles.%s.cardinality %q is not one of \"\", \"singleton\", \"per_context\", \"per_host\"", p.Name, role, rule.Cardinality)
		}
		for _, child := range rule.Spawns {
			if _, ok := p.Roles[child]; !ok {
				return fmt.Errorf("profile %s: roles.%s.spawns names %q, which is not a role of the profile", p.Name, role, child)
			}
		}
		if err := checkEscalates(p, role, rule); err != nil {
			return err
		}
		if rule.Root {
			roots++
		}
	}
	if len(p.Roles) > 0 && roots == 0 {
		return fmt.Errorf("profile %s: no role has \"root\": true, so no agent could ever be registered", p.Name)
	}
	return nil
}

// checkEscalates checks a role's escalates list: known roles, none it also
// spawns, and for each one a role that can be an ancestor of role (through
// spawns) and spawns it, so that an escalation has somewhere to go.
func checkEscalates(p kin.Profile, role string, rule kin.RoleRule) error {
	if len(rule.Escalates) == 0 {
		return nil
	}
	ancestors := ancestorRoles(p, role)
	for _, child := range rule.Escalates {
		if _, ok := p.Roles[child]; !ok {
			return fmt.Errorf("profile %s: roles.%s.escalates names %q, which is not a role of the profile", p.Name, role, child)
		}
		if slices.Contains(rule.Spawns, child) {
			return fmt.Errorf("profile %s: roles.%s both spawns and escalates %q: a role either spawns a role itself or asks an ancestor to", p.Name, role, child)
		}
		target := false
		for _, a := range ancestors {
			if slices.Contains(p.Roles[a].Spawns, child) {
				target = true
				break
			}
		}
		if !target {
			return fmt.Errorf("profile %s: roles.%s.escalates names %q, but no role that can be an ancestor of %s spawns %q, so the escalation could never be placed", p.Name, role, child, role, child)
		}
	}
	return nil
}

// ancestorRoles lists the roles from which role can be reached through
// spawns: those an agent of role can have as an ancestor.
func ancestorRoles(p kin.Profile, role string) []string {
	seen := map[string]bool{}
	queue := []string{role}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		for name, rule := range p.Roles {
			if !seen[name] && slices.Contains(rule.Spawns, r) {
				seen[name] = true
				queue = append(queue, name)
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func checkRoleName(role string) error {
	r := kin.RegisterRequest{Name: "x", Responsible: "x", Role: role}
	if role == "" {
		return fmt.Errorf("a role name is empty")
	}
	return r.Validate()
}
