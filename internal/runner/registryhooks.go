package runner

import (
	"context"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/kin"
)

// RegistryHooks is what the registry needs of the runner (registry.Runner).
// It is a value of its own so that the Runner's method set stays its
// service's.
func (run *Runner) RegistryHooks() registry.Runner { return registryHooks{run} }

type registryHooks struct{ run *Runner }

func (h registryHooks) Running(ctx context.Context, id kin.AgentID) (bool, error) {
	if err := h.run.awaitReconciled(ctx, id); err != nil {
		return false, err
	}
	return h.run.runtimeOf(id) != nil, nil
}

func (h registryHooks) Reconciling(id kin.AgentID) bool { return h.run.Reconciling(id) }

func (h registryHooks) Terminate(ctx context.Context, id kin.AgentID) error {
	_, err := h.run.cancelTree(ctx, cancelParams{Root: id, Reason: reasonTerminated, IncludeRoot: true, RootState: kin.StateTerminated})
	return err
}

func (h registryHooks) Freeze(ctx context.Context, req kin.StatusRequest, changed []*kin.Agent) error {
	return h.run.freezeChanged(ctx, req, changed)
}

func (h registryHooks) CheckRequest(req *kin.RegisterRequest) (map[string]authority.FileID, error) {
	return h.run.checkPermissionRequest(req)
}

func (h registryHooks) CheckAgentUID(id kin.AgentID) error { return h.run.checkAgentUID(id) }

func (h registryHooks) SandboxAvailable() error { return h.run.sandboxAvailable() }

func (h registryHooks) Provision(ctx context.Context, a *kin.Agent, t *kin.Template) error {
	return h.run.provisionWorkspace(ctx, a, t)
}
