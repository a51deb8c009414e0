package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) registerCommand() *cobra.Command {
	var req kin.RegisterRequest
	var perm permFlags
	cmd := &cobra.Command{
		Use:   "register --name NAME --responsible WHO [flags]",
		Short: "Register an agent, as a root or as the child of another",
		Long: `Register an agent in the lineage registry and print it.

Without --parent the agent is a root (generation 0); --responsible names the
accountable human or organisation, by default the operator's login name (or
what kin serve --default-responsible says). With --parent it is that
agent's child (generation = parent's + 1) and inherits the parent's
responsible party unless --responsible names another. The governor's profile
decides whether the spawn is allowed (see "kin governor show").

--policy FILE gives the agent its own policy (JSON or YAML; see "kin spawn
--help"), at most what its parent holds; --stage S the preset its tools
follow. The file is checked here before anything is sent.

Exit status: 0 when the agent is registered, 1 when the registration was
refused (the error names the rule, or with permission_escalation every item
the policy asks for beyond the parent's), 2 when the command line is wrong.`,
		Example: `  kin register --name Research-Coordinator --responsible "Dr. Schmidt, COAI Research"
  kin register --name Data-Collector --parent 1 --role collector --scope "public web pages"
  kin register --name PO-MVP1 --parent 1 --role po --json
  kin register --name Auditor --parent 1 --life detached   # with a profile that has allow_detach
  kin register --name Reviewer --parent 1 --policy reviewer.yaml --stage restricted`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.register(cmd, &req, &perm)
		}),
	}
	a.registerFlags(cmd, &req,
		"the agent's `name`: letters, digits and - _ . : @ (e.g. PO-MVP1, HO@server1)",
		"the parent agent's `ID` (omit or 0 for a root)")
	perm.add(cmd.Flags(), "")
	cmd.MarkFlagRequired("name")
	return cmd
}

// registerFlags are the registration flags `kin register` and `kin spawn`
// share; the two explain --name and --parent each their own way.
func (a *app) registerFlags(cmd *cobra.Command, req *kin.RegisterRequest, nameUsage, parentUsage string) {
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", nameUsage)
	f.StringVar(&req.Responsible, "responsible", "", "the accountable `party`, a human or organisation (children inherit their parent's; a root defaults to the operator's login name, or kin serve --default-responsible)")
	f.Var(a.idFlag(&req.Parent, "parent", true), "parent", parentUsage)
	f.StringVar(&req.Role, "role", "", "the agent's `role` (profiles with roles derive it from the name when omitted)")
	f.StringVar(&req.Scope, "scope", "", "the agent's operational `scope`, free text")
	f.StringVar(&req.Wallet, "wallet", "", "the agent's `wallet` address; unique among agents")
	f.StringVar(&req.ConstitutionHash, "constitution", "", "`hash` of the agent's constitution")
	f.StringVar(&req.CapabilityHash, "capability", "", "`hash` of the agent's capability manifest")
	f.BoolVar(&req.SelfModifying, "self-modifying", false, "the agent may modify its own code or prompts")
	f.Var(newEnumFlag(&req.Life, kin.LifeOwned, kin.LifeDetached), "life", "the agent's `life`: owned (dies with its parent, the default) or detached (outlives it; the profile must have allow_detach)")
}

// register sends a registration built from flags (kin register, kin
// create) and prints the agent.
func (a *app) register(cmd *cobra.Command, req *kin.RegisterRequest, perm *permFlags) error {
	if err := perm.apply(req); err != nil {
		return err
	}
	svc, err := a.service()
	if err != nil {
		return err
	}
	ag, err := svc.Register(cmd.Context(), *req)
	if err != nil {
		return err
	}
	if a.jsonOut {
		return a.printJSON(ag)
	}
	return writeAgent(a.env.Stdout, ag)
}
