package cli

import (
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/kin-agents/kin/internal/agentreq"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// handoffFlags are kin spawn's flags for seed 001's handoff: the task and
// the files that go with it. The child's policy is not part of it: that is
// kin spawn --policy (RegisterRequest.Policy), which kin enforces.
type handoffFlags struct {
	flags    *pflag.FlagSet
	task     string // --handoff FILE, "-" for stdin
	refs     []string
	contract string
}

func (h *handoffFlags) add(f *pflag.FlagSet) {
	h.flags = f
	f.StringVar(&h.task, "handoff", "", "hand the agent its task: handoff.md, read from `FILE` (- for stdin)")
	f.StringArrayVar(&h.refs, "ref", nil, "with --handoff: an input ref, a `PATH` to a file the agent should read, hashed here (repeatable)")
	f.StringVar(&h.contract, "contract", "", "with --handoff: the output contract, contract.json, from `FILE`")
}

// build reads the files the flags name and returns the handoff, checked as
// the daemon will check it, so that a bad file is named before anything is
// spawned; nil without --handoff. Refs are hashed here, with the caller's
// own rights: the child is handed the hash of what its parent saw.
func (h *handoffFlags) build(stdin io.Reader) (*kin.Handoff, error) {
	if !h.flags.Changed("handoff") {
		for _, name := range []string{"ref", "contract"} {
			if h.flags.Changed(name) {
				return nil, usageErrorf("--%s is part of a handoff: it needs --handoff FILE, the task to hand the agent", name)
			}
		}
		return nil, nil
	}
	task, err := readFlagFile("--handoff", h.task, handoff.MaxTaskBytes, stdin)
	if err != nil {
		return nil, err
	}
	spec := agentreq.Handoff{Task: string(task), Refs: h.refs,
		TaskLabel: "--handoff " + h.task, RefsLabel: "--ref", ContractLabel: "--contract " + h.contract}
	if h.flags.Changed("contract") {
		if spec.Contract, err = readFlagFile("--contract", h.contract, handoff.MaxContractSize, nil); err != nil {
			return nil, err
		}
	}
	return spec.Build()
}

// readFlagFile reads the file a flag or argument names (what: "--handoff",
// "FILE"), at most max bytes; "-" is stdin where stdin is given.
func readFlagFile(what, path string, max int64, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	switch {
	case path == "":
		return nil, kin.Errorf(kin.ECodeInvalid, "%s needs a file name", what)
	case path == "-" && stdin != nil:
		r = stdin
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, kin.Errorf(kin.ECodeInvalid, "%s: %v", what, err) // "open FILE: no such file or directory"
		}
		defer f.Close()
		// Pipes are fine (--handoff <(make-task)); refs, which the child
		// reads again, are held to regular files by handoff.InputRefs.
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return nil, kin.Errorf(kin.ECodeInvalid, "%s %s is a directory, not a file", what, path)
		}
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "%s: reading %s: %v", what, path, err)
	}
	if int64(len(data)) > max {
		return nil, kin.Errorf(kin.ECodeInvalid, "%s %s is larger than %d bytes", what, path, max)
	}
	return data, nil
}
