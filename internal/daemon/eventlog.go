package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The verifiable event log (internal/auditlog): the store hashes every
// event into a Merkle tree as it appends it; the daemon signs the tree's
// head with its log key, at least every Config.LogCheckpointEvents events or
// Config.LogCheckpointInterval, and on shutdown, and serves checkpoints and
// proofs.

// Log defaults.
const (
	defaultCheckpointEvents   = 1000
	defaultCheckpointInterval = 10 * time.Second
	logKeyDir                 = "log" // under <home>/keys
	maxLeavesPage             = 10000
)

type logState struct {
	key      *auditlog.Key
	verifier note.Verifier
	every    int64
	interval time.Duration

	mu   sync.Mutex // serialises signing
	last auditlog.StoredCheckpoint
}

// openLog loads the log key and the latest checkpoint, and checks that the
// stored tree still has the root that checkpoint signed.
func (d *Daemon) openLog(ctx context.Context) error {
	key, err := auditlog.LoadKey(filepath.Join(d.cfg.Home, keysDir, logKeyDir))
	if err != nil {
		return err
	}
	v, err := auditlog.NewVerifier(key.VerifierKey())
	if err != nil {
		return err
	}
	d.logst = &logState{key: key, verifier: v, every: int64(d.cfg.LogCheckpointEvents), interval: d.cfg.LogCheckpointInterval}
	if d.logst.every <= 0 {
		d.logst.every = defaultCheckpointEvents
	}
	if d.logst.interval <= 0 {
		d.logst.interval = defaultCheckpointInterval
	}
	last, err := d.store.LogCheckpointLatest(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	d.logst.last = last
	// A cheap look at the newest signed head; `kin log verify` does the
	// whole tree. A mismatch is logged, not fatal: kin keeps recording, and
	// verify keeps reporting the damage.
	size, err := d.store.LogSize(ctx)
	if err != nil {
		return err
	}
	c, err := auditlog.OpenCheckpoint(last.Note, v)
	switch {
	case err != nil:
		d.log.Error("event log: the latest checkpoint does not verify with the log key; run kin log verify", "size", last.Size, "err", err)
	case c.Size > size:
		d.log.Error("event log: the latest checkpoint covers more events than the store holds; run kin log verify", "checkpoint", c.Size, "events", size)
	default:
		root, err := tlog.TreeHash(c.Size, auditlog.HashReader(ctx, d.store))
		if err != nil || root != c.Root {
			d.log.Error("event log: the stored tree does not match the latest checkpoint; run kin log verify", "size", c.Size, "err", err)
		}
	}
	return nil
}

// checkpoint returns a checkpoint covering every committed event, signing
// and keeping a new one when events were appended since the last (or the
// first, of the empty log: "nothing was recorded by then" is worth a
// signature too).
func (d *Daemon) checkpoint(ctx context.Context) (auditlog.StoredCheckpoint, error) {
	s := d.logst
	s.mu.Lock()
	defer s.mu.Unlock()
	size, root, err := d.store.LogHead(ctx)
	if err != nil {
		return auditlog.StoredCheckpoint{}, d.storeError(err)
	}
	if size == s.last.Size && s.last.Note != nil {
		return s.last, nil
	}
	msg, err := s.key.Sign(auditlog.Checkpoint{Origin: s.key.Name(), Size: size, Root: root})
	if err != nil {
		return auditlog.StoredCheckpoint{}, err
	}
	cp := auditlog.StoredCheckpoint{Size: size, Time: d.now(), Note: msg}
	if err := d.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error { return tx.LogCheckpointInsert(ctx, cp) }); err != nil {
		return auditlog.StoredCheckpoint{}, fmt.Errorf("keep checkpoint: %w", err)
	}
	s.last = cp
	return cp, nil
}

// signCheckpoints signs a checkpoint once LogCheckpointEvents events were
// appended since the last, or every LogCheckpointInterval when any were.
func (d *Daemon) signCheckpoints() {
	defer d.wg.Done()
	t := time.NewTicker(d.logst.interval)
	defer t.Stop()
	for {
		wait := d.store.Wait()
		select {
		case <-d.closing:
			return
		case <-t.C:
		case <-wait:
			d.logst.mu.Lock()
			last := d.logst.last.Size
			d.logst.mu.Unlock()
			if size, err := d.store.LogSize(context.Background()); err != nil || size-last < d.logst.every {
				continue // an error: the next tick signs, or logs it
			}
		}
		if _, err := d.checkpoint(context.Background()); err != nil && kin.ErrorCodeOf(err) != kin.ECodeNotFound {
			d.log.Error("event log: sign a checkpoint", "err", err)
		}
	}
}

// finalCheckpoint signs the head at shutdown, after the last event.
func (d *Daemon) finalCheckpoint() {
	if d.logst == nil || d.store == nil {
		return
	}
	if _, err := d.checkpoint(context.Background()); err != nil && kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		d.log.Error("event log: sign the shutdown checkpoint", "err", err)
	}
}

// publicCheckpoint is a stored checkpoint as the API shows it.
func (d *Daemon) publicCheckpoint(cp auditlog.StoredCheckpoint, withKey bool) (kin.LogCheckpoint, error) {
	c, err := auditlog.OpenCheckpoint(cp.Note, d.logst.verifier)
	if err != nil {
		return kin.LogCheckpoint{}, fmt.Errorf("stored checkpoint of size %d: %w", cp.Size, err)
	}
	out := kin.LogCheckpoint{Size: c.Size, Root: base64.StdEncoding.EncodeToString(c.Root[:]), Time: cp.Time, Note: string(cp.Note)}
	if withKey {
		out.Key = d.logst.key.VerifierKey()
	}
	return out, nil
}

// LogCheckpoint returns a signed checkpoint covering every event so far.
// Any caller may read it: it reveals the log's size and root only.
func (d *Daemon) LogCheckpoint(ctx context.Context) (*kin.LogCheckpoint, error) {
	cp, err := d.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	out, err := d.publicCheckpoint(cp, true)
	return &out, err
}

// LogCheckpoints returns every kept checkpoint, by size.
func (d *Daemon) LogCheckpoints(ctx context.Context) ([]kin.LogCheckpoint, error) {
	if err := d.operatorOnly(ctx, "read the event log's checkpoints"); err != nil {
		return nil, err
	}
	cps, err := d.store.LogCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]kin.LogCheckpoint, 0, len(cps))
	for _, cp := range cps {
		c, err := d.publicCheckpoint(cp, false)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// LogProof proves that event seq is in the log, against a checkpoint that
// covers every event so far.
func (d *Daemon) LogProof(ctx context.Context, seq int64) (*kin.LogProof, error) {
	if err := d.operatorOnly(ctx, "read proofs of the event log"); err != nil {
		return nil, err
	}
	if seq < 1 {
		return nil, kin.Errorf(kin.ECodeInvalid, "event seq %d: sequence numbers start at 1", seq)
	}
	cp, err := d.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if seq > cp.Size {
		return nil, kin.Errorf(kin.ECodeNotFound, "no event %d: the log holds %d events", seq, cp.Size)
	}
	es, err := d.store.EventList(ctx, kin.EventFilter{Since: seq - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(es) == 0 || es[0].Seq != seq {
		return nil, fmt.Errorf("event %d is missing from the store: run kin log verify", seq)
	}
	p, err := auditlog.Prove(ctx, d.store, es[0], cp)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// LogConsistency proves that the tree of size from is a prefix of the tree
// of size to (0: a checkpoint covering every event so far).
func (d *Daemon) LogConsistency(ctx context.Context, from, to int64) (*kin.LogConsistency, error) {
	if err := d.operatorOnly(ctx, "read proofs of the event log"); err != nil {
		return nil, err
	}
	if to == 0 {
		cp, err := d.checkpoint(ctx)
		if err != nil {
			return nil, err
		}
		to = cp.Size
	}
	size, err := d.store.LogSize(ctx)
	if err != nil {
		return nil, d.storeError(err)
	}
	if from < 0 || from > to || to > size {
		return nil, kin.Errorf(kin.ECodeInvalid, "no consistency proof from size %d to %d: sizes must satisfy 0 <= from <= to <= %d (the log's size)", from, to, size)
	}
	p, err := auditlog.ProveConsistency(ctx, d.store, from, to)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// LogLeaves returns the exact leaves of events from seq from on, at most
// limit (0: a page of maxLeavesPage).
func (d *Daemon) LogLeaves(ctx context.Context, from int64, limit int) ([]string, error) {
	if err := d.operatorOnly(ctx, "read the event log's leaves"); err != nil {
		return nil, err
	}
	if from < 1 {
		return nil, kin.Errorf(kin.ECodeInvalid, "from %d: sequence numbers start at 1", from)
	}
	if limit <= 0 || limit > maxLeavesPage {
		limit = maxLeavesPage
	}
	es, err := d.store.EventList(ctx, kin.EventFilter{Since: from - 1, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(auditlog.Leaf(e))
	}
	return out, nil
}

// LogVerify recomputes the whole log (see auditlog.Verify).
func (d *Daemon) LogVerify(ctx context.Context, req kin.LogVerifyRequest) (*kin.LogReport, error) {
	if err := d.operatorOnly(ctx, "verify the event log"); err != nil {
		return nil, err
	}
	opts := auditlog.VerifyOptions{Verifier: d.logst.verifier}
	if req.Checkpoint != "" {
		opts.Kept = []byte(req.Checkpoint)
	}
	r, err := auditlog.Verify(ctx, d.store, opts)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// AncestryProof proves an agent's responsibility chain: each link's
// agent.registered event with its inclusion proof, against one checkpoint.
// It follows Ancestors' rule on who may ask.
func (d *Daemon) AncestryProof(ctx context.Context, id kin.AgentID) (*kin.AncestryProof, error) {
	chain, err := d.Ancestors(ctx, id)
	if err != nil {
		return nil, err
	}
	cp, err := d.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	out := &kin.AncestryProof{Checkpoint: string(cp.Note)}
	for _, a := range chain {
		e, err := d.store.LogRegistration(ctx, a.ID)
		if err != nil {
			return nil, fmt.Errorf("agent %d's registration event: %w", a.ID, err)
		}
		var reg kin.AgentRegisteredData
		if err := json.Unmarshal(e.Data, &reg); err != nil {
			return nil, fmt.Errorf("agent %d's registration event: %w", a.ID, err)
		}
		p, err := auditlog.Prove(ctx, d.store, e, cp)
		if err != nil {
			return nil, err
		}
		out.Links = append(out.Links, kin.AncestryLink{Agent: reg.Agent, Parent: reg.Parent, Name: reg.Name,
			Responsible: reg.Responsible, Generation: reg.Generation, Proof: p})
	}
	return out, nil
}
