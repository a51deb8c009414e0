package daemon

import (
	"context"
	"time"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/kin"
)

// runnerHooks is what the registry needs of the part of the daemon that
// runs agents (registry.Runner), until that part is a service of its own.
type runnerHooks struct{ d *Daemon }

func (h runnerHooks) Running(id kin.AgentID) bool { return h.d.runtimeOf(id) != nil }

func (h runnerHooks) Terminate(ctx context.Context, id kin.AgentID) error {
	_, err := h.d.cancelTree(ctx, cancelParams{Root: id, Reason: reasonTerminated, IncludeRoot: true, RootState: kin.StateTerminated})
	return err
}

func (h runnerHooks) Freeze(ctx context.Context, req kin.StatusRequest, changed []*kin.Agent) error {
	return h.d.freezeChanged(ctx, req, changed)
}

func (h runnerHooks) CheckRequest(req *kin.RegisterRequest) (map[string]authority.FileID, error) {
	return h.d.checkPermissionRequest(req)
}

func (h runnerHooks) CheckAgentUID(id kin.AgentID) error { return h.d.checkAgentUID(id) }

func (h runnerHooks) SandboxAvailable() error { return h.d.sandboxAvailable() }

func (h runnerHooks) Provision(ctx context.Context, a *kin.Agent, t *kin.Template) error {
	return h.d.provisionWorkspace(ctx, a, t)
}

// observerHooks counts and traces registrations (registry.Observer).
type observerHooks struct{ d *Daemon }

func (h observerHooks) Refused(err error) { h.d.metrics.countRejection(err) }

func (h observerHooks) Admitted(spawn *registry.SpawnExtra) { h.d.metrics.countSpawn(spawn) }

func (h observerHooks) TraceBegan() time.Time { return h.d.traceStart() }

func (h observerHooks) Traced(ctx context.Context, req kin.RegisterRequest, a *kin.Agent, began time.Time, err error) {
	h.d.traceSpawn(ctx, spawnKindRegister, req.Parent, req.Name, a, began, err)
}
