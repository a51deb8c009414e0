package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Say whether kin takes you for the operator or an agent",
		Long: `Print who kin takes the caller for. Through the operator socket (kin.sock in
kin's home) or the HTTP API with the operator token, that is the operator:
"operator" is printed. Run by an agent, through its own socket (KIN_SOCKET
in its environment) or from a process inside its cgroup, it is that agent,
printed as "kin show" prints it. An agent may act only on itself and its
descendants.

With --json: the agent, or null for the operator.`,
		Example: `  kin whoami
  kin whoami --json | jq .id`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			ag, err := svc.Whoami(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ag)
			}
			if ag == nil {
				_, err := fmt.Fprintln(a.env.Stdout, "operator")
				return err
			}
			return writeAgent(a.env.Stdout, ag)
		}),
	}
}
