package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

// costFlag is a cost flag: a finite, non-negative number.
type costFlag struct{ c *float64 }

func (f costFlag) String() string { return strconv.FormatFloat(*f.c, 'f', -1, 64) }

func (f costFlag) Set(s string) error {
	c, err := strconv.ParseFloat(s, 64)
	if err != nil || c < 0 || math.IsInf(c, 0) || math.IsNaN(c) {
		return fmt.Errorf("not a cost: use a non-negative number such as 0.25")
	}
	*f.c = c
	return nil
}

func (f costFlag) Type() string { return "X" }

func (a *app) usageCommand() *cobra.Command {
	var req kin.UsageRequest
	cmd := &cobra.Command{
		Use:   "usage --tokens N [--cost X] [--agent ID]",
		Short: "Report what an agent has spent, and print its subtree's spend against its budget",
		Long: `Report spend: tokens and cost an agent has used since it last reported. It
counts against the agent's subtree's budget and against every ancestor's
(the "budget" of "kin spawn --policy": max_tokens, max_cost). A subtree
that has spent its budget is stopped, and later spawns in it are refused
with budget_exhausted.

Run by an agent (KIN_SOCKET is set) it reports for that agent; the operator
reports for one with --agent. Give --tokens, --cost or both.

Prints the agent's own spend, then its subtree's against the budget in
force, e.g.

  own      tokens 1200 cost 0.40
  subtree  tokens 3400/5000 cost 1.10/2.00 spawns 3/10

With --json: the spend as kin returns it.

Exit status: 0 when the spend was recorded, 1 when it was not (the error
says why), 2 when the command line is wrong.`,
		Example: `  kin usage --tokens 1200 --cost 0.004
  kin usage --tokens 800 --agent 7
  kin usage --tokens 1200 --json | jq .subtree_tokens`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("tokens") && !cmd.Flags().Changed("cost") {
				return usageErrorf("say what was spent: --tokens N, --cost X or both")
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			s, err := svc.Usage(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(s)
			}
			return writeSpend(a.env.Stdout, s)
		}),
	}
	f := cmd.Flags()
	f.Var(nonNegFlag{n: &req.Tokens}, "tokens", "tokens used since the last report")
	f.Var(costFlag{c: &req.Cost}, "cost", "cost incurred since the last report, in the budget's unit")
	f.Var(a.idFlag(&req.Agent, "agent", false), "agent", "the agent `ID` to report for (the operator's way; inside an agent, the default is the agent itself)")
	return cmd
}

// writeSpend prints an agent's own spend and its subtree's.
func writeSpend(w io.Writer, s *kin.Spend) error {
	tw := newTabWriter(w)
	fmt.Fprintf(tw, "own\ttokens %d cost %s\n", s.Tokens, costString(s.Cost))
	sub := spendString(s)
	if sub == "" {
		sub = "nothing spent, no budget"
	}
	fmt.Fprintf(tw, "subtree\t%s\n", sub)
	return tw.Flush()
}
