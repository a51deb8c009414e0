package daemon

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
func (d *Daemon) Resources(ctx context.Context, id kin.AgentID) (*kin.AgentResources, error) {
	if err := d.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	if _, err := d.store.AgentGetByID(ctx, id); err != nil {
		return nil, d.agentError(err, id)
	}
	notRunning := kin.Errorf(kin.ECodeInvalid, "agent %d has no running process: resources are read from a running agent's cgroup", id)
	if d.runtimeOf(id) == nil {
		return nil, notRunning
	}
	u, err := d.sup.Usage(id)
	switch {
	case errors.Is(err, supervisor.ErrNoUsage):
		return nil, kin.Errorf(kin.ECodeInvalid, "containment is %s: resources are read from cgroups (%s)", d.sup.Containment(), d.sup.ContainmentReason())
	case errors.Is(err, supervisor.ErrUnknownAgent):
		return nil, notRunning // it ended since the check
	case err != nil:
		return nil, err
	}
	return &kin.AgentResources{Agent: id, At: time.Now().UTC(), CPUUsec: u.CPUUsec, SubtreeCPUUsec: u.SubtreeCPUUsec, MemoryBytes: u.MemoryBytes, Pids: u.Pids}, nil
}
