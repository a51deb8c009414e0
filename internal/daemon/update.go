package daemon

import (
	"context"

	"github.com/kin-agents/kin/internal/store"
)

// afterCommit is the work a write leaves for after its commit: changes to
// the daemon's caches (lineage, perms, the governor's profile), timers. It
// runs only once the writes are durable, in the order it was added, and
// never when the write failed, so no cache runs ahead of the store.
type afterCommit struct{ fns []func() }

// do adds fn to run after the commit.
func (a *afterCommit) do(fn func()) { a.fns = append(a.fns, fn) }

// update runs fn in a store transaction; once it is durable, the work fn
// left in after runs and the followers of the event stream are woken.
// Every write of the daemon goes through it: the one way in for cache
// changes and notifications.
func (d *Daemon) update(ctx context.Context, fn func(tx store.Tx, after *afterCommit) error) error {
	var after afterCommit
	err := d.store.Update(ctx, func(tx store.Tx) error {
		after = afterCommit{} // what an earlier, undone run of fn left is void
		return fn(tx, &after)
	})
	if err != nil {
		return err
	}
	for _, f := range after.fns {
		f()
	}
	d.hub.notify()
	return nil
}
