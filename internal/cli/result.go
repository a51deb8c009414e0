package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) resultCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "result ID",
		Short: "Print what an agent handed back: its result.md",
		Long: `Print agent ID's result.md as kin keeps it, byte for byte, ended or not: in
seed 001's handoff protocol a child writes result.md, refs.jsonl and
artifact/ into $KIN_OUTPUT, and when it ends kin checks them against the
output contract and copies them into its parent's session under
context/child/<child>/. While the agent runs, or when it wrote no result.md,
nothing is printed on stdout and a note on stderr says where the result
stands.

With --json: the whole result (the agent, its result status, result.md,
its refs with the hashes kin computed, and what it lacks against its
contract). "kin wait" waits for the agent to end first.`,
		Example: `  kin result 8
  kin result 8 > review.md
  kin result 8 --json | jq '.status, .violations'`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			res, err := svc.Result(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(res)
			}
			if res.Result == "" {
				status := string(res.Status)
				if status == "" {
					status = "no result channel"
				}
				_, err := fmt.Fprintf(a.env.Stderr, "kin: agent %d has no result.md (%s)\n", id, status)
				return err
			}
			out := res.Result
			if !strings.HasSuffix(out, "\n") {
				out += "\n"
			}
			_, err = io.WriteString(a.env.Stdout, out)
			return err
		}),
	}
}
