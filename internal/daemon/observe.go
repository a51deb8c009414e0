package daemon

import (
	"context"
	"time"

	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/kin"
)

// registryObserver counts and traces registrations (registry.Observer).
type registryObserver struct{ d *Daemon }

func (o registryObserver) Refused(err error) { o.d.metrics.countRejection(err) }

func (o registryObserver) Admitted(spawn *registry.SpawnExtra) { o.d.metrics.countSpawn(spawn) }

func (o registryObserver) TraceBegan() time.Time { return o.d.traceStart() }

func (o registryObserver) Traced(ctx context.Context, req kin.RegisterRequest, a *kin.Agent, began time.Time, err error) {
	o.d.traceSpawn(ctx, spawnKindRegister, req.Parent, req.Name, a, began, err)
}

// runnerObserver records cascades, heartbeats and spawns' spans
// (runner.Observer).
type runnerObserver struct{ d *Daemon }

func (o runnerObserver) Cascade(reason string, agents int, began time.Time) {
	o.d.metrics.observeCascade(reason, agents, began)
}

func (o runnerObserver) Heartbeat(prev, now time.Time) { o.d.metrics.observeHeartbeat(prev, now) }

func (o runnerObserver) TraceBegan() time.Time { return o.d.traceStart() }

func (o runnerObserver) Traced(ctx context.Context, kind string, parent kin.AgentID, name string, a *kin.Agent, began time.Time, err error) {
	o.d.traceSpawn(ctx, kind, parent, name, a, began, err)
}
