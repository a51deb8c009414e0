package store

import "context"

// AfterCommit is the work an Update's function leaves for after its commit:
// changes to a cache of what the transaction wrote, timers. It runs only once
// the writes are durable, in the order it was added, and never when the
// Update failed, so no cache runs ahead of the store.
type AfterCommit struct{ fns []func() }

// Do adds fn to run after the commit.
func (a *AfterCommit) Do(fn func()) { a.fns = append(a.fns, fn) }

// UpdateAfter runs fn in st.Update and, once the commit is durable, the
// work fn left in after.
func UpdateAfter(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	var after AfterCommit
	err := st.Update(ctx, func(tx Tx) error {
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

// UpdateAfterLazy is UpdateAfter through st's UpdateLazy where st has one
// (LazyUpdater), else through Update. after runs once the commit is
// visible; it may not be on the disk yet.
func UpdateAfterLazy(ctx context.Context, st Store, fn func(tx Tx, after *AfterCommit) error) error {
	l, ok := st.(LazyUpdater)
	if !ok {
		return UpdateAfter(ctx, st, fn)
	}
	var after AfterCommit
	err := l.UpdateLazy(ctx, func(tx Tx) error {
		after = AfterCommit{}
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
