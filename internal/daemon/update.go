package daemon

import (
	"context"

	"github.com/kin-agents/kin/internal/store"
)

// update runs fn in a store transaction (store.UpdateAfter): the work fn
// leaves in after runs once the commit is durable, never when it failed.
// Every write of the daemon goes through it; d.store wakes the followers of
// the event stream after each commit (the store notifies).
func (d *Daemon) update(ctx context.Context, fn func(tx store.Tx, after *store.AfterCommit) error) error {
	return store.UpdateAfter(ctx, d.store, fn)
}
