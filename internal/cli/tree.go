package cli

import (
	"github.com/spf13/cobra"
)

func (a *app) treeCommand() *cobra.Command {
	format := formatText
	cmd := &cobra.Command{
		Use:   "tree [ID]",
		Short: "Draw the lineage tree of every root, or of one agent's subtree",
		Long: `Draw the lineage tree: every root with its descendants, or the subtree of ID.

Formats:
  text     an indented tree: id, name, role, generation, status, state; for
           an agent under a budget or that reported usage, its subtree's
           spend against the budget: tokens 1200/5000 cost 0.40/1.00
           spawns 3/10 (only the parts with a budget or a spend)
  json     nested objects, each with a "children" array (the same as --json)
  mermaid  a Mermaid "graph TD": the responsible parties on top, "registers"
           edges to roots, "spawns" edges to children
  dot      a Graphviz digraph ("kin tree --format dot | dot -Tsvg > tree.svg")`,
		Example: `  kin tree
  kin tree 2
  kin tree --format mermaid > lineage.mmd
  kin tree --format dot | dot -Tpng > lineage.png`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s takes at most one agent ID, not %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if a.jsonOut {
				if cmd.Flags().Changed("format") && format != formatJSON {
					return usageErrorf("--json and --format %s contradict each other", format)
				}
				format = formatJSON
			}
			id, err := a.optionalAgentArg(cmd.Context(), args)
			if err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			forest, err := svc.Tree(cmd.Context(), id)
			if err != nil {
				return err
			}
			return renderTree(a.env.Stdout, forest, format)
		}),
	}
	cmd.Flags().Var(newEnumFlag(&format, treeFormats...), "format", "output `format`: "+joinStrings(treeFormats))
	return cmd
}
