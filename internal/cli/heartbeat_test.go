package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestHeartbeatByOperator: the operator heartbeats on behalf of an agent.
func TestHeartbeatByOperator(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--name", "external", "--responsible", "ops", "sleep", "600")
	r := kinAt(t, d, "heartbeat", "--id", a.ID.String(), "--cursor", "page 42")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "#"+a.ID.String()+" external  state=") || !strings.HasSuffix(r.stdout, ` cursor="page 42"`+"\n") {
		t.Errorf("output %q", r.stdout)
	}
	r = kinAt(t, d, "heartbeat", "--id", a.ID.String(), "--json")
	wantOK(t, r)
	var got kin.Agent
	decodeOne(t, r.stdout, &got)
	if got.ID != a.ID || got.LastHeartbeat.IsZero() || got.Cursor != "page 42" || got.State != kin.StateActive {
		t.Errorf("after heartbeats: %+v (a heartbeat without --cursor keeps the last one)", got)
	}
}

func TestHeartbeatErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	msg := wantError(t, kinAt(t, d, "heartbeat", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "--id") {
		t.Errorf("the operator without --id: message %q", msg)
	}
	wantError(t, kinAt(t, d, "heartbeat", "--id", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "heartbeat", "--id", "1", "--cursor", "a\nb", "--json"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "heartbeat", "--id", "1", "--cursor", strings.Repeat("x", kin.MaxCursorLen+1), "--json"), kin.ECodeInvalid)
	if _, err := d.Client.SetStatus(context.Background(), kin.StatusRequest{ID: 7, Action: kin.ActionTerminate}); err != nil {
		t.Fatal(err)
	}
	wantError(t, kinAt(t, d, "heartbeat", "--id", "7", "--json"), kin.ECodeInvalidTransition)
	wantUsage(t, kinAt(t, d, "heartbeat", "--id", "abc"), "--id")
	wantUsage(t, kinAt(t, d, "heartbeat", "--id", "0"), "--id")
	wantUsage(t, kinAt(t, d, "heartbeat", "7"), "7")
}
