package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) waitCommand() *cobra.Command {
	var timeout *kin.Duration
	cmd := &cobra.Command{
		Use:   "wait ID [--timeout DUR]",
		Short: "Wait for an agent to end, and print its result",
		Long: `Block until agent ID has ended and kin has checked what it handed back, then
print its result.

In seed 001's handoff protocol a parent hands its child a task ("kin spawn
--handoff"); the child writes result.md, refs.jsonl and artifact/ into
$KIN_OUTPUT; when it ends, kin checks them against the output contract,
recomputing every ref's hash, and copies them into the parent's session
under context/child/<child>/. "kin wait" returns once that is done; for an
agent that has already ended, at once.

Prints a first line with the agent and its result status, e.g.

  agent 8 (rev-123): completed

then what the result lacks against its contract, one line each starting
with "- ", then a blank line and result.md. With --json: the result as
kin keeps it (the agent, status, result.md, refs with the hashes kin
computed, violations).

Without --timeout the wait lasts until the agent ends or you interrupt it;
with one, a timeout changes nothing and the agent goes on: wait again.

Exit status:
  0  the result is completed: it meets its contract and its refs verified
  1  the wait failed: no such agent, not one of yours, kin unreachable,
     interrupted
  2  the command line is wrong
  3  the agent ended but its result is not completed: contract_violated,
     failed or cancelled (the result is printed all the same)
  4  --timeout passed before the agent ended
An agent handed no task and without a parent session has no result to
check: its process's exit decides (0 for exit status 0, else 3).`,
		Example: `  kin wait 8
  kin wait 8 --timeout 10m || echo "exit $?"
  kin wait 8 --json | jq -r .status`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			req := kin.WaitRequest{ID: id}
			if timeout != nil {
				req.Timeout = *timeout
			}
			res, err := svc.Wait(cmd.Context(), req)
			if kin.ErrorCodeOf(err) == kin.ECodeTimeout {
				return &exitStatus{code: ExitTimeout, err: err}
			}
			if err != nil {
				return err
			}
			if a.jsonOut {
				err = a.printJSON(res)
			} else {
				err = writeResult(a.env.Stdout, id, res)
			}
			if err != nil {
				return err
			}
			if !resultOK(res) {
				return &exitStatus{code: ExitNotCompleted}
			}
			return nil
		}),
	}
	cmd.Flags().Var(durationFlag{d: &timeout}, "timeout", "give up after this long (exit 4) if the agent has not ended (default: no limit)")
	return cmd
}

// resultOK reports whether an ended agent's result counts as a success: a
// completed result, or for an agent without a result channel, exit status 0.
func resultOK(r *kin.AgentResult) bool {
	if r.Status != "" {
		return r.Status == kin.ResultCompleted
	}
	if r.Agent == nil {
		return false
	}
	e := r.Agent.Exit
	return e != nil && e.Known && e.Code == 0 && e.Signal == ""
}

// writeResult prints a result as kin wait does: the status line, the
// violations, a blank line and result.md.
func writeResult(w io.Writer, id kin.AgentID, r *kin.AgentResult) error {
	var b strings.Builder
	name := ""
	if r.Agent != nil {
		name = " (" + r.Agent.Name + ")"
	}
	status := string(r.Status)
	if status == "" {
		status = "ended without a result channel"
		if r.Agent != nil {
			status += ", " + endString(r.Agent)
		}
	}
	fmt.Fprintf(&b, "agent %d%s: %s\n", id, name, status)
	for _, v := range r.Violations {
		b.WriteString("- " + strings.ReplaceAll(v, "\n", "\n  ") + "\n")
	}
	if r.Result != "" {
		b.WriteString("\n" + r.Result)
		if !strings.HasSuffix(r.Result, "\n") {
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
