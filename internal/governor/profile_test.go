package governor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/kin"
)

func TestShippedProfilesLoad(t *testing.T) {
	want := map[string]struct{ depth, children int }{
		"default":   {10, 100},
		"hierarchy": {3, 3},
		"aauth":     {1, 100},
	}
	names := governor.ShippedProfiles()
	if len(names) != len(want) {
		t.Fatalf("shipped profiles = %v", names)
	}
	for _, n := range names {
		p, src, err := governor.Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		w := want[n]
		if src != n || p.Name != n || p.MaxGenerationDepth != w.depth || p.MaxChildren != w.children {
			t.Errorf("%s: %+v from %s", n, p, src)
		}
	}
	hier, _, _ := governor.Load("hierarchy")
	if hier.Roles["GO"].Cardinality != kin.CardinalitySingleton || !hier.Roles["GO"].Root {
		t.Errorf("GO rule: %+v", hier.Roles["GO"])
	}
	// Seed 002 §4.1: a Specialist spawns nothing itself; it escalates a
	// Worker's spawn to its PO.
	if sp := hier.Roles["Specialist"]; len(sp.Spawns) != 0 || len(sp.Escalates) != 1 || sp.Escalates[0] != "Worker" {
		t.Errorf("Specialist rule: %+v", sp)
	}
	if !governor.Escalates(hier, "Specialist", "Worker") || governor.Escalates(hier, "PO", "Worker") {
		t.Error("Escalates disagrees with the hierarchy profile")
	}
	if i, err := governor.EscalationTarget(hier, "Specialist", "Worker", []string{"Specialist", "PO", "GO"}); i != 1 || err != nil {
		t.Errorf("EscalationTarget = %d, %v; want the PO (1)", i, err)
	}
	if i, err := governor.EscalationTarget(hier, "Specialist", "Worker", []string{"GO"}); i != -1 || err == nil || err.Code != kin.ECodeSpawnNotAllowed {
		t.Errorf("EscalationTarget with no spawner = %d, %v", i, err)
	}
	if len(hier.Roles["Worker"].Spawns) != 0 {
		t.Errorf("Workers never spawn: %+v", hier.Roles["Worker"])
	}
}

func TestProfileDefaults(t *testing.T) {
	p, err := governor.Parse([]byte(`{"name":"bare"}`))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(p.Heartbeat.Window) != time.Minute || p.Heartbeat.OfflineAfter != 3 || p.Restart.MaxRestarts != 3 || time.Duration(p.Restart.Period) != time.Minute || p.AllowDetach {
		t.Fatalf("defaults = %+v", p)
	}
	if p.Limits.Pids != 4096 || p.Quotas.LogBytes != 16<<20 || p.Quotas.LogKeep != 2 || p.Quotas.MessageBytes != 16<<10 ||
		p.Quotas.Messages != (kin.Rate{PerSecond: 2, Burst: 100}) || p.Quotas.Reports != (kin.Rate{PerSecond: 20, Burst: 200}) {
		t.Fatalf("limit and quota defaults = %+v %+v", p.Limits, p.Quotas)
	}
	if p.HostLoss != "" {
		t.Fatalf("host_loss default = %q, want unset (run)", p.HostLoss)
	}
	if p, err := governor.Parse([]byte(`{"name":"x","host_loss":"cancel"}`)); err != nil || p.HostLoss != kin.HostLossCancel {
		t.Fatalf("host_loss cancel: %q, %v", p.HostLoss, err)
	}
	// log_keep 0 is kept: only the current log, no rotated file.
	if p, err := governor.Parse([]byte(`{"name":"x","quotas":{"log_keep":0}}`)); err != nil || p.Quotas.LogKeep != 0 || p.Quotas.LogBytes != 16<<20 {
		t.Fatalf("log_keep 0: %+v, %v", p.Quotas, err)
	}
	for _, bad := range []struct{ json, want string }{
		{`{"name":"x","heartbeat":{"window":"1ms"}}`, "shorter than 10ms"},
		{`{"name":"x","heartbeat":{"window":"1s","offline_after":-1}}`, "offline_after"},
		{`{"name":"x","restart":{"max_restarts":-1,"period":"1m"}}`, "max_restarts"},
		{`{"name":"x","limits":{"pids":-5}}`, "limits.pids -5"},
		{`{"name":"x","quotas":{"log_bytes":100}}`, "quotas.log_bytes 100 is below 4096"},
		{`{"name":"x","quotas":{"log_keep":-1}}`, "quotas.log_keep -1"},
		{`{"name":"x","quotas":{"message_bytes":-1}}`, "quotas.message_bytes -1"},
		{`{"name":"x","quotas":{"messages":{"per_second":-1,"burst":5}}}`, "quotas.messages needs per_second above 0"},
		{`{"name":"x","quotas":{"reports":{"per_second":5,"burst":0}}}`, "quotas.reports needs"},
		{`{"name":"x","host_loss":"kill"}`, `host_loss "kill" is not "run"`},
	} {
		if _, err := governor.Parse([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want %q", bad.json, err, bad.want)
		}
	}
}

func TestLoadProfileFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "team.json")
	os.WriteFile(path, []byte(`{"name":"team","max_generation_depth":2,"max_children":5}`), 0o600)
	p, src, err := governor.Load(path)
	if err != nil || p.Name != "team" || src != path {
		t.Fatalf("%+v %s %v", p, src, err)
	}
	if _, _, err := governor.Load("nosuch"); err == nil || !strings.Contains(err.Error(), "shipped: aauth, default, hierarchy") {
		t.Errorf("unknown name: %v", err)
	}
	if _, _, err := governor.Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestParseProfileRejectsBadProfiles(t *testing.T) {
	tests := []struct{ json, want string }{
		{`{"name":"x","max_generation_depth":1,"surprise":true}`, `unknown field "surprise"`},
		{`{"max_generation_depth":1}`, "name is required"},
		{`{"name":"x","max_generation_depth":-1}`, "max_generation_depth -1 is negative"},
		{`{"name":"x","max_children":-2}`, "max_children -2"},
		{`{"name":"x","circuit_breaker":{"max_rejections":3}}`, "positive window and cooldown"},
		{`{"name":"x","circuit_breaker":{"max_rejections":3,"window":"soon","cooldown":"1m"}}`, "invalid profile JSON"},
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":["PO"]}}}`, `names "PO", which is not a role`},
		{`{"name":"x","roles":{"GO":{"spawns":[]}}}`, `no role has "root": true`},
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":[],"cardinality":"few"}}}`, `cardinality "few"`},
		{`{"name":"x","roles":{"bad role":{"root":true,"spawns":[]}}}`, "roles:"},
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":[],"extra":1}}}`, `unknown field "extra"`},
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":[],"escalates":["W"]}}}`, `roles.GO.escalates names "W", which is not a role`},
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":["S"]},"S":{"spawns":["W"],"escalates":["W"]},"W":{"spawns":[]}}}`, `roles.S both spawns and escalates "W"`},
		// Nobody above S spawns W (GO spawns S only): no target.
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":["S"]},"S":{"spawns":[],"escalates":["W"]},"W":{"spawns":[]}}}`, `no role that can be an ancestor of S spawns "W"`},
		// A root escalates to nobody.
		{`{"name":"x","roles":{"GO":{"root":true,"spawns":["S"],"escalates":["W"]},"S":{"spawns":["W"]},"W":{"spawns":[]}}}`, `no role that can be an ancestor of GO spawns "W"`},
		{`{"name":"x"} {"name":"y"}`, "more than one JSON value"},
		{`[1,2]`, "invalid profile JSON"},
	}
	for _, tt := range tests {
		_, err := governor.Parse([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%s) = %v, want error mentioning %q", tt.json, err, tt.want)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	for _, n := range governor.ShippedProfiles() {
		b, _ := os.ReadFile(filepath.Join("profiles", n+".json"))
		f.Add(b)
	}
	f.Add([]byte(`{"name":"x","roles":{"A":{"root":true,"spawns":["A"],"cardinality":"per_context"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := governor.Parse(data)
		if err != nil {
			return
		}
		if err := governor.Validate(p); err != nil {
			t.Fatalf("Parse accepted a profile Validate rejects: %v", err)
		}
		// Every accepted profile is usable: the governor answers without panicking.
		n, _ := kin.ParseName("x")
		governor.CheckSpawn(p, governor.SpawnFacts{Name: n, Role: governor.Role(p, "", n)})
	})
}
