package telemetry

import (
	"context"
	"time"

	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/kin"
)

// RegistryObserver counts and traces registrations (registry.Observer).
type RegistryObserver struct {
	M *Metrics
	T *Tracer
}

func (o RegistryObserver) Refused(err error) { o.M.countRejection(err) }

func (o RegistryObserver) Admitted(spawn *registry.SpawnExtra) { o.M.countSpawn(spawn) }

func (o RegistryObserver) TraceBegan() time.Time { return o.T.Began() }

func (o RegistryObserver) Traced(ctx context.Context, req kin.RegisterRequest, a *kin.Agent, began time.Time, err error) {
	o.T.Spawn(ctx, spawnKindRegister, req.Parent, req.Name, a, began, err)
}

// RunnerObserver records cascades, heartbeats and spawns' spans
// (runner.Observer).
type RunnerObserver struct {
	M *Metrics
	T *Tracer
}

func (o RunnerObserver) Cascade(reason string, agents int, began time.Time) {
	o.M.observeCascade(reason, agents, began)
}

func (o RunnerObserver) Heartbeat(prev, now time.Time) { o.M.observeHeartbeat(prev, now) }

func (o RunnerObserver) TraceBegan() time.Time { return o.T.Began() }

func (o RunnerObserver) Traced(ctx context.Context, kind string, parent kin.AgentID, name string, a *kin.Agent, began time.Time, err error) {
	o.T.Spawn(ctx, kind, parent, name, a, began, err)
}
