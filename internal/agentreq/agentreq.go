// Package agentreq fills a new agent's request from what its caller names
// (a command, a handoff's files, a policy, a template), reading and checking
// everything with the caller's own rights so that a bad input is named
// before anything is sent. "kin spawn" and "kin create" use it with flags,
// "kin mcp" with a tool's input; the labels they pass name the inputs in
// errors their own way ("--ref", "refs").
package agentreq

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

// ResolveCommand makes a program name without a slash absolute, looked up
// with lookPath (nil: exec.LookPath, the caller's own PATH): the caller
// means what its shell would run, and the daemon's PATH may differ. A name
// not found is left for the daemon.
func ResolveCommand(name string, lookPath func(string) (string, error)) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	p, err := lookPath(name)
	if err != nil || !filepath.IsAbs(p) {
		return name
	}
	return p
}

// Handoff is seed 001's handoff as a caller names it.
type Handoff struct {
	Task     string   // handoff.md
	Refs     []string // the input refs' paths, hashed here
	Contract []byte   // contract.json; nil: the default contract
	// How errors name the task, the refs and the contract, e.g.
	// "--handoff task.md", "--ref", "--contract c.json".
	TaskLabel, RefsLabel, ContractLabel string
}

// Build returns the handoff, checked as the daemon will check it. Refs are
// hashed here, with the caller's own rights: the child is handed the hash
// of what its parent saw.
func (h Handoff) Build() (*kin.Handoff, error) {
	hh := handoff.Handoff{Task: h.Task, Contract: handoff.DefaultContract()}
	if err := hh.Validate(); err != nil { // only the task is set so far
		return nil, invalid("%s: %s", h.TaskLabel, kin.ErrorMessageOf(err))
	}
	out := &kin.Handoff{Task: hh.Task}
	if len(h.Refs) > 0 {
		refs, err := handoff.InputRefs(h.Refs)
		if err != nil {
			return nil, invalid("%s: %s", h.RefsLabel, kin.ErrorMessageOf(err))
		}
		hh.Refs = refs
		for _, r := range refs {
			out.Refs = append(out.Refs, kin.Ref{Path: r.Path, Hash: r.Hash, Kind: r.Kind, Summary: r.Summary})
		}
	}
	if h.Contract != nil {
		c, err := handoff.ParseContract(h.Contract)
		if err != nil {
			return nil, invalid("%s: %s", h.ContractLabel, kin.ErrorMessageOf(err))
		}
		hh.Contract = c
		// Sent as written: the daemon reads it as strictly, and records it.
		out.Contract = json.RawMessage(bytes.TrimSpace(h.Contract))
	}
	if err := hh.Validate(); err != nil {
		return nil, invalid("the handoff is invalid: %s", kin.ErrorMessageOf(err))
	}
	return out, nil
}

// Template provisions a new agent's workspace from a template directory.
type Template struct {
	Dir  string            // the template directory
	Vars map[string]string // its placeholders' values (--set)
	// Label names the template in errors ("--template", "template");
	// PolicyLabel the agent's own policy ("--policy p.yaml", "policy").
	Label, PolicyLabel string
	// KeepRole keeps req.Role even when it is empty (the caller gave an
	// empty role on purpose).
	KeepRole bool
}

// Apply loads the template into req and sets req.Policy: the template's
// role and stage fill req's where those are empty; its policy is merged
// with own (the agent's own policy, nil for none), own winning field by
// field.
func (t Template) Apply(req *kin.RegisterRequest, own *kin.Policy) error {
	tpl, cfg, err := template.Load(t.Dir)
	if err != nil {
		return invalid("%s %s: %s", t.Label, t.Dir, strings.TrimPrefix(err.Error(), "template: "))
	}
	tpl.Vars = t.Vars
	req.Template = &tpl
	if req.Role == "" && !t.KeepRole {
		req.Role = cfg.Role
	}
	if req.Stage == "" {
		req.Stage = cfg.Stage
	}
	switch {
	case cfg.Policy != nil && own != nil:
		merged := policy.Merge(*cfg.Policy, *own)
		if err := policy.Validate(merged); err != nil {
			return invalid("%s merged with the policy of %s %s: %v", t.PolicyLabel, t.Label, t.Dir, err)
		}
		req.Policy = &merged
	case cfg.Policy != nil:
		req.Policy = cfg.Policy
	default:
		req.Policy = own
	}
	return nil
}

func invalid(format string, args ...any) error { return kin.Errorf(kin.ECodeInvalid, format, args...) }
