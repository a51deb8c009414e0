package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

var ctx = context.Background()

func register(t *testing.T, svc kin.Service, req kin.RegisterRequest) *kin.Agent {
	t.Helper()
	a, err := svc.Register(ctx, req)
	if err != nil {
		t.Fatalf("register %s: %v", req.Name, err)
	}
	return a
}

func wantCode(t *testing.T, err error, code kin.ErrorCode) {
	t.Helper()
	if kin.ErrorCodeOf(err) != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

// seedTree registers seed 000's example: a research coordinator with three
// children and three grandchildren, Dr. Schmidt responsible.
func seedTree(t *testing.T, svc kin.Service) map[string]*kin.Agent {
	t.Helper()
	m := map[string]*kin.Agent{}
	m["coordinator"] = register(t, svc, kin.RegisterRequest{Name: "Research-Coordinator", Role: "coordinator", Responsible: "Dr. Schmidt, COAI Research", Wallet: "0x4b19Ccf2"})
	for _, c := range []struct{ key, name, role, parent string }{
		{"collector", "Data-Collector", "collector", "coordinator"},
		{"writer", "Report-Writer", "writer", "coordinator"},
		{"reviewer", "Peer-Reviewer", "reviewer", "coordinator"},
		{"scraper", "Web-Scraper", "scraper", "collector"},
		{"fetcher", "API-Fetcher", "fetcher", "collector"},
		{"latex", "LaTeX-Formatter", "formatter", "writer"},
	} {
		m[c.key] = register(t, svc, kin.RegisterRequest{Name: c.name, Role: c.role, Parent: m[c.parent].ID})
	}
	return m
}

func TestSeed000TreeLineageAndEvents(t *testing.T) {
	d := kintest.StartDaemon(t)
	m := seedTree(t, d.Client)
	latex := m["latex"]
	if latex.ID != 7 || latex.Generation != 2 || latex.Responsible != "Dr. Schmidt, COAI Research" || latex.CreatedBy != kin.Operator {
		t.Fatalf("grandchild = %+v", latex)
	}
	if latex.Status != kin.StatusActive || latex.State != kin.StateRegistered || latex.Life != kin.LifeOwned {
		t.Fatalf("defaults = %+v", latex)
	}
	anc, err := d.Client.Ancestors(ctx, latex.ID)
	if err != nil {
		t.Fatal(err)
	}
	var chain []string
	for _, a := range anc {
		chain = append(chain, fmt.Sprintf("%d:%s:%s", a.ID, a.Name, a.Responsible))
	}
	if got := strings.Join(chain, " > "); got != "7:LaTeX-Formatter:Dr. Schmidt, COAI Research > 3:Report-Writer:Dr. Schmidt, COAI Research > 1:Research-Coordinator:Dr. Schmidt, COAI Research" {
		t.Fatalf("chain = %s", got)
	}
	kids, err := d.Client.Children(ctx, m["coordinator"].ID)
	if err != nil || len(kids) != 3 {
		t.Fatalf("children = %v, %v", kids, err)
	}
	trees, err := d.Client.Tree(ctx, m["collector"].ID)
	if err != nil || len(trees) != 1 || len(trees[0].Children) != 2 || trees[0].Children[0].Name != "Web-Scraper" {
		t.Fatalf("subtree = %+v, %v", trees, err)
	}
	forest, err := d.Client.Tree(ctx, 0)
	if err != nil || len(forest) != 1 || len(forest[0].Children) != 3 {
		t.Fatalf("forest = %+v, %v", forest, err)
	}
	// seed 000: AgentRegistered for every agent, ChildSpawned for every child.
	evs, err := d.Client.Events(ctx, kin.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 13 {
		t.Fatalf("%d events, want 7 registered + 6 spawned", len(evs))
	}
	last := evs[len(evs)-1]
	var parent, child kin.AgentID
	var gen int
	last.Field("parent", &parent)
	last.Field("child", &child)
	last.Field("generation", &gen)
	if last.Type != kin.EventChildSpawned || parent != 3 || child != 7 || gen != 2 {
		t.Fatalf("last event = %s %s", last.Type, last.Data)
	}
	reg := evs[len(evs)-2]
	var creator, responsible string
	reg.Field("creator", &creator)
	reg.Field("responsible", &responsible)
	if reg.Type != kin.EventAgentRegistered || creator != kin.Operator || responsible != "Dr. Schmidt, COAI Research" {
		t.Fatalf("registered event = %s %s", reg.Type, reg.Data)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the sequence has a gap", i, e.Seq)
		}
	}
	byAgent, _ := d.Client.Events(ctx, kin.EventFilter{Agent: latex.ID})
	if len(byAgent) != 2 {
		t.Fatalf("events of agent 7 = %d", len(byAgent))
	}
}

func TestResponsibleInheritedOrOverridden(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := register(t, d.Client, kin.RegisterRequest{Name: "root", Responsible: "Dr. Schmidt"})
	inherit := register(t, d.Client, kin.RegisterRequest{Name: "a", Parent: r.ID})
	other := register(t, d.Client, kin.RegisterRequest{Name: "b", Parent: r.ID, Responsible: "Ops Team"})
	if inherit.Responsible != "Dr. Schmidt" || other.Responsible != "Ops Team" {
		t.Fatalf("inherit=%q other=%q", inherit.Responsible, other.Responsible)
	}
	list, _ := d.Client.Agents(ctx, kin.AgentFilter{Responsible: "Ops Team"})
	if len(list) != 1 || list[0].ID != other.ID {
		t.Fatalf("filter by responsible = %v", list)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := register(t, d.Client, kin.RegisterRequest{Name: "root", Responsible: "x"})
	before, _ := d.Client.Events(ctx, kin.EventFilter{})
	for _, req := range []kin.RegisterRequest{
		{Name: "bad/name", Responsible: "x"},
		{Name: "", Responsible: "x"},
		{Name: "ok", Responsible: "x", Life: "zombie"},
		{Name: "ok", Responsible: strings.Repeat("x", 300)},
		{Name: "root", Responsible: "x"}, // taken
	} {
		_, err := d.Client.Register(ctx, req)
		if err == nil {
			t.Fatalf("accepted %+v", req)
		}
		code := kin.ErrorCodeOf(err)
		if code != kin.ECodeInvalid && code != kin.ECodeConflict {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	after, _ := d.Client.Events(ctx, kin.EventFilter{})
	all, _ := d.Client.Agents(ctx, kin.AgentFilter{})
	if len(after) != len(before) || len(all) != 1 || all[0].ID != r.ID {
		t.Fatalf("bad input changed things: %d -> %d events, %d agents", len(before), len(after), len(all))
	}
	_, err := d.Client.Agent(ctx, 42)
	wantCode(t, err, kin.ECodeNotFound)
	_, err = d.Client.Ancestors(ctx, 42)
	wantCode(t, err, kin.ECodeNotFound)
	_, err = d.Client.Children(ctx, 42)
	wantCode(t, err, kin.ECodeNotFound)
	_, err = d.Client.Tree(ctx, 42)
	wantCode(t, err, kin.ECodeNotFound)
	_, err = d.Client.Agents(ctx, kin.AgentFilter{Status: "sleepy"})
	wantCode(t, err, kin.ECodeInvalid)
}

func TestRejectionsAreEventsAddressedToTheParent(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("aauth"))
	top := register(t, d.Client, kin.RegisterRequest{Name: "planner.7f3c", Responsible: "alice"})
	sub := register(t, d.Client, kin.RegisterRequest{Name: "search1", Parent: top.ID})
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "deeper", Parent: sub.ID})
	wantCode(t, err, kin.ECodeSpawnDepth)
	if err.(*kin.Error).Message != "Max generation depth exceeded" {
		t.Fatalf("message = %q", err.(*kin.Error).Message)
	}
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Agent: sub.ID, Types: []string{kin.EventSpawnRejected}})
	if len(evs) != 1 {
		t.Fatalf("rejection events for the parent = %d", len(evs))
	}
	var code kin.ErrorCode
	var parent kin.AgentID
	evs[0].Field("code", &code)
	evs[0].Field("parent", &parent)
	if code != kin.ECodeSpawnDepth || parent != sub.ID {
		t.Fatalf("rejection event %s", evs[0].Data)
	}
	if all, _ := d.Client.Agents(ctx, kin.AgentFilter{}); len(all) != 2 {
		t.Fatalf("a rejected spawn left an agent: %d", len(all))
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "orphan", Parent: 99})
	wantCode(t, err, kin.ECodeParentNotFound)
}

func TestHierarchyProfileEndToEnd(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
	goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
	if goA.Role != "GO" {
		t.Fatalf("role from name = %q", goA.Role)
	}
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "GO-2", Role: "GO", Responsible: "XIOPro"})
	wantCode(t, err, kin.ECodeCardinality)
	register(t, d.Client, kin.RegisterRequest{Name: "HO@Server1", Parent: goA.ID})
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "ho2@Server1", Role: "HO", Parent: goA.ID})
	wantCode(t, err, kin.ECodeCardinality) // one HO per host
	po := register(t, d.Client, kin.RegisterRequest{Name: "PO-MVP1", Parent: goA.ID})
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "PO-MVP1b", Role: "PO", Parent: goA.ID})
	if err != nil {
		t.Fatalf("another project is fine: %v", err)
	}
	spec := register(t, d.Client, kin.RegisterRequest{Name: "S:backend", Role: "Specialist", Parent: po.ID})
	// Seed 002 §4.1: a Specialist's Worker is escalated to its PO.
	worker := register(t, d.Client, kin.RegisterRequest{Name: "W:1", Role: "Worker", Parent: spec.ID})
	if worker.Generation != 2 || worker.Parent != po.ID || worker.RequestedBy != spec.ID {
		t.Fatalf("escalated worker: generation %d parent %d requested_by %d", worker.Generation, worker.Parent, worker.RequestedBy)
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "W:2", Role: "Worker", Parent: worker.ID})
	wantCode(t, err, kin.ECodeSpawnNotAllowed) // Workers never spawn
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "R:1", Role: "Reviewer", Parent: spec.ID})
	wantCode(t, err, kin.ECodeSpawnNotAllowed) // a Specialist escalates Workers only
	if !strings.Contains(err.Error(), "it asks its nearest ancestor that may to spawn Worker") {
		t.Errorf("a Specialist's Reviewer: %v, want the refusal to say what it escalates", err)
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "W:3", Role: "Worker", Parent: goA.ID})
	wantCode(t, err, kin.ECodeSpawnNotAllowed)
	register(t, d.Client, kin.RegisterRequest{Name: "W:4", Role: "Worker", Parent: po.ID})
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "rev-1", Role: "Reviewer", Parent: po.ID})
	wantCode(t, err, kin.ECodeMaxChildren) // a fourth concurrent child: the escalated Worker counts
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "W:5", Role: "Worker", Parent: spec.ID})
	wantCode(t, err, kin.ECodeMaxChildren) // and so does a fourth escalated one
}

// race sends n registrations at once and counts what passed and why the
// rest failed.
func race(svc kin.Service, n int, req func(i int) kin.RegisterRequest) (ok int, codes map[kin.ErrorCode]int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	codes = map[kin.ErrorCode]int{}
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := svc.Register(ctx, req(i))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else {
				codes[kin.ErrorCodeOf(err)]++
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok, codes
}

// TestLimitsHoldUnderParallelRegistrations races many registrations against
// each limit: exactly the allowed number may pass.
func TestLimitsHoldUnderParallelRegistrations(t *testing.T) {
	const n = 30
	t.Run("max children", func(t *testing.T) {
		d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
		goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
		po := register(t, d.Client, kin.RegisterRequest{Name: "PO-MVP1", Parent: goA.ID})
		ok, codes := race(d.Client, n, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: fmt.Sprintf("W:%d", i), Role: "Worker", Parent: po.ID}
		})
		// After more than 5 rejections the circuit breaker refuses the rest.
		if ok != 3 || codes[kin.ECodeMaxChildren] != 6 || codes[kin.ECodeCircuitOpen] != n-3-6 {
			t.Fatalf("%d passed, %v; want 3, then 6 max_children_exceeded, then the breaker", ok, codes)
		}
	})
	t.Run("singleton", func(t *testing.T) {
		d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
		ok, codes := race(d.Client, n, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: fmt.Sprintf("GO%d", i), Role: "GO", Responsible: "x"}
		})
		if ok != 1 || codes[kin.ECodeCardinality] != n-1 {
			t.Fatalf("%d passed, %v", ok, codes)
		}
	})
	t.Run("one per context", func(t *testing.T) {
		d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"))
		goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
		ok, codes := race(d.Client, n, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: fmt.Sprintf("io%d@Shai", i), Role: "IO", Parent: goA.ID}
		})
		if ok != 1 || codes[kin.ECodeCardinality] != 6 || codes[kin.ECodeCircuitOpen] != n-1-6 {
			t.Fatalf("%d passed, %v", ok, codes)
		}
	})
	t.Run("wallet", func(t *testing.T) {
		d := kintest.StartDaemon(t)
		ok, codes := race(d.Client, n, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: fmt.Sprintf("a%d", i), Responsible: "x", Wallet: "0xfeed"}
		})
		if ok != 1 || codes[kin.ECodeWalletTaken] != n-1 {
			t.Fatalf("%d passed, %v", ok, codes)
		}
	})
	t.Run("name", func(t *testing.T) {
		d := kintest.StartDaemon(t)
		ok, codes := race(d.Client, n, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: "coder", Responsible: "x"}
		})
		if ok != 1 || codes[kin.ECodeConflict] != n-1 {
			t.Fatalf("%d passed, %v", ok, codes)
		}
	})
	// Children of one parent, four registrations a name: on PostgreSQL a
	// registration's insert rides with the next statement, and a name
	// taken meanwhile runs the registration again, refused.
	t.Run("names under a parent", func(t *testing.T) {
		const names = 8
		d := kintest.StartDaemon(t)
		root := register(t, d.Client, kin.RegisterRequest{Name: "root", Responsible: "x"})
		ok, codes := race(d.Client, 4*names, func(i int) kin.RegisterRequest {
			return kin.RegisterRequest{Name: fmt.Sprintf("c%d", i%names), Parent: root.ID}
		})
		if ok != names || codes[kin.ECodeConflict] != 3*names {
			t.Fatalf("%d passed, %v; want %d, the rest refused for the name", ok, codes, names)
		}
		all, err := d.Client.Agents(ctx, kin.AgentFilter{})
		if err != nil || len(all) != names+1 {
			t.Fatalf("%d agents, %v; want %d", len(all), err, names+1)
		}
		for i, a := range all {
			if a.ID != kin.AgentID(i+1) {
				t.Fatalf("the agents' ids have a gap: the %d-th is %d", i+1, a.ID)
			}
			evs, err := d.Client.Events(ctx, kin.EventFilter{Agent: a.ID, Subject: true, Types: []string{kin.EventAgentRegistered}})
			if err != nil || len(evs) != 1 {
				t.Fatalf("agent %d (%s): %d registrations logged, %v", a.ID, a.Name, len(evs), err)
			}
		}
		rep, err := d.Client.LogVerify(ctx, kin.LogVerifyRequest{})
		if err != nil || !rep.OK || rep.Events != 1+2*names {
			t.Fatalf("log verify: %+v, %v; want ok with %d events", rep, err, 1+2*names)
		}
	})
}

// TestRootResponsibleDefaults: a root registered without a responsible party
// is the operator's: the daemon's DefaultResponsible, else its login name.
func TestRootResponsibleDefaults(t *testing.T) {
	d := kintest.StartDaemon(t, func(c *daemon.Config) { c.DefaultResponsible = "Ops Team" })
	a, err := d.Client.Register(context.Background(), kin.RegisterRequest{Name: "noresp"})
	if err != nil || a.Responsible != "Ops Team" {
		t.Fatalf("Register without responsible = %+v, %v; want Ops Team's", a, err)
	}
}
