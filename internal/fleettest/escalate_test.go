package fleettest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestSpecialistEscalatesAcrossHosts is seed 002 §4.1 in a fleet: a
// Specialist running on host b, asking through host c, gets a Worker that
// is its PO's child (the PO runs on host a), runs beside the Specialist on
// b, is held there to the Specialist's policy, counts against the PO's
// max_children however many hosts spawn under it, and dies with the PO.
func TestSpecialistEscalatesAcrossHosts(t *testing.T) {
	f := fleettest.Start(t, fleettest.WithServeArgs("--profile", "hierarchy"))
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goA, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "GO", Responsible: "fleettest"})
	if err != nil {
		t.Fatal(err)
	}
	po := spawnOn(t, a, "PO-MVP1", goA.ID, time.Second, "sleep", "1000")
	g := kin.Duration(time.Second)
	spec, err := b.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "S-backend", Role: "Specialist", Parent: po.ID,
			Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}},
		Command: []string{"sleep", "1000"}, Grace: &g, Host: b.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	worker := func(h *fleettest.Host, name string) (*kin.Agent, error) {
		return h.Client.ActingAs(spec.ID.String()).Spawn(ctx, kin.SpawnRequest{
			RegisterRequest: kin.RegisterRequest{Name: name, Role: "Worker"},
			Command:         []string{"sleep", "1000"}, Grace: &g,
		})
	}
	w, err := worker(c, "W-1")
	if err != nil {
		t.Fatal(err)
	}
	logOnFailure(t, a, po, spec, w)
	if w.Parent != po.ID || w.RequestedBy != spec.ID || w.Host != b.Name || w.PID == 0 {
		t.Fatalf("the escalated Worker: parent %d requested_by %d host %q pid %d; want the PO %d, the Specialist %d, host %s",
			w.Parent, w.RequestedBy, w.Host, w.PID, po.ID, spec.ID, b.Name)
	}
	dec, err := b.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: w.ID, Tool: "exec"})
	if err != nil || dec.Allowed || dec.Agent != spec.ID {
		t.Errorf("the Worker's exec on its host: %+v, %v; want denied by the Specialist's policy", dec, err)
	}
	// The PO's max_children (3) holds across hosts: one more Worker
	// through a, then none through b.
	if _, err := worker(a, "W-2"); err != nil {
		t.Fatalf("a second escalated Worker through a: %v", err)
	}
	if _, err := worker(b, "W-3"); kin.ErrorCodeOf(err) != kin.ECodeMaxChildren {
		t.Fatalf("a fourth child of the PO through b: %v; want %s", err, kin.ECodeMaxChildren)
	}
	// The PO ends on a: its escalated Worker on b dies with it.
	if _, err := a.Client.Stop(ctx, kin.StopRequest{ID: po.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 30*time.Second, "the Worker on b to end with its PO on a", func() bool {
		got := agentOn(b, w.ID)
		return got != nil && got.State.Terminal() && !alive(w.PID)
	})
}
