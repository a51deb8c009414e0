package daemon_test

import (
	"context"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestSmokeRegisterAndQuery(t *testing.T) {
	d := kintest.StartDaemon(t)
	ctx := context.Background()
	root, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "coordinator", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	child, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "collector", Parent: root.ID})
	if err != nil {
		t.Fatal(err)
	}
	if child.Generation != 1 || child.Responsible != "Dr. Schmidt" {
		t.Fatalf("child = %+v", child)
	}
	anc, err := d.Client.Ancestors(ctx, child.ID)
	if err != nil || len(anc) != 2 || anc[1].ID != root.ID {
		t.Fatalf("ancestors = %v, %v", anc, err)
	}
	evs, err := d.Client.Events(ctx, kin.EventFilter{})
	if err != nil || len(evs) != 3 {
		t.Fatalf("events = %v, %v", evs, err)
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "x", Parent: 99})
	if kin.ErrorCodeOf(err) != kin.ECodeParentNotFound {
		t.Fatalf("err = %v", err)
	}
}
