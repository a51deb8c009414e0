package store

import "context"

// AfterCommit is the work an Update's function leaves for after its commit:
// changes to a cache of what the transaction wrote, timers. It runs only once
// the writes are durable (visible, for UpdateAfterLazy and
// UpdateAfterEarlyDeferrable), in the order it was added, and never when the
// Update failed, so no cache runs ahead of the store.
type AfterCommit struct{ fns []func() }

// Do adds fn to run after the commit.
func (a *AfterCommit) Do(fn func()) { a.fns = append(a.fns, fn) }

// UpdateAfter runs fn in st.Update and, once the commit is durable, the
// work fn left in after.
func UpdateAfter(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	return updateAfter(ctx, st.Update, fn)
}

// UpdateAfterLazy is UpdateAfter through st's UpdateLazy where st has one
// (LazyUpdater), else through Update. after runs once the commit is
// visible; it may not be on the disk yet.
func UpdateAfterLazy(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	if l, ok := st.(LazyUpdater); ok {
		return updateAfter(ctx, l.UpdateLazy, fn)
	}
	return updateAfter(ctx, st.Update, fn)
}

func updateAfter(ctx context.Context, update func(context.Context, func(Tx) error) error, fn func(tx Tx, after *AfterCommit) error) error {
	var after AfterCommit
	err := update(ctx, func(tx Tx) error {
		after = AfterCommit{} // what an earlier, undone run of fn left is void
		return fn(tx, &after)
	})
	if err != nil {
		return err
	}
	for _, f := range after.fns {
		f()
	}
	return nil
}

// UpdateAfterDeferrable is UpdateAfter through st's UpdateDeferrable where
// st has one (Deferrer), else through Update: fn must be re-runnable (see
// Deferrer). after holds what fn's last run left.
func UpdateAfterDeferrable(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	if d, ok := st.(Deferrer); ok {
		return updateAfter(ctx, d.UpdateDeferrable, fn)
	}
	return updateAfter(ctx, st.Update, fn)
}

// UpdateAfterEarlyDeferrable is UpdateAfterDeferrable through st's
// UpdateEarlyDeferrable where st has one (EarlyDeferrer): it returns once
// the commit is visible, and after runs then; durable waits until it is on
// the disk. Elsewhere it returns once the commit is durable, and durable
// is Durable. durable is nil when err is not.
func UpdateAfterEarlyDeferrable(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) (durable func() error, err error) {
	e, ok := st.(EarlyDeferrer)
	if !ok {
		if err := UpdateAfterDeferrable(ctx, st, fn); err != nil {
			return nil, err
		}
		return Durable, nil
	}
	err = updateAfter(ctx, func(ctx context.Context, f func(Tx) error) error {
		var err error
		durable, err = e.UpdateEarlyDeferrable(ctx, f)
		return err
	}, fn)
	if err != nil {
		return nil, err
	}
	return durable, nil
}

// UpdateAfterLazyDeferrable is UpdateAfterLazy for a re-runnable fn (see
// Deferrer): through st's UpdateLazyDeferrable where st has one
// (LazyDeferrer), else as UpdateAfterLazy. after holds what fn's last run
// left.
func UpdateAfterLazyDeferrable(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	if d, ok := st.(LazyDeferrer); ok {
		return updateAfter(ctx, d.UpdateLazyDeferrable, fn)
	}
	return UpdateAfterLazy(ctx, st, fn)
}
