package daemon_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Seed 001's "Permission Attenuation" and seed 003's checklist, against a
// real daemon: real processes under real Landlock, a real store. The pure
// rules are tested hardest in internal/policy; these show the daemon
// applies them.

// sh spawns /bin/sh -c script as an agent with the given request fields.
func sh(t *testing.T, d *kintest.Daemon, name string, parent kin.AgentID, pol *kin.Policy, script string) (*kin.Agent, error) {
	t.Helper()
	req := kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent, Policy: pol},
		Command: []string{"/bin/sh", "-c", script}}
	if parent == 0 {
		req.Responsible = "Dr. Schmidt"
	}
	g := kin.Duration(0)
	req.Grace = &g
	return d.Client.Spawn(ctx, req)
}

// ended waits for an agent's process to end and returns its output.
func ended(t *testing.T, d *kintest.Daemon, id kin.AgentID) (*kin.Agent, string) {
	t.Helper()
	var a *kin.Agent
	kintest.WaitFor(t, 20*time.Second, "agent to end", func() bool {
		a, _ = d.Client.Agent(ctx, id)
		return a != nil && a.State.Terminal()
	})
	var out strings.Builder
	if err := d.Client.Logs(ctx, kin.LogsRequest{ID: id}, func(b []byte) error { out.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	return a, out.String()
}

// folder makes a folder any uid may write (so that only Landlock can say
// no) with a file in it.
func folder(t *testing.T) string {
	t.Helper()
	dir := kintest.SharedDir(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("secret contents\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	return dir
}

const writeProbe = `cat "$D/f" && echo READ || echo NOREAD; ls "$D" >/dev/null 2>&1 && echo LISTED || echo NOLIST; echo x > "$D/new" 2>/dev/null && echo WROTE || echo NOWRITE`

// probe prints what an agent could do to dir; the kernel's messages go
// to /dev/null.
func probe(dir string) string { return "exec 2>/dev/null; D=" + dir + "; " + writeProbe }

func TestMountROCanBeReadButNotWritten(t *testing.T) {
	d := kintest.StartDaemon(t)
	dir := folder(t)
	a, err := sh(t, d, "reader", 0, &kin.Policy{Mounts: map[string]kin.Mode{dir: kin.ModeRO}}, probe(dir))
	if err != nil {
		t.Fatal(err)
	}
	_, out := ended(t, d, a.ID)
	if !strings.Contains(out, "READ\n") || !strings.Contains(out, "secret contents") || !strings.Contains(out, "NOWRITE") {
		t.Fatalf("an agent with %s ro: output %q, want it read the file and could not write", dir, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ro folder was written: %v", err)
	}
}

func TestHiddenMountCannotBeReadOrListed(t *testing.T) {
	d := kintest.StartDaemon(t)
	visible, hidden := folder(t), folder(t)
	a, err := sh(t, d, "reader", 0, &kin.Policy{Mounts: map[string]kin.Mode{visible: kin.ModeRW}}, probe(hidden)+"; "+probe(visible))
	if err != nil {
		t.Fatal(err)
	}
	_, out := ended(t, d, a.ID)
	lines := strings.Fields(out)
	if !strings.HasPrefix(out, "NOREAD\nNOLIST\nNOWRITE\n") {
		t.Fatalf("the hidden folder: output %q, want NOREAD NOLIST NOWRITE first", out)
	}
	if !strings.Contains(out, "WROTE") || lines[len(lines)-1] != "WROTE" {
		t.Fatalf("the rw folder: output %q, want it written", out)
	}
}

// registerWith registers an agent (no process) with a policy and stage.
func registerWith(t *testing.T, d *kintest.Daemon, name string, parent kin.AgentID, stage string, pol *kin.Policy) *kin.Agent {
	t.Helper()
	req := kin.RegisterRequest{Name: name, Parent: parent, Stage: stage, Policy: pol}
	if parent == 0 {
		req.Responsible = "Dr. Schmidt"
	}
	a, err := d.Client.Register(ctx, req)
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return a
}

func TestChildCannotRegainWhatItsParentLost(t *testing.T) {
	d := kintest.StartDaemon(t)
	ro, hidden := folder(t), folder(t)
	parent := registerWith(t, d, "parent", 0, "", &kin.Policy{Mounts: map[string]kin.Mode{ro: kin.ModeRO}})

	for _, c := range []struct {
		name string
		pol  *kin.Policy
		path string
	}{
		{"ro-to-rw", &kin.Policy{Mounts: map[string]kin.Mode{ro: kin.ModeRW}}, ro},
		{"hidden-to-visible", &kin.Policy{Mounts: map[string]kin.Mode{hidden: kin.ModeRO}}, hidden},
	} {
		_, err := sh(t, d, c.name, parent.ID, c.pol, "true")
		var esc *kin.EscalationError
		if !errors.As(err, &esc) || kin.ErrorCodeOf(err) != kin.ECodeEscalation || len(esc.Excess) != 1 ||
			esc.Excess[0].Field != "mounts" || !strings.Contains(esc.Excess[0].Asked, c.path) {
			t.Errorf("%s: %v (%+v), want permission_escalation naming %s", c.name, err, esc, c.path)
		}
	}
	// rw may become ro, visible may become hidden: and what it inherits
	// the kernel enforces.
	kid, err := sh(t, d, "kid", parent.ID, nil, probe(ro)+"; "+probe(hidden))
	if err != nil {
		t.Fatal(err)
	}
	_, out := ended(t, d, kid.ID)
	if out != "secret contents\nREAD\nLISTED\nNOWRITE\nNOREAD\nNOLIST\nNOWRITE\n" {
		t.Fatalf("the child inheriting ro and hidden: output %q", out)
	}
	all, _ := d.Client.Agents(ctx, kin.AgentFilter{})
	if len(all) != 2 {
		t.Fatalf("refused spawns registered agents: %d agents", len(all))
	}
}

func TestEscalationListsEveryItem(t *testing.T) {
	d := kintest.StartDaemon(t)
	max := int64(100)
	parent := registerWith(t, d, "parent", 0, "", &kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "web_search"}},
		Groups: []uint32{},
		Budget: &kin.Budget{MaxTokens: &max},
	})
	more := int64(500)
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "greedy", Parent: parent.ID, Policy: &kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "web_*", "exec"}},
		Groups: []uint32{27},
		Budget: &kin.Budget{MaxTokens: &more},
	}})
	var esc *kin.EscalationError
	if !errors.As(err, &esc) {
		t.Fatalf("greedy child: %v, want an escalation", err)
	}
	fields := map[string]bool{}
	for _, e := range esc.Excess {
		fields[strings.SplitN(e.Field, ".", 2)[0]] = true
		if e.Asked == "" || e.Parent == "" {
			t.Errorf("excess %+v does not say what was asked and what the parent has", e)
		}
	}
	for _, f := range []string{"tools", "groups", "budget"} {
		if !fields[f] {
			t.Errorf("escalation %v lacks %s", esc.Excess, f)
		}
	}
}

// Seed 003's testing checklist, one test a line.

func TestParentMetadataIsStoredWithoutBehaviourChange(t *testing.T) {
	d := kintest.StartDaemon(t)
	p := registerWith(t, d, "mano", 0, "", nil)
	c := registerWith(t, d, "nova", p.ID, "restricted", nil)
	got, _ := d.Client.Agent(ctx, c.ID)
	if got.Parent != p.ID || got.Stage != "restricted" || got.CreatedBy != kin.Operator || got.CreatedAt.IsZero() {
		t.Fatalf("nova = %+v: parent, stage, creator and time must be stored", got)
	}
	pol, err := d.Client.Policy(ctx, p.ID)
	if err != nil || pol.Stage != "" || pol.Requested != nil || len(pol.Effective.Layers) != 0 {
		t.Fatalf("mano's policy = %+v, %v: a parent without policy has none", pol, err)
	}
}

func authorize(t *testing.T, d *kintest.Daemon, id kin.AgentID, tool string) kin.Decision {
	t.Helper()
	dec, err := d.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: id, Tool: tool})
	if err != nil {
		t.Fatalf("authorize %s: %v", tool, err)
	}
	return *dec
}

func TestPresetRestrictedBlocksExecWriteEdit(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := registerWith(t, d, "student", 0, "restricted", nil)
	for _, tool := range []string{"exec", "write", "edit"} {
		if dec := authorize(t, d, a.ID, tool); dec.Allowed || dec.Preset != "restricted" || !strings.Contains(dec.Reason, "restricted") {
			t.Errorf("restricted %s: %+v, want denied by the preset", tool, dec)
		}
	}
	if dec := authorize(t, d, a.ID, "read"); !dec.Allowed {
		t.Errorf("restricted read: %+v", dec)
	}
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventToolDenied}})
	if len(evs) != 3 {
		t.Errorf("%d tool.denied events, want 3", len(evs))
	}
}

func TestPresetSupervisedAllowsSandboxedExec(t *testing.T) {
	d := kintest.StartDaemon(t)
	dir := folder(t)
	req := kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "trainee", Responsible: "r", Stage: "supervised",
		Policy: &kin.Policy{Mounts: map[string]kin.Mode{dir: kin.ModeRO}}}, Command: []string{"/bin/sh", "-c", probe(dir)}}
	a, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if dec := authorize(t, d, a.ID, "exec"); !dec.Allowed {
		t.Errorf("supervised exec: %+v", dec)
	}
	if dec := authorize(t, d, a.ID, "gateway"); dec.Allowed {
		t.Errorf("supervised gateway: %+v", dec)
	}
	if _, out := ended(t, d, a.ID); !strings.Contains(out, "NOWRITE") {
		t.Fatalf("the supervised agent's exec is sandboxed: output %q", out)
	}
}

func TestPresetFullHasNoRestrictions(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := registerWith(t, d, "graduate", 0, "full", nil)
	for _, tool := range []string{"exec", "write", "gateway", "cron", "mcp__github__create_issue"} {
		if dec := authorize(t, d, a.ID, tool); !dec.Allowed {
			t.Errorf("full %s: %+v", tool, dec)
		}
	}
}

func TestPresetCannotGrantWhatTheGlobalDenyListBlocks(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(cfg, []byte("global_deny: [gateway]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, func(c *daemonConfig) { c.PolicyConfig = cfg })
	a := registerWith(t, d, "graduate", 0, "full", nil)
	if dec := authorize(t, d, a.ID, "gateway"); dec.Allowed || dec.Source != kin.SourceGlobal {
		t.Fatalf("full under a global deny of gateway: %+v", dec)
	}
}

func TestCreateFromTemplateProvisionsTheWorkspace(t *testing.T) {
	d := kintest.StartDaemon(t)
	p := registerWith(t, d, "mano", 0, "", nil)
	tmpl := &kin.Template{Files: []kin.TemplateFile{
		{Path: "SOUL.md", Data: "I am {AGENT_NAME}, made by {PARENT_A} for {RESPONSIBLE}, a {ROLE} who likes {COLOUR}.\n"},
		{Path: "memory", Dir: true},
		{Path: "memory/{AGENT_NAME}.md", Data: `{"json": "braces stay"}`},
	}, Vars: map[string]string{"COLOUR": "blue"}}
	a, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "nova", Role: "student", Parent: p.ID, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(d.Home, "ctx", "home", uidOf(d, a.ID), "agent", "nova", "workspace")
	if got := readFile(t, filepath.Join(ws, "SOUL.md")); got != "I am nova, made by mano for Dr. Schmidt, a student who likes blue.\n" {
		t.Errorf("SOUL.md = %q", got)
	}
	if got := readFile(t, filepath.Join(ws, "memory", "nova.md")); got != `{"json": "braces stay"}` {
		t.Errorf("memory/nova.md = %q", got)
	}
	st, err := os.Stat(filepath.Join(ws, "SOUL.md"))
	if err != nil || ownerUID(st) != uidOf(d, a.ID) {
		t.Errorf("SOUL.md is not the agent's: %v", err)
	}
	// An unknown placeholder is refused before anything is registered.
	bad := &kin.Template{Files: []kin.TemplateFile{{Path: "x.md", Data: "{NAME_OF_CAT}"}}}
	if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "bad", Parent: p.ID, Template: bad}); kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "NAME_OF_CAT") {
		t.Fatalf("unknown placeholder: %v", err)
	}
	if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "evil", Parent: p.ID, Template: &kin.Template{Files: []kin.TemplateFile{{Path: "../escape", Data: "x"}}}}); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
		t.Fatalf("a ../ path: %v", err)
	}
	if all, _ := d.Client.Agents(ctx, kin.AgentFilter{}); len(all) != 2 {
		t.Fatalf("refused templates registered agents: %d", len(all))
	}
}

// visibilityPair is seed 003's example: nova reads mano's memory.
func visibilityPair(t *testing.T, d *kintest.Daemon, readerScope, ownerScope []string, ownerConsents bool) (reader, owner *kin.Agent) {
	t.Helper()
	ov := &kin.Visibility{Scope: ownerScope}
	if ownerConsents {
		ov.ReadableTo = []string{"nova", "nova2"}
	}
	tmpl := &kin.Template{Files: []kin.TemplateFile{
		{Path: "SOUL.md", Data: "mano's soul\n"}, {Path: "SECRET.md", Data: "keys\n"},
		{Path: "memory", Dir: true}, {Path: "memory/notes.md", Data: "remember the milk\n"},
	}}
	owner, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "mano", Responsible: "r", Policy: &kin.Policy{Visibility: ov}, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	reader = registerWith(t, d, "nova", 0, "", &kin.Policy{Visibility: &kin.Visibility{ReadFrom: []string{"mano"}, Scope: readerScope}})
	return reader, owner
}

func TestVisibilityAllowsReadsWithinScope(t *testing.T) {
	d := kintest.StartDaemon(t)
	reader, _ := visibilityPair(t, d, []string{"memory/**", "SOUL.md"}, []string{"memory/**", "SOUL.md"}, true)
	for path, want := range map[string]string{"memory/notes.md": "remember the milk\n", "SOUL.md": "mano's soul\n"} {
		b, err := d.Client.ReadFile(ctx, kin.ReadRequest{Reader: reader.ID, Owner: "mano", Path: path})
		if err != nil || string(b) != want {
			t.Errorf("read mano:%s = %q, %v", path, b, err)
		}
	}
}

func TestVisibilityDeniesOutOfScopeReads(t *testing.T) {
	d := kintest.StartDaemon(t)
	reader, _ := visibilityPair(t, d, []string{"memory/**", "SECRET.md"}, []string{"memory/**"}, true)
	for _, path := range []string{"SECRET.md", "memory/../SECRET.md", "/etc/passwd", "SOUL.md"} {
		if b, err := d.Client.ReadFile(ctx, kin.ReadRequest{Reader: reader.ID, Owner: "mano", Path: path}); err == nil {
			t.Errorf("read mano:%s = %q, want it denied", path, b)
		}
	}
	// One-sided consent is no consent.
	d2 := kintest.StartDaemon(t)
	reader2, _ := visibilityPair(t, d2, []string{"memory/**"}, []string{"memory/**"}, false)
	if _, err := d2.Client.ReadFile(ctx, kin.ReadRequest{Reader: reader2.ID, Owner: "mano", Path: "memory/notes.md"}); kin.ErrorCodeOf(err) != kin.ECodeDenied {
		t.Errorf("read without the owner's consent: %v, want permission_denied", err)
	}
}

func TestVisibilityDeniesWrites(t *testing.T) {
	d := kintest.StartDaemon(t)
	_, owner := visibilityPair(t, d, []string{"memory/**"}, []string{"memory/**"}, true)
	ws := filepath.Join(d.Home, "ctx", "home", uidOf(d, owner.ID), "agent", "mano", "workspace")
	// A sandboxed reader's processes get read-only access to the consented
	// paths: nothing it runs can write there (and kin offers no write).
	req := kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "nova2", Responsible: "r", Policy: &kin.Policy{
		Mounts:     map[string]kin.Mode{"/nonexistent-kin-test": kin.ModeRO},
		Visibility: &kin.Visibility{ReadFrom: []string{"mano"}, Scope: []string{"memory/**"}},
	}}, Command: []string{"/bin/sh", "-c", `exec 2>/dev/null; echo x > "` + ws + `/memory/notes.md" 2>/dev/null && echo WROTE || echo NOWRITE; echo y > "` + ws + `/memory/new" 2>/dev/null && echo MADE || echo NOMAKE`}}
	a, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, out := ended(t, d, a.ID); out != "NOWRITE\nNOMAKE\n" {
		t.Fatalf("the reader writing the owner's workspace: %q", out)
	}
	if got := readFile(t, filepath.Join(ws, "memory", "notes.md")); got != "remember the milk\n" {
		t.Fatalf("notes.md changed: %q", got)
	}
}

func TestSendToAnAgentReachesItsMainSession(t *testing.T) {
	d := kintest.StartDaemon(t)
	a, err := sh(t, d, "nova", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Client.Send(ctx, kin.SendRequest{To: "nova", Text: "How are you?"})
	if err != nil || m.Session != "default" || m.To != a.ID {
		t.Fatalf("send = %+v, %v", m, err)
	}
	msgs := filepath.Join(d.Home, "ctx", "home", uidOf(d, a.ID), "agent", "nova", "session", "default", "messages.jsonl")
	kintest.WaitFor(t, 10*time.Second, "the message in messages.jsonl", func() bool {
		b, _ := os.ReadFile(msgs)
		return strings.Contains(string(b), `"text":"How are you?"`)
	})
	var got []kin.Message
	if err := d.Client.Inbox(ctx, kin.InboxRequest{Agent: a.ID}, func(m kin.Message) error { got = append(got, m); return nil }); err != nil || len(got) != 1 || got[0].Text != "How are you?" {
		t.Fatalf("inbox = %+v, %v", got, err)
	}
	ev, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentMessage}})
	if len(ev) != 1 {
		t.Fatalf("%d agent.message events, want 1", len(ev))
	}
}

func TestSendToAnExplicitSessionStillWorks(t *testing.T) {
	d := kintest.StartDaemon(t)
	a, err := sh(t, d, "nova", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := d.Client.Send(ctx, kin.SendRequest{To: a.ID.String(), Session: "default", Text: "by key"}); err != nil || m.Session != "default" {
		t.Fatalf("send to session default: %+v, %v", m, err)
	}
	if _, err := d.Client.Send(ctx, kin.SendRequest{To: "nova", Session: "../x", Text: "x"}); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
		t.Fatalf("a bad session key: %v", err)
	}
}

func TestWithoutPoliciesNothingChanges(t *testing.T) {
	d := kintest.StartDaemon(t)
	a, err := sh(t, d, "plain", 0, nil, `echo "$0"; cat /proc/$$/cmdline | tr '\0' ' '`)
	if err != nil {
		t.Fatal(err)
	}
	_, out := ended(t, d, a.ID)
	if strings.Contains(out, "sandbox") {
		t.Fatalf("an agent without policy ran under the sandbox shim: %q", out)
	}
	if dec := authorize(t, d, a.ID, "anything_at_all"); !dec.Allowed {
		t.Fatalf("authorize without policy: %+v", dec)
	}
	pol, err := d.Client.Policy(ctx, a.ID)
	if err != nil || len(pol.Effective.Layers) != 0 || pol.Effective.Flat.Mounts != nil {
		t.Fatalf("policy = %+v, %v", pol, err)
	}
}

func TestBudgetOverspendStopsTheSubtreeAndKeepsPartialResults(t *testing.T) {
	d := kintest.StartDaemon(t)
	max := int64(1000)
	parent, err := sh(t, d, "lead", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	kid, err := sh(t, d, "worker", parent.ID, nil, `printf 'Summary:\nhalf done\n' > "$KIN_OUTPUT/result.md"; echo ok > "$KIN_OUTPUT/.started"; sleep 600`)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(d.Home, "ctx", "home", uidOf(d, kid.ID), "agent", "worker", "session", "default", "output")
	kintest.WaitFor(t, 10*time.Second, "the worker's partial result", func() bool {
		_, err := os.Stat(filepath.Join(out, ".started"))
		return err == nil
	})
	s, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: kid.ID, Tokens: 600})
	if err != nil || s.Exhausted != "" {
		t.Fatalf("within budget: %+v, %v", s, err)
	}
	if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: kid.ID, Tokens: 500}); err != nil {
		t.Fatal(err)
	}
	p, _ := ended(t, d, parent.ID)
	w, _ := ended(t, d, kid.ID)
	if p.EndReason != "budget_exhausted" || w.EndReason != "budget_exhausted" {
		t.Fatalf("end reasons: lead %q, worker %q, want budget_exhausted", p.EndReason, w.EndReason)
	}
	kept := filepath.Join(d.Home, "ctx", "home", uidOf(d, parent.ID), "agent", "lead", "session", "default", "context", "child", "worker", "result.md")
	if got := readFile(t, kept); got != "Summary:\nhalf done\n" {
		t.Fatalf("the partial result kept in the parent's session = %q", got)
	}
	pol, _ := d.Client.Policy(ctx, parent.ID)
	if pol.Spend.SubtreeTokens != 1100 || !strings.Contains(pol.Spend.Exhausted, "max_tokens") {
		t.Fatalf("the lead's spend = %+v", pol.Spend)
	}
	if evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventBudgetExhausted}}); len(evs) != 1 {
		t.Fatalf("%d budget.exhausted events", len(evs))
	}
	if dec := authorize(t, d, kid.ID, "read"); dec.Allowed {
		t.Fatalf("an exhausted subtree is still authorized: %+v", dec)
	}
}

func TestDeadlineStopsTheSubtree(t *testing.T) {
	d := kintest.StartDaemon(t)
	dl := kin.Duration(500 * time.Millisecond)
	a, err := sh(t, d, "hurry", 0, &kin.Policy{Budget: &kin.Budget{Deadline: &dl}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ended(t, d, a.ID); got.EndReason != "deadline" {
		t.Fatalf("end reason %q, want deadline", got.EndReason)
	}
}

func TestPromoteChangesToolsAtOnceNeverBeyondTheParent(t *testing.T) {
	d := kintest.StartDaemon(t)
	p := registerWith(t, d, "teacher", 0, "supervised", nil)
	c := registerWith(t, d, "student", p.ID, "restricted", nil)
	if authorize(t, d, c.ID, "exec").Allowed {
		t.Fatal("restricted student may exec")
	}
	if _, err := d.Client.Promote(ctx, kin.PromoteRequest{Agent: c.ID, Stage: "supervised"}); err != nil {
		t.Fatal(err)
	}
	if dec := authorize(t, d, c.ID, "exec"); !dec.Allowed {
		t.Fatalf("promoted student exec: %+v", dec)
	}
	var esc *kin.EscalationError
	if _, err := d.Client.Promote(ctx, kin.PromoteRequest{Agent: c.ID, Stage: "full"}); !errors.As(err, &esc) {
		t.Fatalf("promotion beyond the teacher's stage: %v", err)
	}
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentPromoted}})
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"to":"supervised"`) {
		t.Fatalf("promotion events = %v", evs)
	}
}

func TestExplainNamesTheRuleAndTheAncestor(t *testing.T) {
	d := kintest.StartDaemon(t)
	dir := folder(t)
	p := registerWith(t, d, "lead", 0, "restricted", &kin.Policy{Mounts: map[string]kin.Mode{dir: kin.ModeRO}})
	c := registerWith(t, d, "helper", p.ID, "", nil)
	ex, err := d.Client.Explain(ctx, kin.ExplainRequest{Agent: c.ID, Tool: "exec"})
	if err != nil || ex.Decision.Allowed || ex.Decision.Agent != p.ID || ex.Decision.Preset != "restricted" || ex.Decision.Rule == "" {
		t.Fatalf("explain exec = %+v, %v", ex, err)
	}
	ex, err = d.Client.Explain(ctx, kin.ExplainRequest{Agent: c.ID, Path: filepath.Join(dir, "f")})
	if err != nil || ex.Mode != kin.ModeRO || ex.Decision.Agent != p.ID || !strings.Contains(ex.Decision.Rule, dir) {
		t.Fatalf("explain path = %+v, %v", ex, err)
	}
}

type daemonConfig = daemon.Config

func ownerUID(st os.FileInfo) string {
	return strconv.Itoa(int(st.Sys().(*syscall.Stat_t).Uid))
}

// The global deny list binds every agent, so it is not something a parent
// "lacks": a child may ask for the supervised stage under it, and still
// cannot use what the list blocks.
func TestGlobalDenyIsNotAnEscalation(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(cfg, []byte(`{"global_deny": ["exec"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, func(c *daemonConfig) { c.PolicyConfig = cfg })
	p := registerWith(t, d, "lead", 0, "supervised", nil)
	c := registerWith(t, d, "helper", p.ID, "supervised", nil)
	if dec := authorize(t, d, c.ID, "exec"); dec.Allowed || dec.Source != kin.SourceGlobal {
		t.Fatalf("exec under a global deny: %+v", dec)
	}
	if dec := authorize(t, d, c.ID, "read"); !dec.Allowed {
		t.Fatalf("read: %+v", dec)
	}
}

func TestPolicyGroupsAndEnvReachTheProcess(t *testing.T) {
	d := kintest.StartDaemon(t)
	a, err := d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "grouped", Responsible: "r", Policy: &kin.Policy{Groups: []uint32{4242}, Env: []string{"TASK_*"}}},
		Command:         []string{"/bin/sh", "-c", `id -G; echo "task=$TASK_ID"`},
		Env:             []string{"TASK_ID=7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, out := ended(t, d, a.ID); !strings.Contains(out, " 4242") || !strings.Contains(out, "task=7") {
		t.Fatalf("output %q: want group 4242 and TASK_ID", out)
	}
	// A variable the policy does not let through is refused, before
	// anything is registered; so is a group the parent does not hold.
	holder := registerWith(t, d, "holder", 0, "", &kin.Policy{Groups: []uint32{4242}, Env: []string{"TASK_*"}})
	_, err = d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "leaky", Parent: holder.ID},
		Command:         []string{"/bin/true"}, Env: []string{"AWS_SECRET_ACCESS_KEY=x"},
	})
	var esc *kin.EscalationError
	if !errors.As(err, &esc) || esc.Excess[0].Field != "env" || esc.Excess[0].Asked != "AWS_SECRET_ACCESS_KEY" {
		t.Fatalf("passing a variable outside env: %v", err)
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "wheel", Parent: holder.ID, Policy: &kin.Policy{Groups: []uint32{4242, 10}}})
	if !errors.As(err, &esc) || esc.Excess[0].Field != "groups" {
		t.Fatalf("a group the parent lacks: %v", err)
	}
}

func TestMaxDescendantsCountsEverySpawnOfTheSubtree(t *testing.T) {
	d := kintest.StartDaemon(t)
	n := int64(2)
	p := registerWith(t, d, "lead", 0, "", &kin.Policy{Budget: &kin.Budget{MaxDescendants: &n}})
	c := registerWith(t, d, "one", p.ID, "", nil)
	registerWith(t, d, "two", c.ID, "", nil) // a grandchild counts too
	if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "three", Parent: p.ID}); kin.ErrorCodeOf(err) != kin.ECodeBudget {
		t.Fatalf("the third descendant: %v, want budget_exhausted", err)
	}
	pol, _ := d.Client.Policy(ctx, p.ID)
	if pol.Spend.SubtreeSpawns != 2 {
		t.Fatalf("spawns = %d, want 2", pol.Spend.SubtreeSpawns)
	}
}

// From inside an agent: kin authorize answers for the caller, and an agent
// may never promote itself.
func TestAgentAsksKinAboutItselfAndCannotPromoteItself(t *testing.T) {
	d := kintest.StartDaemon(t)
	out := outPath(t)
	a := spawnAgent(t, d.Client, "student", 0, "ask-kin", withEnv("KINTEST_OUT="+out), func(r *kin.SpawnRequest) { r.Stage = "restricted" })
	got := waitOut(t, out, "usage:")
	for _, want := range []string{"authorize read: true", "authorize exec: false", "promote self: forbidden", "usage: \n"} {
		if !strings.Contains(got+"\n", want) {
			t.Errorf("agent %d wrote %q, want %q", a.ID, got, want)
		}
	}
	if s, _ := d.Client.Agent(ctx, a.ID); s.Stage != "restricted" {
		t.Fatalf("stage after self-promotion = %q", s.Stage)
	}
}

// A sandboxed reader's own processes read exactly what both sides
// consented to: kin lets them through the owner's folders (its group), and
// Landlock keeps them to the consented paths.
func TestVisibilityLetsASandboxedReaderReadOnlyTheConsentedPaths(t *testing.T) {
	d := kintest.StartDaemon(t)
	_, owner := visibilityPair(t, d, []string{"memory/**"}, []string{"memory/**"}, true)
	ws := filepath.Join(d.Home, "ctx", "home", uidOf(d, owner.ID), "agent", "mano", "workspace")
	script := `exec 2>/dev/null; W=` + ws + `
cat "$W/memory/notes.md" || echo NOREAD-NOTES
cat "$W/SECRET.md" || echo NOREAD-SECRET
echo x >> "$W/memory/notes.md" && echo WROTE || echo NOWRITE`
	a, err := d.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "nova2", Responsible: "r", Policy: &kin.Policy{
		Mounts:     map[string]kin.Mode{"/nonexistent-kin-test": kin.ModeRO},
		Visibility: &kin.Visibility{ReadFrom: []string{"mano"}, Scope: []string{"memory/**"}},
	}}, Command: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if _, out := ended(t, d, a.ID); out != "remember the milk\nNOREAD-SECRET\nNOWRITE\n" {
		t.Fatalf("the sandboxed reader: %q", out)
	}
}
