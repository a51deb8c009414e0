package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestSpawn(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--name", "worker", "--responsible", "ops", "--grace", "2s", "--restart", "never",
		"--env", "GREETING=hello", "--", "sh", "-c", `echo "$GREETING from $KIN_AGENT_NAME #$KIN_AGENT_ID"; echo oops >&2`)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "worker" || a.Responsible != "ops" || a.Parent != 0 || a.CreatedBy != kin.Operator ||
		a.Command[0] != sh || len(a.Command) != 3 || a.Grace != kin.Duration(2e9) || a.Restart != kin.RestartNever {
		t.Errorf("agent = %+v", a)
	}
	ended := waitEnded(t, d, a.ID)
	if ended.Exit == nil || *ended.Exit != (kin.Exit{Code: 0, Known: true}) || ended.EndReason != "exited" {
		t.Errorf("ended = %+v, exit %v", ended, ended.Exit)
	}
	if got, want := logsOf(t, d, a.ID), "hello from worker #"+a.ID.String()+"\noops\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}

	// Text: the agent as kin show prints it, with its process.
	r := kinAt(t, d, "spawn", "--name", "napper", "--responsible", "ops", "sleep", "600")
	wantOK(t, r)
	for _, want := range []string{"Name            napper", "PID             ", "Command         " + mustLookPath(t, "sleep") + " 600", "Grace           5s", "Restart         never"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	return p
}

// TestSpawnDirAndArgs: the process starts in the CLI's directory unless
// --dir says otherwise (relative to the CLI's), and everything after
// COMMAND is its own, flags too.
func TestSpawnDirAndArgs(t *testing.T) {
	d := kintest.StartDaemon(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
	}{
		{"", wd},
		{"testdata", filepath.Join(wd, "testdata")},
		{os.TempDir(), os.TempDir()},
	} {
		args := []string{"--responsible", "ops"}
		if c.dir != "" {
			args = append(args, "--dir", c.dir)
		}
		a := spawnJSON(t, d, append(args, "sh", "-c", "pwd -P")...)
		waitEnded(t, d, a.ID)
		want, err := filepath.EvalSymlinks(c.want)
		if err != nil {
			t.Fatal(err)
		}
		if got := logsOf(t, d, a.ID); got != want+"\n" {
			t.Errorf("--dir %q: the process ran in %q, want %q", c.dir, got, want)
		}
	}
	a := spawnJSON(t, d, "--responsible", "ops", "sh", "-c", `printf '%s|' "$@"`, "sh", "--json", "-v", "--", "a b")
	waitEnded(t, d, a.ID)
	if got := logsOf(t, d, a.ID); got != "--json|-v|--|a b|" {
		t.Errorf("arguments arrived as %q", got)
	}
	if !strings.HasPrefix(a.Name, "sh-") {
		t.Errorf("a name made from the command: %q", a.Name)
	}
}

func TestSpawnErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantUsage(t, kinAt(t, d, "spawn", "--name", "x", "--responsible", "ops"), "needs the COMMAND")
	wantUsage(t, kinAt(t, d, "spawn", "--name", "x", "--responsible", "ops", "--"), "needs the COMMAND")
	wantUsage(t, kinAt(t, d, "spawn", "--env", "NOEQUALS", "--responsible", "ops", "true"), "--env", "NOEQUALS")
	wantUsage(t, kinAt(t, d, "spawn", "--env", "=x", "--responsible", "ops", "true"), "--env")
	wantUsage(t, kinAt(t, d, "spawn", "--grace", "-1s", "--responsible", "ops", "true"), "--grace")
	wantUsage(t, kinAt(t, d, "spawn", "--grace", "soon", "--responsible", "ops", "true"), "--grace")
	wantUsage(t, kinAt(t, d, "spawn", "--restart", "sometimes", "--responsible", "ops", "true"), "--restart", "on-failure")
	wantUsage(t, kinAt(t, d, "spawn", "--life", "forever", "--responsible", "ops", "true"), "--life")
	wantUsage(t, kinAt(t, d, "spawn", "--bogus", "true"), "--bogus")
	before := lastEvent(t, d)

	msg := wantError(t, kinAt(t, d, "spawn", "--json", "--responsible", "ops", "--env", "KIN_AGENT_ID=1", "true"), kin.ECodeInvalid)
	if !strings.Contains(msg, "KIN_AGENT_ID") {
		t.Errorf("message %q does not name the variable", msg)
	}
	wantError(t, kinAt(t, d, "spawn", "--json", "--name", "no spaces", "--responsible", "ops", "true"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "spawn", "--json", "--grace", "2h", "--responsible", "ops", "true"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "spawn", "--json", "--parent", "99", "true"), kin.ECodeParentNotFound)
	if after := lastEvent(t, d); after != before+1 { // the spawn.rejected event of the missing parent
		t.Errorf("bad spawns changed the log: last event %d -> %d", before, after)
	}

	// A program that does not exist is registered, then fails to start.
	msg = wantError(t, kinAt(t, d, "spawn", "--json", "--name", "ghost", "--responsible", "ops", "/no/such/program"), kin.ECodeInvalid)
	if !strings.Contains(msg, "could not start") {
		t.Errorf("message %q", msg)
	}
}

func TestResolveCommand(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "kin-test-agent")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, c := range []struct{ in, want string }{
		{"kin-test-agent", prog},
		{"/bin/sh", "/bin/sh"},
		{"./kin-test-agent", "./kin-test-agent"},
		{"bin/tool", "bin/tool"},
		{"no-such-program", "no-such-program"},
		{"", ""},
	} {
		if got := resolveCommand(c.in); got != c.want {
			t.Errorf("resolveCommand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	t.Setenv("PATH", ".")
	t.Chdir(dir)
	if got := resolveCommand("kin-test-agent"); got != "kin-test-agent" {
		t.Errorf("a program found through a relative PATH entry resolved to %q; it is left as given", got)
	}
}

// TestSpawnPolicy: --policy is parsed here and sent as the agent's policy;
// --stage as its stage; --template with its fragment's role, stage and
// policy merged under the flags, and --set as its vars.
func TestSpawnPolicy(t *testing.T) {
	dir := writeFiles(t, "policy.yaml", policyYAML, "policy.json", `{"tools":{"allow":["read"]}}`)
	tpl := writeTemplate(t, fragmentJSON)
	svc := &fakeService{}

	wantOK(t, runFake(t, svc, "", "spawn", "--json", "--parent", "7", "--policy", filepath.Join(dir, "policy.json"), "--stage", "review", "true"))
	got := svc.spawns[0].RegisterRequest
	if got.Stage != "review" || got.Template != nil || !reflect.DeepEqual(got.Policy, &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read"}}}) {
		t.Errorf("spawn with --policy and --stage: %+v, policy %+v", got, got.Policy)
	}

	wantOK(t, runFake(t, svc, "", "spawn", "--json", "--parent", "7", "--name", "writer-2", "--template", tpl,
		"--set", "TOPIC=lineage", "--policy", filepath.Join(dir, "policy.yaml"), "true"))
	got = svc.spawns[1].RegisterRequest
	want := &kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "edit"}, Deny: []string{"web_*"}}, // --policy's deny wins
		Mounts: map[string]kin.Mode{"/work": kin.ModeRO},
		Budget: &kin.Budget{MaxTokens: ptr(int64(5000))},
	}
	if got.Role != "writer" || got.Stage != "dev" || !reflect.DeepEqual(got.Policy, want) {
		t.Errorf("spawn with --template: role %q stage %q policy %+v", got.Role, got.Stage, got.Policy)
	}
	if want := (&kin.Template{Files: templateFiles(), Vars: map[string]string{"TOPIC": "lineage"}}); !reflect.DeepEqual(got.Template, want) {
		t.Errorf("template %+v, want %+v", got.Template, want)
	}

	// The flags win over the fragment's role and stage; without --policy
	// the fragment's policy is sent as it is.
	wantOK(t, runFake(t, svc, "", "spawn", "--json", "--parent", "7", "--template", tpl, "--role", "editor", "--stage", "prod", "true"))
	got = svc.spawns[2].RegisterRequest
	if got.Role != "editor" || got.Stage != "prod" || got.Policy == nil || got.Policy.Budget != nil || got.Policy.Tools.Deny[0] != "exec" {
		t.Errorf("flags over the fragment: role %q stage %q policy %+v", got.Role, got.Stage, got.Policy)
	}
	if got.Template.Vars != nil {
		t.Errorf("vars without --set: %v", got.Template.Vars)
	}
}

func TestSpawnPolicyErrors(t *testing.T) {
	dir := writeFiles(t,
		"unknown.yaml", "tools:\n  allow: [read]\nnetwork: false\n",
		"relative.json", `{"mounts":{"work":"rw"}}`,
		"broken.json", `{"tools":`,
	)
	tpl := writeTemplate(t, fragmentJSON)
	badTpl := writeTemplate(t, `{"role":"writer","colour":"blue"}`)
	svc := &fakeService{}
	spawn := func(args ...string) result {
		t.Helper()
		return runFake(t, svc, "", append(append([]string{"spawn", "--json", "--parent", "7"}, args...), "true")...)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--policy", filepath.Join(dir, "unknown.yaml")}, []string{"--policy " + filepath.Join(dir, "unknown.yaml"), `unknown key "network"`}},
		{[]string{"--policy", filepath.Join(dir, "relative.json")}, []string{"relative.json", `"work" is not an absolute path`}},
		{[]string{"--policy", filepath.Join(dir, "broken.json")}, []string{"broken.json"}},
		{[]string{"--policy", filepath.Join(dir, "missing.json")}, []string{"--policy", "missing.json", "no such file"}},
		{[]string{"--policy", dir}, []string{"is a directory"}},
		{[]string{"--policy", ""}, []string{"--policy needs a file name"}},
		{[]string{"--template", filepath.Join(dir, "nowhere")}, []string{"--template " + filepath.Join(dir, "nowhere"), "no such file"}},
		{[]string{"--template", badTpl}, []string{"--template " + badTpl, "colour"}},
		{[]string{"--template", ""}, []string{"--template needs a directory"}},
	} {
		msg := wantError(t, spawn(tc.args...), kin.ECodeInvalid)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: message %q does not say %q", tc.args, msg, w)
			}
		}
	}
	wantUsage(t, spawn("--set", "TOPIC=x"), "--set", "needs --template DIR")
	wantUsage(t, spawn("--template", tpl, "--set", "topic=x"), "--set", "the name", "topic", "upper-case")
	wantUsage(t, spawn("--template", tpl, "--set", "TOPIC"), "--set", "not K=V")
	wantUsage(t, spawn("--template", tpl, "--set", "A=1", "--set", "A=2"), "--set A is given twice")
	wantUsage(t, spawn("--stage", ""), "--stage needs a stage name")
	if len(svc.spawns) != 0 {
		t.Errorf("bad files reached the service: %+v", svc.spawns)
	}
}

// TestSpawnWithNoFlags: the first thing anyone types works. The root's
// responsible party is the operator's login name, shown by kin show.
func TestSpawnWithNoFlags(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "spawn", "--", "sleep", "1")
	wantOK(t, r)
	var a kin.Agent
	if err := json.Unmarshal([]byte(kinAt(t, d, "show", "--json", firstID(t, r.stdout)).stdout), &a); err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if a.Responsible != u.Username || a.Parent != 0 {
		t.Errorf("responsible = %q, parent %d; want %q, a root", a.Responsible, a.Parent, u.Username)
	}
	if out := kinAt(t, d, "show", a.ID.String()).stdout; !strings.Contains(out, u.Username) {
		t.Errorf("kin show does not show the responsible %q:\n%s", u.Username, out)
	}
	waitEnded(t, d, a.ID)
}

// TestDefaultResponsible: kin serve --default-responsible names who answers
// for roots registered without --responsible; --responsible still wins.
func TestDefaultResponsible(t *testing.T) {
	d := kintest.StartDaemon(t, func(c *daemon.Config) { c.DefaultResponsible = "Ops Team" })
	var a kin.Agent
	r := kinAt(t, d, "register", "--name", "lead", "--json")
	wantOK(t, r)
	decodeOne(t, r.stdout, &a)
	if a.Responsible != "Ops Team" {
		t.Errorf("responsible = %q, want the daemon's default", a.Responsible)
	}
	r = kinAt(t, d, "register", "--name", "other", "--responsible", "Dr. Schmidt", "--json")
	wantOK(t, r)
	decodeOne(t, r.stdout, &a)
	if a.Responsible != "Dr. Schmidt" {
		t.Errorf("responsible = %q, want the one given", a.Responsible)
	}
}

// firstID is the id in kin spawn's text output ("ID 7" on its first line).
func firstID(t *testing.T, out string) string {
	t.Helper()
	for _, f := range strings.Fields(out) {
		if _, err := kin.ParseAgentID(f); err == nil {
			return f
		}
	}
	t.Fatalf("no id in %q", out)
	return ""
}

// TestSpawnMissingProgram: the error names the program that is missing.
func TestSpawnMissingProgram(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "spawn", "--", "/nonexistent/prog")
	if r.code != ExitError || !strings.Contains(r.stderr, "program /nonexistent/prog") || !strings.Contains(r.stderr, "no such file or directory") {
		t.Errorf("exit %d, stderr %q; want the path named", r.code, r.stderr)
	}
}

// TestSpawnHost: --host goes in the request; the command and the directory
// are left to the placed host (its kin serve's PATH, the agent's session
// there); a bad host name is a usage error before anything is sent.
func TestSpawnHost(t *testing.T) {
	svc := &fakeService{}
	r := runFake(t, svc, "", "spawn", "--host", "gpu-2", "--responsible", "ops", "sleep", "60")
	wantOK(t, r)
	if len(svc.spawns) != 1 {
		t.Fatalf("spawns = %d", len(svc.spawns))
	}
	got := svc.spawns[0]
	if got.Host != "gpu-2" || got.Command[0] != "sleep" || got.Dir != "" {
		t.Errorf("request = host %q, command %q, dir %q; want gpu-2, sleep (unresolved), no dir", got.Host, got.Command, got.Dir)
	}
	r = runFake(t, svc, "", "spawn", "--host", "gpu-2", "--dir", "/srv/agents", "--responsible", "ops", "sleep", "60")
	wantOK(t, r)
	if got := svc.spawns[1]; got.Dir != "/srv/agents" {
		t.Errorf("dir = %q, want /srv/agents", got.Dir)
	}
	// Without --host, as before: the command from this PATH, this directory.
	r = runFake(t, svc, "", "spawn", "--responsible", "ops", "sleep", "60")
	wantOK(t, r)
	if got := svc.spawns[2]; got.Host != "" || got.Command[0] != mustLookPath(t, "sleep") || got.Dir == "" {
		t.Errorf("request without --host = %+v", got)
	}
	for _, bad := range []string{"-a", "a b", "x/y", strings.Repeat("h", 64)} {
		r = runFake(t, svc, "", "spawn", "--host="+bad, "--responsible", "ops", "sleep", "60")
		if r.code != 2 || !strings.Contains(r.stderr, "--host") {
			t.Errorf("--host %q: exit %d, stderr %q; want a usage error naming --host", bad, r.code, r.stderr)
		}
	}
	if len(svc.spawns) != 3 {
		t.Errorf("a bad --host reached the daemon: %d spawns", len(svc.spawns))
	}
}
