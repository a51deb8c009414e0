package daemon_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func rootOf(t *testing.T, cp *kin.LogCheckpoint) tlog.Hash {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(cp.Root)
	if err != nil || len(b) != tlog.HashSize {
		t.Fatalf("checkpoint root %q: %v", cp.Root, err)
	}
	return tlog.Hash(b)
}

// TestEventLogAcrossRestartAndCheckpoints: checkpoints signed before a
// restart stay consistent with the log after it; every event has a proof
// that checks with only the log key; the chain of an agent is provable.
func TestEventLogAcrossRestartAndCheckpoints(t *testing.T) {
	home := kintest.TempHome(t)
	d1 := kintest.StartDaemon(t, kintest.WithHome(home))
	tree := seedTree(t, d1.Client)
	cp1, err := d1.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auditlog.NewVerifier(cp1.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auditlog.OpenCheckpoint([]byte(cp1.Note), v); err != nil {
		t.Fatalf("the checkpoint does not open with its own key: %v", err)
	}
	if last, _ := d1.Client.Events(ctx, kin.EventFilter{}); int64(len(last)) != cp1.Size {
		t.Fatalf("checkpoint covers %d events, the log holds %d", cp1.Size, len(last))
	}
	register(t, d1.Client, kin.RegisterRequest{Name: "Late-Helper", Role: "helper", Parent: tree["writer"].ID})
	cp2, err := d1.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp2.Size <= cp1.Size {
		t.Fatalf("a new event did not grow the checkpoint: %d then %d", cp1.Size, cp2.Size)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}

	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	cps, err := d2.Client.LogCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int64]bool{}
	for _, c := range cps {
		sizes[c.Size] = true
	}
	if !sizes[cp1.Size] || !sizes[cp2.Size] {
		t.Fatalf("checkpoints kept across the restart: %v, want %d and %d among them", sizes, cp1.Size, cp2.Size)
	}
	register(t, d2.Client, kin.RegisterRequest{Name: "After-Restart", Role: "helper", Parent: tree["coordinator"].ID})
	cp3, err := d2.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp3.Key != cp1.Key {
		t.Fatalf("the log key changed across the restart: %s then %s", cp1.Key, cp3.Key)
	}
	for _, kept := range []*kin.LogCheckpoint{cp1, cp2} {
		rep, err := d2.Client.LogVerify(ctx, kin.LogVerifyRequest{Checkpoint: kept.Note})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.Events != cp3.Size || rep.Consistency == "" {
			t.Fatalf("verify against the checkpoint of size %d after a restart: %+v", kept.Size, rep)
		}
		p, err := d2.Client.LogConsistency(ctx, kept.Size, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := auditlog.VerifyConsistency(*p, rootOf(t, kept), rootOf(t, cp3)); err != nil || p.To != cp3.Size {
			t.Fatalf("consistency from %d to %d: %v", kept.Size, p.To, err)
		}
	}
	for seq := int64(1); seq <= cp3.Size; seq++ {
		p, err := d2.Client.LogProof(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		e, c, err := auditlog.VerifyProof(*p, v)
		if err != nil || e.Seq != seq || c.Size != cp3.Size {
			t.Fatalf("proof of event %d: %v (event %d, checkpoint %d)", seq, err, e.Seq, c.Size)
		}
	}
	if _, err := d2.Client.LogProof(ctx, cp3.Size+1); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Fatalf("a proof of an event that does not exist: %v", err)
	}
	chain, err := d2.Client.AncestryProof(ctx, tree["latex"].ID)
	if err != nil {
		t.Fatal(err)
	}
	links, _, err := auditlog.VerifyAncestry(*chain, v)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range links {
		got = append(got, l.Name+"/"+l.Responsible)
	}
	want := "LaTeX-Formatter/Dr. Schmidt, COAI Research Report-Writer/Dr. Schmidt, COAI Research Research-Coordinator/Dr. Schmidt, COAI Research"
	if strings.Join(got, " ") != want {
		t.Fatalf("proven chain: %q, want %q", strings.Join(got, " "), want)
	}
}

// TestLogVerifyThroughTheDaemonNamesTheChangedEvent changes the live
// database behind the daemon's back and asks the daemon to verify.
func TestLogVerifyThroughTheDaemonNamesTheChangedEvent(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedTree(t, d.Client)
	cp, err := d.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := d.Client.LogVerify(ctx, kin.LogVerifyRequest{}); err != nil || !rep.OK {
		t.Fatalf("an untouched log: %+v, %v", rep, err)
	}
	db, arg := storeDB(t, d)
	// A child's registration is made to name another human.
	var seq int64
	if err := db.QueryRow(`SELECT MIN(seq) FROM events WHERE seq > 1 AND data LIKE '%Dr. Schmidt%'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE events SET data = replace(data, 'Dr. Schmidt', 'Dr. Schmodt') WHERE seq = `+arg(1), seq); err != nil {
		t.Fatal(err)
	}
	rep, err := d.Client.LogVerify(ctx, kin.LogVerifyRequest{Checkpoint: cp.Note})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.BadIndex == nil || *rep.BadIndex != seq-1 {
		t.Fatalf("after changing event %d: %+v, want the first bad index %d", seq, rep, seq-1)
	}
	if _, err := db.Exec(`UPDATE events SET data = replace(data, 'Dr. Schmodt', 'Dr. Schmidt') WHERE seq = `+arg(1), seq); err != nil {
		t.Fatal(err)
	}
	if rep, err := d.Client.LogVerify(ctx, kin.LogVerifyRequest{}); err != nil || !rep.OK {
		t.Fatalf("after undoing the change: %+v, %v", rep, err)
	}
	if _, err := db.Exec(`DELETE FROM events WHERE seq > 9`); err != nil {
		t.Fatal(err)
	}
	rep, err = d.Client.LogVerify(ctx, kin.LogVerifyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.BadIndex == nil || *rep.BadIndex != 9 || !strings.Contains(rep.Problem, "missing") {
		t.Fatalf("after cutting the tail: %+v, want the first bad index 9", rep)
	}
}

// TestLogQueriesRefuseBadInput: bad sequence numbers and sizes are invalid
// requests, and leaves read back as the events they are.
func TestLogQueriesRefuseBadInput(t *testing.T) {
	d := kintest.StartDaemon(t)
	if cp, err := d.Client.LogCheckpoint(ctx); err != nil || cp.Size != 0 || cp.Key == "" {
		t.Fatalf("a checkpoint of the empty log: %+v, %v", cp, err)
	}
	register(t, d.Client, kin.RegisterRequest{Name: "solo", Role: "r", Responsible: "ops"})
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"proof of seq 0", func() error { _, err := d.Client.LogProof(ctx, 0); return err }},
		{"leaves from 0", func() error { _, err := d.Client.LogLeaves(ctx, 0, 0); return err }},
		{"consistency backwards", func() error { _, err := d.Client.LogConsistency(ctx, 5, 1); return err }},
		{"consistency beyond the log", func() error { _, err := d.Client.LogConsistency(ctx, 0, 1000); return err }},
	} {
		if err := c.call(); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
			t.Errorf("%s: %v, want %s", c.name, err, kin.ECodeInvalid)
		}
	}
	leaves, err := d.Client.LogLeaves(ctx, 1, 0)
	if err != nil || len(leaves) == 0 {
		t.Fatalf("leaves: %v, %v", leaves, err)
	}
	if e, err := auditlog.ParseLeaf([]byte(leaves[0])); err != nil || e.Seq != 1 || e.Type != kin.EventAgentRegistered {
		t.Fatalf("leaf 0 = %s: %v", leaves[0], err)
	}
}
