package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/sandbox"
)

// sandboxCommand is the hidden "kin sandbox-exec": the shim the daemon
// starts an agent through, as [kin, "sandbox-exec", sandbox.Args(spec)...].
// It needs no daemon. Flags are not parsed (the arguments are the shim's,
// passed through unchanged); it never returns on success: the agent's
// command replaces it.
func (a *app) sandboxCommand() *cobra.Command {
	return &cobra.Command{
		Use:                sandbox.Subcommand + " --spec JSON",
		Short:              "Restrict this process with Landlock and limits, then exec an agent (used by the daemon)",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return &exitStatus{code: sandbox.Main(args, a.env.Stderr)}
		}),
	}
}
