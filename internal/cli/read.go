package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) readCommand() *cobra.Command {
	var reader kin.AgentID
	cmd := &cobra.Command{
		Use:   "read AGENT:PATH [--as READER_ID]",
		Short: "Read a file of another agent's workspace, where both consent",
		Long: `Print a file of AGENT's workspace, byte for byte, on stdout. AGENT is an
agent's id (7 or #7) or name; PATH is relative to its workspace; the two
are split at the first ':', so PATH may hold ':' itself.

kin reads the file for the reader only where both sides consent (seed 003
§4): the reader's policy lists AGENT in visibility.read_from, AGENT's lists
the reader in visibility.readable_to, and PATH matches both sides'
visibility.scope. Otherwise the read is refused with permission_denied.

Run by an agent (KIN_SOCKET is set) the reader is that agent; the operator
names one with --as. The file's bytes are never wrapped: --json changes
only how errors are reported.

Exit status: 0 when the file was printed, 1 when it was not (the error
says why), 2 when the command line is wrong.`,
		Example: `  kin read researcher:memory/notes.md
  kin read 7:SOUL.md --as 9
  kin read writer:drafts/intro.md > intro.md`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes one AGENT:PATH (e.g. %s researcher:memory/notes.md), not %d arguments", cmd.CommandPath(), cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			owner, path, ok := strings.Cut(args[0], ":")
			switch {
			case !ok:
				return usageErrorf("%q is not AGENT:PATH: put a ':' between the agent and the path (e.g. researcher:memory/notes.md)", args[0])
			case owner == "":
				return usageErrorf("%q names no agent before the ':'", args[0])
			case path == "":
				return usageErrorf("%q names no path after the ':'", args[0])
			}
			if id, err := kin.ParseAgentID(owner); err == nil {
				owner = id.String() // "#7" is 7
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			data, err := svc.ReadFile(cmd.Context(), kin.ReadRequest{Reader: reader, Owner: owner, Path: path})
			if err != nil {
				return err
			}
			_, err = a.env.Stdout.Write(data)
			return err
		}),
	}
	cmd.Flags().Var(a.idFlag(&reader, "as", false), "as", "the reading agent's `ID` (the operator's way; inside an agent, the default is the agent itself)")
	return cmd
}
