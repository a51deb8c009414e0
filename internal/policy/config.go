package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// Config is the operator's permission configuration: tools nobody may use,
// and the tool presets of the stages (seed 003).
type Config struct {
	// GlobalDeny are tool patterns denied to every agent, whatever its
	// stage or policy.
	GlobalDeny []string `json:"global_deny,omitempty"`
	// Presets are the tool rules of each stage, by stage name.
	Presets map[string]kin.ToolRules `json:"presets,omitempty"`
}

// DefaultConfig is seed 003's three stages and no global deny list.
func DefaultConfig() Config {
	return Config{Presets: map[string]kin.ToolRules{
		"restricted": {
			Allow: []string{"read", "memory_search", "memory_get"},
			Deny:  []string{"exec", "write", "edit", "browser", "nodes", "gateway", "cron"},
		},
		"supervised": {
			Allow: []string{"read", "write", "edit", "memory_search", "memory_get", "web_search", "web_fetch", "exec"},
			Deny:  []string{"gateway", "cron", "nodes"},
		},
		"full": {},
	}}
}

// ParseConfig reads an operator's config, JSON or YAML, strictly (keys
// "global_deny" and "presets"). Its presets are added to the shipped ones,
// replacing a shipped one of the same name.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := decodeStrict("config", data, &c); err != nil {
		return Config{}, err
	}
	out := DefaultConfig()
	out.GlobalDeny = c.GlobalDeny
	maps.Copy(out.Presets, c.Presets)
	if err := out.Validate(); err != nil {
		return Config{}, err
	}
	return out, nil
}

// Validate checks the global deny list, the stage names and the presets'
// patterns.
func (c Config) Validate() error {
	errs := []error{validatePatterns("global_deny", c.GlobalDeny)}
	for _, name := range slices.Sorted(maps.Keys(c.Presets)) {
		if err := validRole(name); err != nil {
			errs = append(errs, fmt.Errorf("presets: the stage name %q %v", name, err))
			continue
		}
		p := c.Presets[name]
		errs = append(errs, validatePatterns("presets."+name+".allow", p.Allow))
		errs = append(errs, validatePatterns("presets."+name+".deny", p.Deny))
	}
	return errors.Join(errs...)
}

// Preset returns the tool rules of a stage.
func (c Config) Preset(stage string) (kin.ToolRules, error) {
	known := strings.Join(slices.Sorted(maps.Keys(c.Presets)), ", ")
	p, ok := c.Presets[stage]
	if !ok {
		return kin.ToolRules{}, fmt.Errorf("stage %q has no preset; the stages are: %s", stage, known)
	}
	return kin.ToolRules{Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}, nil
}

// Link is one agent on the path from the root down to the agent whose
// layers are built: its stage's preset and its own policy, either absent.
type Link struct {
	Agent  kin.AgentID
	Stage  string
	Preset *kin.ToolRules
	Policy *kin.Policy
}

// Layers builds an effective policy's layers: the global deny list first,
// then for each agent from the root down its preset and its policy. The
// layers are ANDed, so a preset can only restrict: it never grants what
// the global deny list blocks, and an agent never escapes an ancestor.
func Layers(global []string, chain []Link) []kin.PolicyLayer {
	var out []kin.PolicyLayer
	if len(global) > 0 {
		out = append(out, kin.PolicyLayer{Source: kin.SourceGlobal,
			Policy: kin.Policy{Tools: &kin.ToolRules{Deny: slices.Clone(global)}}})
	}
	for _, l := range chain {
		if l.Preset != nil {
			out = append(out, kin.PolicyLayer{Source: kin.SourcePreset, Agent: l.Agent, Name: l.Stage,
				Policy: kin.Policy{Tools: &kin.ToolRules{Allow: slices.Clone(l.Preset.Allow), Deny: slices.Clone(l.Preset.Deny)}}})
		}
		if l.Policy != nil {
			out = append(out, kin.PolicyLayer{Source: kin.SourcePolicy, Agent: l.Agent, Policy: clonePolicy(*l.Policy)})
		}
	}
	return out
}
