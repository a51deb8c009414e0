package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestGovernorShow(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "governor", "show")
	wantOK(t, r)
	for _, want := range []string{"profile               default", "max_generation_depth  10", "max_children          100", "circuit_breaker       more than 10 refused spawns within 1m0s", "roles                 any",
		"allow_detach          no", "heartbeat             an agent that has heartbeated is stale after 1m0s without one, offline after 3 such windows",
		"restart               at most 3 replacements of an agent within 1m0s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "host_loss") {
		t.Errorf("the default host_loss (run) is shown:\n%s", r.stdout)
	}
	r = kinAt(t, d, "governor", "show", "--json")
	wantOK(t, r)
	var g kin.GovernorInfo
	decodeOne(t, r.stdout, &g)
	if g.Source != "default" || g.Profile.MaxGenerationDepth != 10 {
		t.Errorf("governor = %+v", g)
	}
}

func TestGovernorShowHostLoss(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "fleet.json")
	if err := os.WriteFile(prof, []byte(`{"name":"fleet","max_generation_depth":3,"host_loss":"cancel"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	r := kinAt(t, d, "governor", "show")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "host_loss             cancel (when a host of the fleet dies") {
		t.Errorf("output lacks host_loss cancel:\n%s", r.stdout)
	}
}

func TestGovernorShowRoles(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	r := kinAt(t, d, "governor", "show")
	wantOK(t, r)
	var roles []string
	inRoles := false
	for _, line := range strings.Split(r.stdout, "\n") {
		if line == "roles:" {
			inRoles = true
			continue
		}
		if inRoles && line != "" {
			roles = append(roles, strings.Join(strings.Fields(line), " "))
		}
	}
	want := []string{
		"ROLE ROOT CARDINALITY SPAWNS ESCALATES",
		"GO yes singleton HO, PO, IO -",
		"HO no per_host (none) -",
		"IO no per_context (none) -",
		"PO no per_context Specialist, Reviewer, Worker -",
		"Reviewer no any (none) -",
		"Specialist no any (none) Worker (to an ancestor)",
		"Worker no any (none) -",
	}
	if strings.Join(roles, "\n") != strings.Join(want, "\n") {
		t.Errorf("roles:\n%s\nwant:\n%s\nfull output:\n%s", strings.Join(roles, "\n"), strings.Join(want, "\n"), r.stdout)
	}
}

func TestGovernorSet(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "governor", "set", "max_generation_depth=5")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "set max_generation_depth=5\n") || !strings.Contains(r.stdout, "max_generation_depth  5") ||
		!strings.Contains(r.stdout, "overrides (kin governor set):\n  max_generation_depth=5\n") {
		t.Errorf("output:\n%s", r.stdout)
	}
	r = kinAt(t, d, "governor", "set", "max_children=0", "--json")
	wantOK(t, r)
	var g kin.GovernorInfo
	decodeOne(t, r.stdout, &g)
	if g.Profile.MaxChildren != 0 || g.Profile.MaxGenerationDepth != 5 || g.Overrides["max_children"] != "0" {
		t.Errorf("governor = %+v", g)
	}
	r = kinAt(t, d, "governor", "show")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "0 (no limit)") {
		t.Errorf("show:\n%s", r.stdout)
	}
}

func TestGovernorErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	before := lastEvent(t, d)
	for _, arg := range []string{"max_generation_depth", "max_generation_depth=", "=5", "max_generation_depth=five", "depth=5"} {
		wantUsage(t, kinAt(t, d, "governor", "set", arg), `argument "`+arg+`"`)
	}
	r := kinAt(t, d, "governor", "set", "depth=5", "--json")
	wantUsage(t, r)
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if !strings.Contains(e.Message, "max_generation_depth, max_children") {
		t.Errorf("error = %+v", e)
	}
	wantUsage(t, kinAt(t, d, "governor", "set"), "one KEY=VALUE")
	wantUsage(t, kinAt(t, d, "governor", "set", "max_children=1", "max_children=2"), "one KEY=VALUE")
	wantUsage(t, kinAt(t, d, "governor", "frobnicate"), `unknown command "frobnicate" for "kin governor"`)
	wantUsage(t, kinAt(t, d, "governor", "show", "--bogus"), "--bogus")
	msg := wantError(t, kinAt(t, d, "governor", "set", "max_children=-1", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "negative") {
		t.Errorf("message %q", msg)
	}
	if got := lastEvent(t, d); got != before {
		t.Errorf("failed commands wrote events")
	}

	r = kinAt(t, d, "governor")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("kin governor:\n%s", r.stdout)
	}
}

// TestGovernorReset: kin governor reset puts a setting back to the profile's
// value, forgets the override, and stays so across a restart.
func TestGovernorReset(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	wantOK(t, kinAt(t, d, "governor", "set", "max_generation_depth=1"))
	r := kinAt(t, d, "governor", "reset", "max_generation_depth")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "max_generation_depth  10") {
		t.Errorf("after reset:\n%s", r.stdout)
	}
	var g kin.GovernorInfo
	decodeOne(t, kinAt(t, d, "governor", "show", "--json").stdout, &g)
	if g.Profile.MaxGenerationDepth != 10 || len(g.Overrides) != 0 {
		t.Errorf("governor after reset = %+v", g)
	}
	d.Close()
	d = kintest.StartDaemon(t, kintest.WithHome(home))
	decodeOne(t, kinAt(t, d, "governor", "show", "--json").stdout, &g)
	if g.Profile.MaxGenerationDepth != 10 || len(g.Overrides) != 0 {
		t.Errorf("governor after a restart = %+v", g)
	}
	wantUsage(t, kinAt(t, d, "governor", "reset", "max_depth"), "max_depth", "max_generation_depth")
	wantUsage(t, kinAt(t, d, "governor", "reset"), "KEY")
}
