package runner

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// TestResolveOwnAgentsOnly: agent/<name> on a host of the fleet is its own
// latest agent of that name, even when its name index met another host's
// agent of it (the review's finding: a batch cut inside a placed agent's
// registration let the writer note it, and Resolve answered it, hiding
// this host's earlier agent of the name).
func TestResolveOwnAgentsOnly(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t, filepath.Join(t.TempDir(), "kin.db"))
	insert := func(host string, status kin.Status) kin.AgentID {
		t.Helper()
		var id kin.AgentID
		err := store.UpdateAfter(ctx, st, func(tx store.Tx, _ *store.AfterCommit) error {
			a := kin.Agent{Name: "coder", Responsible: "ops@example.org", Life: kin.LifeOwned, Status: status,
				State: kin.StateRegistered, CreatedAt: t0(), CreatedBy: kin.Operator, UpdatedAt: t0(), Host: host}
			if status == kin.StatusTerminated {
				a.State = kin.StateExited
			}
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if err == nil {
				id = got.ID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	mine := insert("alpha", kin.StatusTerminated) // this host's, ended
	theirs := insert("beta", kin.StatusActive)    // placed on beta, live
	run := &Runner{cfg: Config{Host: "alpha"}, store: st, names: newNameIndex(), runtimes: map[kin.AgentID]*runtime{}}
	run.names.remember("coder", theirs)
	src := &ctlSource{run: run}
	if id, err := src.Resolve(ctx, "coder"); err != nil || id != mine {
		t.Fatalf("Resolve(coder) = %d, %v; want this host's agent %d, not beta's %d", id, err, mine, theirs)
	}
}
