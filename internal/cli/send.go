package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) sendCommand() *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "send AGENT MESSAGE... [--session KEY]",
		Short: "Send a message to an agent",
		Long: `Send a message to AGENT (an id such as 7 or #7, or a name): kin appends
it to the agent's main session, or to session KEY, in its messages.jsonl
(seed 003 §5), where the agent's runtime picks it up; "kin inbox" lists
them. The words of MESSAGE are joined with spaces; a single "-" reads the
message from stdin instead, at most 64 KiB.

Run by an agent (KIN_SOCKET is set) the message comes from that agent;
from the operator otherwise.

Prints the message as kin recorded it, the way "kin inbox" does:

  #42 from operator to 5 [default] The spec is in memory/spec.md.

With --json: the message.

Exit status: 0 when the message was sent, 1 when it was not (the error
says why), 2 when the command line is wrong.`,
		Example: `  kin send writer "The spec is in memory/spec.md."
  kin send 5 please review drafts/intro.md --session review
  git diff | kin send reviewer -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErrorf("%s needs an AGENT and a MESSAGE (e.g. %s writer \"hello\"; - reads the message from stdin)", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			to := args[0]
			if to == "" {
				return usageErrorf("AGENT is empty: name an agent by id or name")
			}
			if id, err := kin.ParseAgentID(to); err == nil {
				to = id.String() // "#7" is 7
			}
			text := strings.Join(args[1:], " ")
			if len(args) == 2 && args[1] == "-" {
				data, err := io.ReadAll(io.LimitReader(a.env.Stdin, kin.MaxMessageLen+1))
				if err != nil {
					return kin.Errorf(kin.ECodeInvalid, "reading the message from stdin: %v", err)
				}
				text = string(data)
			}
			switch {
			case len(text) > kin.MaxMessageLen:
				return kin.Errorf(kin.ECodeInvalid, "the message is longer than %d bytes", kin.MaxMessageLen)
			case strings.TrimSpace(text) == "":
				return kin.Errorf(kin.ECodeInvalid, "the message is empty")
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			m, err := svc.Send(cmd.Context(), kin.SendRequest{To: to, Session: session, Text: text})
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(m)
			}
			_, err = fmt.Fprintln(a.env.Stdout, formatMessage(*m))
			return err
		}),
	}
	// Flags stop at MESSAGE: its words are the message's, dashes and all.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&session, "session", "", "the session `KEY` to append to (default: the agent's main session)")
	return cmd
}
