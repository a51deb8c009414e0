package runner

import (
	"context"
	"errors"
	"time"

	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// Resources reads a running agent's cgroup accounting (the dashboard's
// live CPU, memory and pids). An agent may read its own and its
// descendants'.
func (run *Runner) Resources(ctx context.Context, id kin.AgentID) (*kin.AgentResources, error) {
	if err := run.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	if _, err := run.store.AgentGetByID(ctx, id); err != nil {
		return nil, run.agentError(err, id)
	}
	if err := run.awaitReconciled(ctx, id); err != nil {
		return nil, err
	}
	notRunning := kin.Errorf(kin.ECodeInvalid, "agent %d has no running process: resources are read from a running agent's cgroup", id)
	if run.runtimeOf(id) == nil {
		return nil, notRunning
	}
	u, err := run.sup.Usage(id)
	switch {
	case errors.Is(err, supervisor.ErrNoUsage):
		return nil, kin.Errorf(kin.ECodeInvalid, "containment is %s: resources are read from cgroups (%s)", run.sup.Containment(), run.sup.ContainmentReason())
	case errors.Is(err, supervisor.ErrUnknownAgent):
		return nil, notRunning // it ended since the check
	case err != nil:
		return nil, err
	}
	flat, _ := run.auth.Flat(id)
	return &kin.AgentResources{Agent: id, At: time.Now().UTC(), CPUUsec: u.CPUUsec, SubtreeCPUUsec: u.SubtreeCPUUsec, MemoryBytes: u.MemoryBytes, Pids: u.Pids,
		Limits: run.LimitsOf(flat)}, nil
}
