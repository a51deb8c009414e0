package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestAgentNamesEverywhere runs every command that takes an agent, as an
// argument or a flag, with the agent's live name and with its #id: the two
// answer alike. (kin top --root is the same flag type; top is interactive.)
func TestAgentNamesEverywhere(t *testing.T) {
	d := kintest.StartDaemon(t)
	ctx := context.Background()
	n := 0
	register := func(t *testing.T) *kin.Agent {
		t.Helper()
		n++
		a, err := d.Client.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("named-%d", n), Responsible: "Dr. Schmidt"})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Read-only: the name and the #id give the same output.
	for _, args := range [][]string{
		{"show", "@"}, {"children", "@"}, {"ancestors", "@"}, {"tree", "@"},
		{"explain", "@", "--tool", "exec"}, {"context", "pack", "@"},
		{"result", "@"}, {"logs", "@"}, {"wait", "@", "--timeout", "1ms"},
		{"ps", "--parent", "@"}, {"events", "--agent", "@"},
		{"authorize", "--agent", "@", "--tool", "exec"}, {"inbox", "--agent", "@"},
		{"grants", "--agent", "@"}, {"auth-tokens", "--agent", "@"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			a := register(t)
			byName := kinAt(t, d, subst(args, a.Name)...)
			byID := kinAt(t, d, subst(args, "#"+a.ID.String())...)
			if byName.code == ExitUsage || strings.Contains(byName.stderr, "not an agent id") {
				t.Fatalf("by name: exit %d: %s", byName.code, byName.stderr)
			}
			if byName != byID {
				t.Errorf("by name: exit %d\n%s%s\nby id: exit %d\n%s%s", byName.code, byName.stdout, byName.stderr, byID.code, byID.stdout, byID.stderr)
			}
		})
	}
	// Changes: made by name, seen on the agent.
	for _, c := range []struct {
		args  []string
		check func(before, after *kin.Agent) bool
	}{
		{[]string{"suspend", "@"}, func(_, a *kin.Agent) bool { return a.Status == kin.StatusSuspended }},
		{[]string{"revoke", "@"}, func(_, a *kin.Agent) bool { return a.Status == kin.StatusRevoked }},
		{[]string{"terminate", "@"}, func(_, a *kin.Agent) bool { return a.Status == kin.StatusTerminated }},
		{[]string{"stop", "@"}, func(_, a *kin.Agent) bool { return a.Status == kin.StatusTerminated }},
		{[]string{"promote", "@", "--stage", "restricted"}, func(_, a *kin.Agent) bool { return a.Stage == "restricted" }},
		{[]string{"heartbeat", "--id", "@"}, func(b, a *kin.Agent) bool { return a.State == kin.StateActive }},
		{[]string{"usage", "--agent", "@", "--tokens", "5"}, func(_, _ *kin.Agent) bool { return true }},
		{[]string{"grant", "@", "--resource", "https://r.example", "--scope", "data.read"}, func(_, _ *kin.Agent) bool { return true }},
		{[]string{"register", "--name", "child-of-named", "--parent", "@"}, func(_, _ *kin.Agent) bool { return true }},
		{[]string{"spawn", "--name", "spawned-under-named", "--parent", "@", "--", "/bin/true"}, func(_, _ *kin.Agent) bool { return true }},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			before := register(t)
			r := kinAt(t, d, subst(c.args, before.Name)...)
			wantOK(t, r)
			after, err := d.Client.Agent(ctx, before.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(before, after) {
				t.Errorf("%v by name did not reach agent %d: %+v", c.args, before.ID, after)
			}
			if c.args[0] == "register" || c.args[0] == "spawn" {
				kids, err := d.Client.Children(ctx, before.ID)
				if err != nil || len(kids) != 1 {
					t.Errorf("children of %d = %v, %v; want the new one", before.ID, kids, err)
				}
			}
		})
	}
	// A name no live agent holds: the error names it and the way out.
	r := kinAt(t, d, "show", "nobody-here")
	if r.code != ExitError || !strings.Contains(r.stderr, `"nobody-here"`) || !strings.Contains(r.stderr, "kin ps") {
		t.Errorf("show of an unknown name: exit %d, %s", r.code, r.stderr)
	}
	r = kinAt(t, d, "ps", "--parent", "nobody-here")
	wantUsage(t, r, "--parent nobody-here", "no live agent")
	// An ended agent's name, no live agent holding it: the latest agent of
	// that name (kin result rev-123 after it ended).
	ended := register(t)
	wantOK(t, kinAt(t, d, "terminate", ended.Name))
	r = kinAt(t, d, "show", ended.Name, "--json")
	wantOK(t, r)
	if !strings.Contains(r.stdout, fmt.Sprintf(`"id": %d,`, ended.ID)) {
		t.Errorf("show of an ended agent's name:\n%s", r.stdout)
	}
}

// subst replaces "@" in args with ref.
func subst(args []string, ref string) []string {
	out := make([]string, len(args))
	for i, s := range args {
		if s == "@" {
			s = ref
		}
		out[i] = s
	}
	return out
}
