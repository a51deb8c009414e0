package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
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
	// Prices are what model calls through kin's model gateway cost, by
	// model name or glob pattern ("gpt-4o*"): the exact name first, else
	// the longest pattern that matches.
	Prices map[string]ModelPrice `json:"prices,omitempty"`
}

// ModelPrice is a model's price per million tokens, in the operator's
// currency (the unit of budget.max_cost).
type ModelPrice struct {
	// Input is the price of prompt tokens not read from the cache.
	Input float64 `json:"input"`
	// Output is the price of completion tokens (reasoning included).
	Output float64 `json:"output"`
	// CachedInput is the price of prompt tokens read from the provider's
	// cache; absent, they cost Input.
	CachedInput *float64 `json:"cached_input,omitempty"`
}

// Cost is what a call of input prompt tokens (cached of them read from
// the cache) and output completion tokens costs at p.
func (p ModelPrice) Cost(input, cached, output int64) float64 {
	cachedPrice := p.Input
	if p.CachedInput != nil {
		cachedPrice = *p.CachedInput
	}
	cached = min(max(cached, 0), max(input, 0))
	return (float64(input-cached)*p.Input + float64(cached)*cachedPrice + float64(output)*p.Output) / 1e6
}

// Price is model's price: its exact entry, else that of the longest
// pattern matching it; false when none does.
func (c Config) Price(model string) (ModelPrice, bool) {
	if p, ok := c.Prices[model]; ok {
		return p, true
	}
	best, found := "", false
	for pat := range c.Prices {
		if MatchTool(pat, model) && (!found || len(pat) > len(best) || len(pat) == len(best) && pat < best) {
			best, found = pat, true
		}
	}
	return c.Prices[best], found
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
// "global_deny", "presets" and "prices"). Its presets are added to the shipped ones,
// replacing a shipped one of the same name.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := decodeStrict("config", data, &c); err != nil {
		return Config{}, err
	}
	out := DefaultConfig()
	out.GlobalDeny = c.GlobalDeny
	maps.Copy(out.Presets, c.Presets)
	out.Prices = c.Prices
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
	for _, name := range slices.Sorted(maps.Keys(c.Prices)) {
		errs = append(errs, validatePatterns("prices", []string{name}))
		p := c.Prices[name]
		for i, v := range []*float64{&p.Input, &p.Output, p.CachedInput} {
			field := [...]string{"input", "output", "cached_input"}[i]
			if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) || *v > 1e6) {
				errs = append(errs, fmt.Errorf("prices.%s.%s: %v is not a price per million tokens from 0 to 1000000", name, field, *v))
			}
		}
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
