package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

// statusChangeHelp describes each action: what it does, and its past tense.
var statusChangeHelp = map[kin.StatusAction]struct{ short, long, done string }{
	kin.ActionSuspend: {
		short: "Suspend an agent (and with --cascade its subtree)",
		long: `Suspend an active agent: it keeps its place in the lineage but may not
spawn children until resumed. Its children stay active unless --cascade is
given, which suspends every active descendant too.`,
		done: "suspended",
	},
	kin.ActionResume: {
		short: "Resume a suspended agent (and with --cascade its subtree)",
		long: `Resume a suspended agent: it becomes active again. With --cascade every
suspended descendant is resumed too.`,
		done: "resumed",
	},
	kin.ActionRevoke: {
		short: "Revoke an agent's registration (and with --cascade its subtree's)",
		long: `Revoke an active or suspended agent: it no longer counts as live and may
never spawn again. Revocation is final: a revoked agent cannot be resumed.
With --cascade every active or suspended descendant is revoked too.`,
		done: "revoked",
	},
	kin.ActionTerminate: {
		short: "Terminate an agent (and with --cascade its subtree)",
		long: `Terminate an agent: its status and state become terminated, for good, and
its name becomes free for a new agent. With --cascade every descendant is
terminated too.`,
		done: "terminated",
	},
}

// statusChangeCommand is suspend, resume, revoke or terminate.
func (a *app) statusChangeCommand(action kin.StatusAction) *cobra.Command {
	help := statusChangeHelp[action]
	req := kin.StatusRequest{Action: action}
	cmd := &cobra.Command{
		Use:   string(action) + " ID [--cascade]",
		Short: help.short,
		Long: help.long + `

Prints the agents whose status changed (with --json, an array of them). An
action that applies to none of them fails with invalid_transition.`,
		Example:     fmt.Sprintf("  kin %[1]s 7\n  kin %[1]s 1 --cascade --reason \"incident 42\" --json", action),
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			req.ID = id
			changed, err := svc.SetStatus(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.printAgents(changed, "agent", "agents", help.done)
		}),
	}
	cmd.Flags().BoolVar(&req.Cascade, "cascade", false, "apply to every descendant too (those the change applies to)")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "the `text` recorded as the reason in the agent.status event")
	return cmd
}
