package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) inboxCommand() *cobra.Command {
	var req kin.InboxRequest
	var max int
	cmd := &cobra.Command{
		Use:   "inbox [--follow] [--max N] [--since SEQ] [--agent ID]",
		Short: "List the messages sent to an agent, or follow them live",
		Long: `List the messages sent to an agent ("kin send"), oldest first, one per line:
the seq of the event that carried it, the sender (an agent's id, or
operator), the recipient, the session and the text:

  #42 from 3 to 5 [default] The spec is in memory/spec.md.

Text with newlines or other control characters is printed quoted, so that
each message stays on one line. With --json: JSON lines, one message object
per line.

Run by an agent (KIN_SOCKET is set) it reads that agent's inbox; the
operator names one with --agent. --since SEQ starts after the message with
that seq: pass back the last one seen. With --follow the command keeps
running and prints each new message as it is sent, until interrupted
(Ctrl-C exits with status 0).

Exit status: 0 when the messages were listed, 1 when they could not be
(the error says why), 2 when the command line is wrong.`,
		Example: `  kin inbox
  kin inbox --agent 5 --since 40
  kin inbox --follow --json | jq -r .text
  msg=$(kin inbox --follow --max 1)   # wait for the next message`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if max < 0 {
				return usageErrorf("--max must be 1 or more")
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			seen := 0
			write := func(m kin.Message) error {
				var err error
				if a.jsonOut {
					var b []byte
					if b, err = json.Marshal(m); err == nil {
						_, err = fmt.Fprintf(a.env.Stdout, "%s\n", b)
					}
				} else {
					_, err = fmt.Fprintln(a.env.Stdout, formatMessage(m))
				}
				if seen++; err == nil && max > 0 && seen == max {
					return errEnough
				}
				return err
			}
			ctx := cmd.Context()
			err = svc.Inbox(ctx, req, write)
			if errors.Is(err, errEnough) {
				return nil
			}
			if req.Follow && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // interrupted: the normal way to stop following
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&req.Follow, "follow", "f", false, "keep printing new messages until interrupted")
	f.IntVar(&max, "max", 0, "stop after `N` messages (with --follow: wait for them)")
	f.Var(nonNegFlag{n: &req.Since}, "since", "only messages after this `SEQ` (exclusive)")
	f.Var(a.idFlag(&req.Agent, "agent", false), "agent", "the agent `ID` whose inbox to read (the operator's way; inside an agent, the default is the agent itself)")
	return cmd
}

// errEnough stops an inbox once --max messages were printed.
var errEnough = errors.New("enough messages")

// formatMessage is a message's line: "#42 from 3 to 5 [default] text".
func formatMessage(m kin.Message) string {
	var b strings.Builder
	if m.Seq != 0 {
		fmt.Fprintf(&b, "#%d ", m.Seq)
	}
	from := "operator"
	if m.From != 0 {
		from = m.From.String()
	}
	fmt.Fprintf(&b, "from %s to %d [%s] ", from, m.To, oneLine(m.Session))
	if strings.ContainsFunc(m.Text, isControl) {
		b.WriteString(fmt.Sprintf("%q", m.Text))
	} else {
		b.WriteString(m.Text)
	}
	return b.String()
}
