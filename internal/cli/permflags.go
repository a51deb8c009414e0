package cli

import (
	"regexp"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kin-agents/kin/internal/agentreq"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/kin"
)

// permFlags give a new agent its policy, its stage and, for kin spawn and
// kin create, its workspace template. Every file is read and checked here,
// with the caller's own rights, so that a bad one is named before anything
// is sent.
type permFlags struct {
	flags        *pflag.FlagSet
	policy       string   // --policy FILE
	stage        string   // --stage S
	template     string   // the template DIR
	templateFlag string   // its flag's name ("" without templates)
	sets         []string // --set K=V
}

// add adds --policy and --stage, and with templateFlag the template's flag
// under that name, and --set.
func (p *permFlags) add(f *pflag.FlagSet, templateFlag string) {
	p.flags = f
	f.StringVar(&p.policy, "policy", "", "the agent's policy, JSON or YAML, from `FILE`: what it may use, see and spend; at most what its parent has")
	f.StringVar(&p.stage, "stage", "", "the agent's `stage`: the preset its tools follow (default: its parent's)")
	if templateFlag == "" {
		return
	}
	p.templateFlag = templateFlag
	f.StringVar(&p.template, templateFlag, "", "provision the agent's workspace from the template `DIR`; its config fragment (.kin.json or .kin.yaml) may give a role, a stage and a policy")
	f.StringArrayVar(&p.sets, "set", nil, "with --"+templateFlag+": the value of the template's placeholder {K}, as `K=V` (repeatable; K is [A-Z][A-Z0-9_]*)")
}

// placeholderName is the grammar of a template placeholder's name.
var placeholderName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// apply reads the files the flags name into req. A template's role and
// stage fill --role and --stage where those were not given; its policy is
// merged with --policy's, --policy winning field by field.
func (p *permFlags) apply(req *kin.RegisterRequest) error {
	var own *kin.Policy
	if p.flags.Changed("policy") {
		data, err := readFlagFile("--policy", p.policy, policy.MaxPolicyBytes, nil)
		if err != nil {
			return err
		}
		pol, err := policy.Parse(data)
		if err != nil {
			return kin.Errorf(kin.ECodeInvalid, "--policy %s: %v", p.policy, err)
		}
		own = &pol
	}
	if p.flags.Changed("stage") {
		if p.stage == "" {
			return usageErrorf("--stage needs a stage name (leave it out to follow the parent's)")
		}
		req.Stage = p.stage
	}
	if p.templateFlag == "" || !p.flags.Changed(p.templateFlag) {
		if len(p.sets) > 0 {
			return usageErrorf("--set fills a template's placeholders: it needs --%s DIR", p.templateFlag)
		}
		req.Policy = own
		return nil
	}
	vars, err := parseSets(p.sets)
	if err != nil {
		return err
	}
	if p.template == "" {
		return kin.Errorf(kin.ECodeInvalid, "--%s needs a directory", p.templateFlag)
	}
	tpl := agentreq.Template{Dir: p.template, Vars: vars, Label: "--" + p.templateFlag,
		PolicyLabel: "--policy " + p.policy, KeepRole: p.flags.Changed("role")}
	return tpl.Apply(req, own)
}

// parseSets reads --set K=V values; nil without any.
func parseSets(sets []string) (map[string]string, error) {
	if len(sets) == 0 {
		return nil, nil
	}
	vars := make(map[string]string, len(sets))
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageErrorf("--set %q is not K=V", kv)
		}
		if !placeholderName.MatchString(k) {
			return nil, usageErrorf("--set %q: the name %q must be an upper-case letter, then upper-case letters, digits and _ (like {AGENT_NAME})", kv, k)
		}
		if _, dup := vars[k]; dup {
			return nil, usageErrorf("--set %s is given twice", k)
		}
		vars[k] = v
	}
	return vars, nil
}
