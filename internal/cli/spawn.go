package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/agentreq"
	"github.com/kin-agents/kin/kin"
)

func (a *app) spawnCommand() *cobra.Command {
	var req kin.SpawnRequest
	var ho handoffFlags
	var perm permFlags
	cmd := &cobra.Command{
		Use:   "spawn [flags] [--] COMMAND [ARGS...]",
		Short: "Start an agent: register it and run its process under supervision",
		Long: `Register an agent, under the same governor rules as "kin register", and
start COMMAND as its process. kin supervises it: the process runs in the
agent's own cgroup, nested under its parent's (or in its own process group
where no writable cgroup v2 exists, see "kin status"); its stdout and stderr
are kept ("kin logs"); when it ends, its owned children are stopped; with
--restart it is replaced after it crashes.

Flags come before COMMAND: everything from COMMAND on is the agent's command
line, so "--" is needed only when COMMAND itself starts with "-". A COMMAND
without a slash is looked up in this shell's PATH, and the process starts in
the current directory unless --dir names another.

The process's environment holds PATH, HOME, LANG and a few more of the
daemon's, each --env KEY=VALUE, and kin's own:

  KIN_AGENT_ID, KIN_AGENT_NAME, KIN_PARENT_ID   who the agent is
  KIN_SOCKET         the agent's own socket: kin commands the agent runs act
                     as the agent, on itself and its descendants only
  KIN_RESUME_CURSOR  for a replacement: the last cursor its predecessor
                     reported with "kin heartbeat --cursor"

Without --name kin makes a name from the command. Without --parent the agent
is a root and needs --responsible, except when "kin spawn" runs inside an
agent: then the new agent is that agent's child.

Handing off a task (seed 001's handoff protocol): --handoff FILE is the
child's task, handoff.md ("-" reads it from stdin). With it may come:

  --ref PATH       an input ref, a file the child should read (repeatable).
                   kin spawn hashes it (sha256) here, with your own rights:
                   the child is handed the path with the hash you saw.
  --contract FILE  the output contract, contract.json: the sections result.md
                   must have and the artifacts the child must produce. Without
                   it: a non-empty result.md with a non-empty Summary section.

Every file is checked here first, and a bad one is named before anything is
spawned. The child finds handoff.md at $KIN_HANDOFF, with refs.jsonl,
contract.json, and its effective policy (policy.json, mounts.json) beside
it, and writes its result
into $KIN_OUTPUT: result.md, refs.jsonl (the files it used or made) and
artifact/. When it ends, kin checks them against the contract, recomputing
every ref's hash, and copies them into the parent's session under
context/child/<child>/ with a status: completed, contract_violated, failed
or cancelled. "kin wait" waits for that; "kin result" and "kin context pack"
read it.

What the agent may do (seed 001's permission attenuation, seed 003):

  --policy FILE    the agent's own policy, JSON or YAML: the tools it may use
                   (glob patterns: "tools": {"allow": ["read", "web_*"],
                   "deny": ["exec"]}), the paths it sees ("mounts": {"/work":
                   "rw"}; every other path is hidden), whether it may spawn,
                   and its subtree's budget (tokens, cost, descendants,
                   deadline). Unknown keys are an error. It must be a subset
                   of what the parent holds: anything more is refused with
                   permission_escalation, listing every item. Without it the
                   agent keeps its parent's policy.
  --stage S        the preset its tools follow (default: its parent's stage);
                   "kin promote" changes it later.
  --template DIR   provision its workspace from a template: the files under
                   DIR, with placeholders like {AGENT_NAME}, {PARENT}, {ROLE}
                   and {RESPONSIBLE} filled in. A config fragment at DIR's top
                   (.kin.json or .kin.yaml) may give a role, a stage and a
                   policy: the role and stage apply where --role and --stage
                   are not given; the policy is merged with --policy's, and
                   --policy wins field by field.
  --set K=V        the value of the template's placeholder {K} (repeatable).

The policy file and the template are read and checked here, with your own
rights, and a bad one is named before anything is spawned. "kin show" prints
the agent's effective policy, "kin explain" why it may or may not do
something.

Placement (a fleet: several kin serve on one PostgreSQL store, see "kin
hosts"): --host NAME runs the agent on that host of the fleet, whichever
host's API receives the spawn. Without --host the agent runs on its parent's
host when the parent is an agent running on a host of the fleet (a child
runs beside its parent), and otherwise on the host that receives the spawn.
The placed host's kin serve starts the process, and kin spawn answers once
it runs there (its PID is that host's). With --host, COMMAND without a slash
is looked up in that host's kin serve's PATH, not this shell's, and the
process starts in its session directory on that host unless --dir names a
directory there. An unknown host is refused naming the fleet's hosts; a host
whose lease ran out (its daemon down) is refused with nothing registered;
one that does not start the agent within 30 s, or goes down meanwhile,
leaves it recorded failed (end reason placement_failed) with nothing
running. A policy's mounts and --template name files on the host that
receives the spawn: spawn such an agent through its own host's API.

Prints the agent, with its PID.

Exit status: 0 when the agent runs, 1 when the spawn was refused or failed
(the error says why: a governor rule, permission_escalation, a bad file),
2 when the command line is wrong.`,
		Example: `  kin spawn --name Research-Coordinator --responsible "Dr. Schmidt" -- python3 coordinator.py
  kin spawn --parent 1 --host gpu-2 --name trainer -- /opt/train/run.sh
  kin spawn --parent 1 --name Web-Scraper --restart on-failure --grace 10s ./scrape.sh --depth 2
  kin spawn --parent 1 --env LOG_LEVEL=debug --dir /srv/agents --json node agent.js
  kin spawn --name Sleeper --responsible ops -- sleep 3600
  kin spawn --parent 1 --name rev-123 --handoff task.md --ref docs/spec.md --contract contract.json -- ./review.sh
  echo "Summarise the logs." | kin spawn --parent 1 --handoff - --ref /var/log/app.log -- ./summarise.sh
  kin spawn --parent 1 --name researcher --policy research.yaml --stage restricted -- ./agent.sh
  kin spawn --parent 1 --name writer --template ./templates/writer --set TOPIC=lineage -- ./agent.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s needs the COMMAND to run after its flags, e.g. %s --name worker -- python3 worker.py", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if req.Host != "" {
				if err := kin.ValidateHostName(req.Host); err != nil {
					return usageErrorf("--host %q: %s", req.Host, kin.ErrorMessageOf(err))
				}
			}
			req.Command = slices.Clone(args)
			if req.Host == "" {
				req.Command[0] = resolveCommand(req.Command[0])
			}
			for _, kv := range req.Env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageErrorf("--env %q is not KEY=VALUE", kv)
				}
			}
			// Inside an agent, a child without --dir starts in its own
			// session: the parent's directory is its uid's alone; so
			// does an agent placed on a host (where this directory may
			// not exist).
			if req.Dir != "" || a.env.Getenv("KIN_AGENT_ID") == "" && req.Host == "" {
				dir, err := workDir(req.Dir)
				if err != nil {
					return err
				}
				req.Dir = dir
			}
			var err error
			if req.Handoff, err = ho.build(a.env.Stdin); err != nil {
				return err
			}
			if err := perm.apply(&req.RegisterRequest); err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			ag, err := svc.Spawn(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ag)
			}
			return writeAgent(a.env.Stdout, ag)
		}),
	}
	// Flags stop at COMMAND: the agent's own flags are its business.
	cmd.Flags().SetInterspersed(false)
	a.registerFlags(cmd, &req.RegisterRequest,
		"the agent's `name`: letters, digits and - _ . : @ (default: made from COMMAND)",
		"the parent agent's `ID` (omit or 0 for a root; inside an agent, for that agent's child)")
	f := cmd.Flags()
	f.StringArrayVar(&req.Env, "env", nil, "add `KEY=VALUE` to the agent's environment (repeatable; KIN_* are kin's own)")
	f.StringVar(&req.Dir, "dir", "", "the process's working `directory` (default: the current directory; run inside an agent or with --host, the child's own session)")
	f.StringVar(&req.Host, "host", "", "the fleet's `host` to run the agent on (default: its parent's host when the parent runs on one, else the host receiving the spawn)")
	f.Var(durationFlag{d: &req.Grace}, "grace", "time between SIGTERM and SIGKILL when the agent is stopped (default 5s; 0s kills at once)")
	f.Var(newEnumFlag(&req.Restart, kin.RestartNever, kin.RestartOnFailure, kin.RestartAlways), "restart",
		"`policy` for replacing the agent after its process ends: never (the default), on-failure (after a crash, or going offline), always")
	ho.add(f)
	perm.add(f, "template")
	return cmd
}

// resolveCommand makes a program name without a slash absolute, looked up
// in the CLI's own PATH (agentreq.ResolveCommand).
func resolveCommand(name string) string { return agentreq.ResolveCommand(name, nil) }

// workDir is the agent's working directory: dir made absolute against the
// CLI's own, or the CLI's own when dir is "".
func workDir(dir string) (string, error) {
	if dir != "" && filepath.IsAbs(dir) {
		return filepath.Clean(dir), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", kin.Errorf(kin.ECodeInvalid, "cannot find the current directory (give --dir): %v", err)
	}
	return filepath.Join(wd, dir), nil
}
