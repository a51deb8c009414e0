package governor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/kin"
)

func mustLoad(t *testing.T, name string) kin.Profile {
	t.Helper()
	p, _, err := governor.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var now = time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)

func agent(id kin.AgentID, role string, gen int) *kin.Agent {
	return &kin.Agent{ID: id, Role: role, Generation: gen, Status: kin.StatusActive, State: kin.StateRegistered}
}

func name(t *testing.T, s string) kin.Name {
	t.Helper()
	n, err := kin.ParseName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// spawn builds facts for a child called childName under parent.
func spawn(t *testing.T, p kin.Profile, parent *kin.Agent, childName, role string) governor.SpawnFacts {
	n := name(t, childName)
	f := governor.SpawnFacts{Parent: parent, Name: n, Now: now}
	if parent != nil {
		f.ParentID = parent.ID
	}
	f.Role = governor.Role(p, role, n)
	return f
}

func TestCheckSpawnRules(t *testing.T) {
	def := mustLoad(t, "default")
	hier := mustLoad(t, "hierarchy")
	aauth := mustLoad(t, "aauth")
	suspended := agent(1, "", 0)
	suspended.Status = kin.StatusSuspended
	revoked := agent(1, "", 0)
	revoked.Status = kin.StatusRevoked
	terminated := agent(1, "", 0)
	terminated.Status = kin.StatusTerminated
	exited := agent(1, "", 0)
	exited.State = kin.StateExited
	blocked := agent(1, "", 0)
	blocked.SpawnBlockedUntil = now.Add(time.Minute)
	unblocked := agent(1, "", 0)
	unblocked.SpawnBlockedUntil = now.Add(-time.Second)

	tests := []struct {
		name    string
		profile kin.Profile
		facts   func() governor.SpawnFacts
		code    kin.ErrorCode // "" = allowed
		msg     string
	}{
		{"root is allowed", def, func() governor.SpawnFacts { return spawn(t, def, nil, "coordinator", "") }, "", ""},
		{"parent must exist", def, func() governor.SpawnFacts {
			f := spawn(t, def, nil, "x", "")
			f.ParentID = 42
			return f
		}, kin.ECodeParentNotFound, "Parent agent not found"},
		{"suspended parent cannot spawn", def, func() governor.SpawnFacts { return spawn(t, def, suspended, "x", "") }, kin.ECodeParentNotActive, "Parent agent not active"},
		{"revoked parent cannot spawn", def, func() governor.SpawnFacts { return spawn(t, def, revoked, "x", "") }, kin.ECodeParentNotActive, "Parent agent not active"},
		{"terminated parent cannot spawn", def, func() governor.SpawnFacts { return spawn(t, def, terminated, "x", "") }, kin.ECodeParentNotActive, "Parent agent not active"},
		{"exited parent cannot spawn", def, func() governor.SpawnFacts { return spawn(t, def, exited, "x", "") }, kin.ECodeParentNotActive, "Parent agent not active"},
		{"generation 10 is the deepest allowed", def, func() governor.SpawnFacts { return spawn(t, def, agent(1, "", 9), "x", "") }, "", ""},
		{"generation 10 cannot spawn (seed 000)", def, func() governor.SpawnFacts { return spawn(t, def, agent(1, "", 10), "x", "") }, kin.ECodeSpawnDepth, "Max generation depth exceeded"},
		{"wallet must be unused", def, func() governor.SpawnFacts {
			f := spawn(t, def, nil, "x", "")
			f.WalletTaken = true
			return f
		}, kin.ECodeWalletTaken, "Wallet already registered to another agent"},
		{"100 live children is the default limit", def, func() governor.SpawnFacts {
			f := spawn(t, def, agent(1, "", 0), "x", "")
			f.LiveChildren = 100
			return f
		}, kin.ECodeMaxChildren, "already has 100 live children"},
		{"99 live children leave room", def, func() governor.SpawnFacts {
			f := spawn(t, def, agent(1, "", 0), "x", "")
			f.LiveChildren = 99
			return f
		}, "", ""},
		{"open circuit refuses", def, func() governor.SpawnFacts { return spawn(t, def, blocked, "x", "") }, kin.ECodeCircuitOpen, "refused until"},
		{"closed circuit allows", def, func() governor.SpawnFacts { return spawn(t, def, unblocked, "x", "") }, "", ""},
		{"a stopping parent cannot spawn", def, func() governor.SpawnFacts {
			p := agent(1, "", 0)
			p.State = kin.StateStopping
			return spawn(t, def, p, "x", "")
		}, kin.ECodeParentNotActive, "Parent agent not active"},
		{"detached children need a grant (seed 001)", def, func() governor.SpawnFacts {
			f := spawn(t, def, agent(1, "", 0), "x", "")
			f.Life = kin.LifeDetached
			return f
		}, kin.ECodeSpawnNotAllowed, "does not grant detach"},
		{"a detached root is just a root", def, func() governor.SpawnFacts {
			f := spawn(t, def, nil, "x", "")
			f.Life = kin.LifeDetached
			return f
		}, "", ""},
		{"any role may spawn any role by default", def, func() governor.SpawnFacts { return spawn(t, def, agent(1, "Worker", 0), "x", "GO") }, "", ""},

		// seed 002's hierarchy
		{"GO is a root", hier, func() governor.SpawnFacts { return spawn(t, hier, nil, "GO", "") }, "", ""},
		{"GO is a singleton", hier, func() governor.SpawnFacts {
			f := spawn(t, hier, nil, "GO", "")
			f.LiveSameRole = 1
			return f
		}, kin.ECodeCardinality, "singleton"},
		{"PO cannot be a root", hier, func() governor.SpawnFacts { return spawn(t, hier, nil, "PO-MVP1", "") }, kin.ECodeSpawnNotAllowed, "cannot be a root"},
		{"unknown role refused", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "x", "Pilot") }, kin.ECodeSpawnNotAllowed, `"Pilot" is not a role`},
		{"a role is needed", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "coder", "") }, kin.ECodeSpawnNotAllowed, "needs a role"},
		{"GO spawns HO", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "HO@Server1", "") }, "", ""},
		{"one HO per host", hier, func() governor.SpawnFacts {
			f := spawn(t, hier, agent(1, "GO", 0), "HO@Server1", "")
			f.LiveSameRole, f.Host = 1, "server1"
			return f
		}, kin.ECodeCardinality, `host "server1" already runs one`},
		{"an HO is counted by host, not by name", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "HO", "") }, "", ""},
		{"GO spawns PO", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "PO-MVP1", "") }, "", ""},
		{"one PO per project", hier, func() governor.SpawnFacts {
			f := spawn(t, hier, agent(1, "GO", 0), "PO-MVP1", "")
			f.LiveSameRole = 1
			return f
		}, kin.ECodeCardinality, `"MVP1"`},
		{"GO spawns IO", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "IO@Shai", "") }, "", ""},
		{"one IO per human", hier, func() governor.SpawnFacts {
			f := spawn(t, hier, agent(1, "GO", 0), "IO@Shai", "")
			f.LiveSameRole = 1
			return f
		}, kin.ECodeCardinality, `"Shai"`},
		{"GO never delegates to Workers", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(1, "GO", 0), "w1", "Worker") }, kin.ECodeSpawnNotAllowed, `"GO" may not spawn role Worker`},
		{"PO spawns Specialist", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(2, "PO", 1), "S:backend", "Specialist") }, "", ""},
		{"PO spawns Reviewer", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(2, "PO", 1), "rev-1", "Reviewer") }, "", ""},
		{"PO spawns Worker directly", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(2, "PO", 1), "W:1", "Worker") }, "", ""},
		// Seed 002 §4.1: a Specialist escalates a Worker's spawn to its PO
		// (the registry places it there); under itself it is refused.
		{"Specialist spawns no Worker itself", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(3, "Specialist", 2), "W:2", "Worker") }, kin.ECodeSpawnNotAllowed, `"Specialist" may not spawn role Worker under profile hierarchy (it spawns nothing itself; it asks its nearest ancestor that may to spawn Worker)`},
		{"Worker at L4 never spawns: depth", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(4, "Worker", 3), "W:3", "Worker") }, kin.ECodeSpawnDepth, "Max generation depth exceeded"},
		{"Worker at L3 never spawns: role", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(4, "Worker", 2), "W:3", "Worker") }, kin.ECodeSpawnNotAllowed, `"Worker" may not spawn`},
		{"HO spawns nothing", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(2, "HO", 1), "W:3", "Worker") }, kin.ECodeSpawnNotAllowed, `"HO" may not spawn`},
		{"Reviewer spawns nothing", hier, func() governor.SpawnFacts { return spawn(t, hier, agent(3, "Reviewer", 2), "W:3", "Worker") }, kin.ECodeSpawnNotAllowed, `"Reviewer" may not spawn`},
		{"3 concurrent sub-agents at most", hier, func() governor.SpawnFacts {
			f := spawn(t, hier, agent(2, "PO", 1), "W:4", "Worker")
			f.LiveChildren = 3
			return f
		}, kin.ECodeMaxChildren, "at most 3"},

		// seed 004: sub-agents must not spawn
		{"aauth: top-level spawns a sub-agent", aauth, func() governor.SpawnFacts { return spawn(t, aauth, agent(1, "", 0), "planner.7f3c", "") }, "", ""},
		{"aauth: a sub-agent cannot spawn", aauth, func() governor.SpawnFacts { return spawn(t, aauth, agent(2, "", 1), "search1", "") }, kin.ECodeSpawnDepth, "Max generation depth exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := governor.CheckSpawn(tt.profile, tt.facts())
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed; want %s", tt.code)
			}
			if err.Code != tt.code || !strings.Contains(err.Message, tt.msg) {
				t.Fatalf("got %v; want %s with %q", err, tt.code, tt.msg)
			}
		})
	}
}

func TestRoleFromName(t *testing.T) {
	hier := mustLoad(t, "hierarchy")
	def := mustLoad(t, "default")
	tests := []struct {
		p               kin.Profile
		requested, name string
		want            string
	}{
		{hier, "", "HO@Server1", "HO"},
		{hier, "", "PO-MVP1", "PO"},
		{hier, "", "GO", "GO"},
		{hier, "Worker", "PO-MVP1", "Worker"}, // an explicit role wins
		{hier, "", "coder", ""},
		{def, "", "HO@Server1", ""}, // open profiles do not guess
		{def, "analyst", "x", "analyst"},
	}
	for _, tt := range tests {
		n, _ := kin.ParseName(tt.name)
		if got := governor.Role(tt.p, tt.requested, n); got != tt.want {
			t.Errorf("Role(%s, %q, %q) = %q, want %q", tt.p.Name, tt.requested, tt.name, got, tt.want)
		}
	}
}

func TestNeedsFor(t *testing.T) {
	hier := mustLoad(t, "hierarchy")
	if n := governor.NeedsFor(hier, "GO", false); n.LiveChildren || n.Cardinality != kin.CardinalitySingleton {
		t.Errorf("GO root: %+v", n)
	}
	if n := governor.NeedsFor(hier, "Worker", true); !n.LiveChildren || n.Cardinality != kin.CardinalityAny {
		t.Errorf("Worker child: %+v", n)
	}
	unlimited := mustLoad(t, "default")
	unlimited.MaxChildren = 0
	if n := governor.NeedsFor(unlimited, "", true); n.LiveChildren {
		t.Errorf("no limit should need no count: %+v", n)
	}
}

func TestCircuitBreakerTrips(t *testing.T) {
	p := mustLoad(t, "hierarchy") // 5 in 1m, cool-down 5m
	if _, trip := governor.Trip(p, 5, now); trip {
		t.Error("tripped at 5 rejections; the rule is more than 5")
	}
	until, trip := governor.Trip(p, 6, now)
	if !trip || !until.Equal(now.Add(5*time.Minute)) {
		t.Errorf("Trip(6) = %v, %v", until, trip)
	}
	p.CircuitBreaker.MaxRejections = 0
	if _, trip := governor.Trip(p, 1000, now); trip {
		t.Error("a disabled breaker tripped")
	}
	if governor.CountsForBreaker(kin.ECodeCircuitOpen) {
		t.Error("the breaker's own refusals must not keep it open")
	}
	if !governor.CountsForBreaker(kin.ECodeSpawnDepth) {
		t.Error("depth rejections must count")
	}
}

func TestSetSetting(t *testing.T) {
	p := mustLoad(t, "default")
	if err := governor.SetSetting(&p, "max_generation_depth", 3); err != nil || p.MaxGenerationDepth != 3 {
		t.Fatalf("%v %d", err, p.MaxGenerationDepth)
	}
	if err := governor.SetSetting(&p, "max_children", 7); err != nil || p.MaxChildren != 7 {
		t.Fatalf("%v %d", err, p.MaxChildren)
	}
	if err := governor.SetSetting(&p, "max_depth", 3); err == nil || !strings.Contains(err.Error(), "unknown governor setting") {
		t.Fatalf("unknown key: %v", err)
	}
	if err := governor.SetSetting(&p, "max_children", -1); err == nil {
		t.Fatal("negative accepted")
	}
}

func TestDetachGrantedByProfile(t *testing.T) {
	p := mustLoad(t, "default")
	p.AllowDetach = true
	f := spawn(t, p, agent(1, "", 0), "x", "")
	f.Life = kin.LifeDetached
	if err := governor.CheckSpawn(p, f); err != nil {
		t.Fatalf("refused with allow_detach: %v", err)
	}
}
