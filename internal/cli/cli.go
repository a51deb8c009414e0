package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/kin"
)

// Exit statuses.
const (
	ExitOK    = 0
	ExitError = 1 // the command ran and failed: the daemon refused, an agent was not found, ...
	ExitUsage = 2 // the command line was wrong: unknown command or flag, bad flag value
	// ExitNotCompleted: kin wait's agent ended, but its result is not
	// completed (contract_violated, failed, cancelled).
	ExitNotCompleted = 3
	// ExitTimeout: kin wait's --timeout passed before the agent ended.
	ExitTimeout = 4
)

// Env is what one run of the CLI works with.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Service, when set, is used instead of reaching the daemon through
	// --home, KIN_HOME or KIN_ADDR (tests inject one).
	Service kin.Service
	// Getenv reads the environment; nil means os.Getenv. Only `kin serve`
	// reads it here (the client SDK reads KIN_ADDR and KIN_HOME itself).
	Getenv func(string) string
}

// Run runs the kin command line with args (without the program name) and
// returns the process's exit status.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}.Run(ctx, args)
}

// Run runs the kin command line in e.
func (e Env) Run(ctx context.Context, args []string) int {
	if e.Stdin == nil {
		e.Stdin = strings.NewReader("")
	}
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	a := &app{env: e, ctx: ctx}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(e.Stdin)
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if a.closeSvc != nil {
		a.closeSvc()
	}
	if err == nil {
		return ExitOK
	}
	return a.fail(ctx, cmd, args, err)
}

// app is one run's state: the streams, the persistent flags and the service.
type app struct {
	env      Env
	ctx      context.Context // the run's, for resolving names
	home     string
	jsonOut  bool
	svc      kin.Service
	closeSvc func() error
	// names are agent flags given as names, resolved on reaching the daemon.
	names []pendingName
}

// service returns the injected service, or dials the daemon on first use;
// agent flags given as names are resolved then.
func (a *app) service() (kin.Service, error) {
	if a.svc == nil {
		if a.env.Service != nil {
			a.svc = a.env.Service
		} else {
			c, err := client.FromEnv(a.home)
			if err != nil {
				return nil, kin.Errorf(kin.ECodeInvalid, "%v", err)
			}
			a.svc, a.closeSvc = c, c.Close
		}
	}
	if len(a.names) > 0 {
		if err := a.resolveNames(a.ctx); err != nil {
			return nil, err
		}
	}
	return a.svc, nil
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kin",
		Short: "kin: a lineage registry and governor for trees of AI agents",
		Long: `kin registers AI agents with their lineage (who spawned whom, at which
generation, who is responsible), governs spawning by a profile of rules, and
lets the operator suspend, resume, revoke or terminate agents and subtrees.
It also runs them: "kin spawn" starts an agent's process under supervision,
in a cgroup nested like the lineage, and "kin stop" ends it with its owned
subtree.

Run "kin serve" to start the daemon; every other command talks to it, over
the socket in kin's home (--home, else $KIN_HOME, else ~/.kin, or /var/lib/kin/home as root), or over HTTP
when KIN_ADDR (host:port) and KIN_TOKEN (the operator token) are set.

A parent hands a child its task with "kin spawn --handoff" (seed 001's
handoff protocol), waits for it with "kin wait", and reads what it handed
back with "kin result" and "kin context pack".

Each agent has a policy ("kin spawn --policy FILE"): the tools it may use,
the paths it sees, its budget; it only ever narrows down the tree. "kin
authorize" asks kin before a tool is used ("kin hook claude-code" does it
for Claude Code), "kin explain" says why, "kin usage" reports spend, "kin
promote" changes an agent's stage; "kin create" provisions an agent's
workspace from a template; "kin read", "kin send" and "kin inbox" let
agents share files and messages where both consent.

Every command takes --json for machine-readable output. Exit status: 0 on
success, 1 when the command failed (the error is on stderr; with --json as
{"code": "...", "message": "..."}), 2 when the command line is wrong; "kin
wait" adds 3 (the result is not completed) and 4 (it timed out); "kin
authorize" exits 1 when the tool is denied; "kin hook claude-code" always
exits 0 with its decision (2 when it cannot answer at all); "kin stop" of
several agents, where some could not be stopped, prints those it stopped
and then exits 1.`,
		Example: `  kin serve &
  kin register --name Research-Coordinator --responsible "Dr. Schmidt"
  kin register --name Data-Collector --parent 1
  kin tree
  kin suspend 1 --cascade --reason "audit"
  kin spawn --parent 1 --name Web-Scraper -- python3 scrape.py
  kin logs 8 --follow
  kin stop 8
  kin spawn --parent 1 --name Reviewer --handoff task.md --ref spec.md -- ./review.sh
  kin wait 9 --timeout 1h`,
		// Agent flags given as names are resolved before a command reads them.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if len(a.names) == 0 {
				return nil
			}
			_, err := a.service()
			var ue *usageError
			if err != nil && !errors.As(err, &ue) {
				return &runError{err: err}
			}
			return err
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			HiddenDefaultCmd: true,
		},
	}
	root.PersistentFlags().StringVar(&a.home, "home", "", "kin's home `directory` (default $KIN_HOME, else ~/.kin; as root /var/lib/kin/home)")
	root.PersistentFlags().BoolVar(&a.jsonOut, "json", false, "print JSON instead of text (errors too, on stderr)")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		a.serveCommand(),
		a.registerCommand(),
		a.showCommand(),
		a.psCommand(),
		a.childrenCommand(),
		a.ancestorsCommand(),
		a.treeCommand(),
		a.statusChangeCommand(kin.ActionSuspend),
		a.statusChangeCommand(kin.ActionResume),
		a.statusChangeCommand(kin.ActionRevoke),
		a.statusChangeCommand(kin.ActionTerminate),
		a.spawnCommand(),
		a.stopCommand(),
		a.logsCommand(),
		a.heartbeatCommand(),
		a.whoamiCommand(),
		a.waitCommand(),
		a.resultCommand(),
		a.contextCommand(),
		a.createCommand(),
		a.promoteCommand(),
		a.authorizeCommand(),
		a.explainCommand(),
		a.usageCommand(),
		a.readCommand(),
		a.sendCommand(),
		a.inboxCommand(),
		a.hookCommand(),
		a.tokenCommand(),
		a.grantCommand(),
		a.grantsCommand(),
		a.ungrantCommand(),
		a.authTokensCommand(),
		a.keysCommand(),
		a.aauthCommand(),
		a.eventsCommand(),
		a.logCommand(),
		a.governorCommand(),
		a.statusCommand(),
		a.hostsCommand(),
		a.topCommand(),
		a.sandboxCommand(),
		a.devCommand(),
		a.mcpCommand(),
		a.versionCommand(),
	)
	// kin --version is kin version; kin alone prints the help.
	var showVersion bool
	root.Flags().BoolVar(&showVersion, "version", false, "print kin's version, commit and Go version, and the daemon's store and containment (as kin version does)")
	root.Args = cobra.NoArgs
	root.RunE = run(func(cmd *cobra.Command, _ []string) error {
		if showVersion {
			return a.printVersion(cmd.Context())
		}
		return cmd.Help()
	})
	return root
}

// runError marks an error returned by a command's own code, as opposed to
// one from cobra's parsing of the command line (a usage error).
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// exitStatus ends the run with its own exit status. With err, err is
// reported as any error would be; without, the command has already said
// everything on stdout.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitStatus) Unwrap() error { return e.err }

// usageError is a command line that is wrong: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run adapts a command's body to cobra, marking its errors as its own.
func run(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var ue *usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return &runError{err: err}
	}
}

// runOnID is run for commands whose one argument is an agent: an id (7 or
// #7) or a live agent's name. fn gets the service and the agent's id.
func (a *app) runOnID(fn func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error) func(*cobra.Command, []string) error {
	return run(func(cmd *cobra.Command, args []string) error {
		id, err := a.agentArg(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		svc, err := a.service()
		if err != nil {
			return err
		}
		return fn(cmd, svc, id)
	})
}

// printAgents prints agents as a JSON array, or as a table followed by a
// count line ("3 agents stopped").
func (a *app) printAgents(list []*kin.Agent, one, many, what string) error {
	if a.jsonOut {
		return a.printJSON(nonNil(list))
	}
	if len(list) > 0 {
		if err := writeAgentTable(a.env.Stdout, list); err != nil {
			return err
		}
	}
	line := plural(len(list), one, many)
	if what != "" {
		line += " " + what
	}
	_, err := fmt.Fprintln(a.env.Stdout, line)
	return err
}

// negativeArg matches pflag's complaint about "-1" given as an argument.
var negativeArg = regexp.MustCompile(`^unknown shorthand flag: '\d' in (-\d+)$`)

// flagError turns pflag's errors into usage errors, except a negative number
// given where an agent id belongs: that is a bad id, like "abc" or "0".
func flagError(cmd *cobra.Command, err error) error {
	if m := negativeArg.FindStringSubmatch(err.Error()); m != nil && cmd.Annotations[annotationArgs] == argsID {
		return &runError{err: badIDArg(m[1])}
	}
	return &usageError{msg: err.Error()}
}

// Command annotations.
const (
	annotationArgs = "kin.args"
	argsID         = "id"
)

// fail reports err on stderr and returns the exit status.
func (a *app) fail(ctx context.Context, cmd *cobra.Command, args []string, err error) int {
	jsonOut := a.jsonOut || wantsJSON(args)
	var re *runError
	if !errors.As(err, &re) {
		msg := err.Error()
		if jsonOut {
			writeJSONError(a.env.Stderr, &kin.Error{Code: kin.ECodeInvalid, Message: msg})
		} else {
			path := "kin"
			if cmd != nil {
				path = cmd.CommandPath()
			}
			fmt.Fprintf(a.env.Stderr, "kin: %s\nRun '%s --help' for usage.\n", msg, path)
		}
		return ExitUsage
	}
	err = re.err
	status := ExitError
	var es *exitStatus
	if errors.As(err, &es) {
		if es.err == nil {
			return es.code
		}
		status, err = es.code, es.err
	}
	var out kin.Error
	var ke *kin.Error
	switch {
	case errors.As(err, &ke):
		out = *ke
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		out = kin.Error{Code: kin.ECodeUnavailable, Message: "interrupted"}
	default:
		out = kin.Error{Code: kin.ECodeInternal, Message: err.Error()}
	}
	switch {
	case jsonOut:
		writeJSONError(a.env.Stderr, &out)
	case out.RetryAfter > 0:
		// rate_limited: when the next one would be allowed.
		fmt.Fprintf(a.env.Stderr, "kin: %s (%s; retry after %.3gs)\n", out.Message, out.Code, out.RetryAfter)
	default:
		fmt.Fprintf(a.env.Stderr, "kin: %s (%s)\n", out.Message, out.Code)
	}
	return status
}

// writeJSONError writes e as the API sends it (retry_after included).
func writeJSONError(w io.Writer, e *kin.Error) {
	b, _ := json.Marshal(e)
	fmt.Fprintf(w, "%s\n", b)
}

// wantsJSON finds --json in a command line that cobra could not parse, so
// that even usage errors come as JSON when JSON was asked for.
func wantsJSON(args []string) bool {
	for _, s := range args {
		if s == "--" {
			return false
		}
		if v, ok := strings.CutPrefix(s, "--json"); ok {
			if v == "" {
				return true
			}
			if b, err := strconv.ParseBool(strings.TrimPrefix(v, "=")); err == nil && strings.HasPrefix(v, "=") {
				return b
			}
		}
	}
	return false
}

// printJSON writes v as one indented JSON document on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// idArgs accepts exactly one argument, an agent id (checked by the command,
// so that a bad id is reported as such).
func idArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErrorf("%s takes one agent ID (e.g. %s 7), not %d arguments", cmd.CommandPath(), cmd.CommandPath(), len(args))
	}
	return nil
}

// agentArg reads an agent argument: an id (7 or #7), or the name of a live
// agent, which the daemon resolves.
func (a *app) agentArg(ctx context.Context, s string) (kin.AgentID, error) {
	if id, err := kin.ParseAgentID(s); err == nil {
		return id, nil
	}
	if !isNameArg(s) {
		return 0, badIDArg(s)
	}
	id, err := a.agentByName(ctx, s)
	if err != nil {
		return 0, kin.Errorf(kin.ErrorCodeOf(err), "argument ID %q is not an agent id, and %s", s, kin.ErrorMessageOf(err))
	}
	return id, nil
}

// agentByName is the id of the live agent called name, else of the latest
// agent that was. A name no agent ever had is invalid input (exit 1, code
// invalid), as a bad id is.
func (a *app) agentByName(ctx context.Context, name string) (kin.AgentID, error) {
	svc, err := a.service()
	if err != nil {
		return 0, err
	}
	list, err := svc.Agents(ctx, kin.AgentFilter{Name: name})
	if err != nil {
		return 0, err
	}
	for _, ag := range list {
		if ag.Name == name && ag.Status != kin.StatusTerminated {
			return ag.ID, nil
		}
	}
	if len(list) > 0 {
		// No live agent holds the name: the latest that held it, so that
		// kin wait rev-123 and kin result rev-123 work once it has ended.
		return list[len(list)-1].ID, nil
	}
	return 0, kin.Errorf(kin.ECodeInvalid, "no live agent is named %q: give an id such as 7 or #7, or a live agent's name (\"kin ps\" lists them)", name)
}

// optionalAgentArg is the agent of a command whose agent may be left out (0).
func (a *app) optionalAgentArg(ctx context.Context, args []string) (kin.AgentID, error) {
	if len(args) == 0 {
		return 0, nil
	}
	return a.agentArg(ctx, args[0])
}

func badIDArg(s string) error {
	return kin.Errorf(kin.ECodeInvalid, "argument ID %q is not an agent id: use a positive integer such as 7 or #7, or a live agent's name", s)
}

// nonNil makes empty lists print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
