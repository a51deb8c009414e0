package logsigner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The verifiable event log (internal/auditlog): the store hashes every
// event into a Merkle tree as it appends it; the Signer signs the tree's
// head with its log key, at least every Config.Every events or
// Config.Interval, and on shutdown, and serves checkpoints and proofs.

// Log defaults.
const (
	defaultCheckpointEvents   = 1000
	defaultCheckpointInterval = 10 * time.Second
	maxLeavesPage             = 10000
)

// Signer is the verifiable event log's signer: it keeps the log key, signs
// checkpoints of the store's tree (Run, on a schedule, and Close, the
// shutdown's), and answers kin.LogService.
type Signer struct {
	st        store.Store
	log       *slog.Logger
	clock     func() time.Time
	ancestors func(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error)

	key      *auditlog.Key
	verifier note.Verifier
	host     string // this host in the fleet; "" signs alone
	every    int64
	interval time.Duration

	mu   sync.Mutex // serialises signing
	last auditlog.StoredCheckpoint

	started bool // Start was called: Close waits for its goroutine
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Config is what a Signer is built from.
type Config struct {
	KeyDir string // the log key's directory (<home>/keys/log)
	// Every and Interval: sign once this many events were appended since
	// the last checkpoint (0: 1000), and at this interval when any were (0:
	// 10 s).
	Every    int
	Interval time.Duration
	Store    store.Store
	Clock    func() time.Time
	Log      *slog.Logger
	// Ancestors is the registry's Ancestors: who may ask for an agent's
	// ancestry proof, and the chain it proves.
	Ancestors func(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error)
	// Host is this daemon's host in the fleet on the store ("": alone).
	// The fleet has one log key, recorded in the store by its first host;
	// a host with another key is refused. Only the host holding the
	// "log-signer" lease signs on schedule and at its shutdown.
	Host string
}

func (sg *Signer) now() time.Time { return sg.clock() }

// VerifierKey is the log key's public verifier key (a note verifier key).
func (sg *Signer) VerifierKey() string { return sg.key.VerifierKey() }

// Derive is a secret derived from the log key (auditlog.Key.Derive): the
// fleet's hosts, which share the key, share it.
func (sg *Signer) Derive(label string) []byte { return sg.key.Derive(label) }

// New loads the log key and the latest checkpoint, and checks that the
// stored tree still has the root that checkpoint signed. Run signs on a
// schedule until Close.
func New(ctx context.Context, c Config) (*Signer, error) {
	sg := &Signer{st: c.Store, log: c.Log, clock: c.Clock, ancestors: c.Ancestors, closing: make(chan struct{}), done: make(chan struct{})}
	if sg.log == nil {
		sg.log = slog.New(slog.DiscardHandler)
	}
	if err := sg.open(ctx, c); err != nil {
		return nil, err
	}
	return sg, nil
}

func (sg *Signer) open(ctx context.Context, cfg Config) error {
	key, err := auditlog.LoadKey(cfg.KeyDir)
	if err != nil {
		return err
	}
	v, err := auditlog.NewVerifier(key.VerifierKey())
	if err != nil {
		return err
	}
	sg.key, sg.verifier, sg.every, sg.interval, sg.host = key, v, int64(cfg.Every), cfg.Interval, cfg.Host
	if sg.every <= 0 {
		sg.every = defaultCheckpointEvents
	}
	if sg.interval <= 0 {
		sg.interval = defaultCheckpointInterval
	}
	if err := sg.fleetKey(ctx, cfg.KeyDir); err != nil {
		return err
	}
	last, err := sg.st.LogCheckpointLatest(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	sg.last = last
	// A cheap look at the newest signed head; `kin log verify` does the
	// whole tree. A mismatch is logged, not fatal: kin keeps recording, and
	// verify keeps reporting the damage.
	size, err := sg.st.LogSize(ctx)
	if err != nil {
		return err
	}
	c, err := auditlog.OpenCheckpoint(last.Note, v)
	switch {
	case err != nil:
		sg.log.Error("event log: the latest checkpoint does not verify with the log key; run kin log verify", "size", last.Size, "err", err)
	case c.Size > size:
		sg.log.Error("event log: the latest checkpoint covers more events than the store holds; run kin log verify", "checkpoint", c.Size, "events", size)
	default:
		root, err := tlog.TreeHash(c.Size, auditlog.HashReader(ctx, sg.st))
		if err != nil || root != c.Root {
			sg.log.Error("event log: the stored tree does not match the latest checkpoint; run kin log verify", "size", c.Size, "err", err)
		}
	}
	return nil
}

// checkpoint returns a checkpoint covering every committed event, signing
// and keeping a new one when events were appended since the last (or the
// first, of the empty log: "nothing was recorded by then" is worth a
// signature too).
func (sg *Signer) checkpoint(ctx context.Context) (auditlog.StoredCheckpoint, error) {
	s := sg
	s.mu.Lock()
	defer s.mu.Unlock()
	size, root, err := sg.st.LogHead(ctx)
	if err != nil {
		return auditlog.StoredCheckpoint{}, store.KinError(err)
	}
	if size == s.last.Size && s.last.Note != nil {
		return s.last, nil
	}
	msg, err := s.key.Sign(auditlog.Checkpoint{Origin: s.key.Name(), Size: size, Root: root})
	if err != nil {
		return auditlog.StoredCheckpoint{}, err
	}
	cp := auditlog.StoredCheckpoint{Size: size, Time: sg.now(), Note: msg}
	if err := store.UpdateAfter(ctx, sg.st, func(tx store.Tx, _ *store.AfterCommit) error { return tx.LogCheckpointInsert(ctx, cp) }); err != nil {
		return auditlog.StoredCheckpoint{}, fmt.Errorf("keep checkpoint: %w", err)
	}
	s.last = cp
	return cp, nil
}

// Start signs a checkpoint, from now until Close, once Config.Every events
// were appended since the last, or every Config.Interval when any were.
func (sg *Signer) Start() {
	sg.started = true
	go sg.run()
}

func (sg *Signer) run() {
	defer close(sg.done)
	t := time.NewTicker(sg.interval)
	defer t.Stop()
	for {
		wait := sg.st.Wait()
		select {
		case <-sg.closing:
			return
		case <-t.C:
			if !sg.unsigned() {
				continue // nothing new: no lease taken, no commit made
			}
		case <-wait:
			sg.mu.Lock()
			last := sg.last.Size
			sg.mu.Unlock()
			if size, err := sg.st.LogSize(context.Background()); err != nil || size-last < sg.every {
				continue // an error: the next tick signs, or logs it
			}
		}
		if !sg.leader() {
			continue // another host of the fleet signs
		}
		if _, err := sg.checkpoint(context.Background()); err != nil && kin.ErrorCodeOf(err) != kin.ECodeNotFound {
			sg.log.Error("event log: sign a checkpoint", "err", err)
		}
	}
}

// unsigned reports whether events were appended since the last checkpoint
// this signer kept (or it kept none): an error counts as yes, so that
// signing reports it.
func (sg *Signer) unsigned() bool {
	size, err := sg.st.LogSize(context.Background())
	sg.mu.Lock()
	defer sg.mu.Unlock()
	return err != nil || size != sg.last.Size || sg.last.Note == nil
}

// Close stops what Start started and signs the head: call it after the last
// event, so that the shutdown's own events are covered.
func (sg *Signer) Close() {
	sg.once.Do(func() { close(sg.closing) })
	if sg.started {
		<-sg.done
	}
	if !sg.leader() {
		return // the signer of the fleet signs the head
	}
	if _, err := sg.checkpoint(context.Background()); err != nil && kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		sg.log.Error("event log: sign the shutdown checkpoint", "err", err)
	}
	if sg.host != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sg.st.Update(ctx, func(tx store.Tx) error { return tx.LeaseRelease(ctx, signerLease, sg.host) }); err != nil {
			sg.log.Error("event log: release the signer's lease", "err", err)
		}
	}
}

// publicCheckpoint is a stored checkpoint as the API shows it.
func (sg *Signer) publicCheckpoint(cp auditlog.StoredCheckpoint, withKey bool) (kin.LogCheckpoint, error) {
	c, err := auditlog.OpenCheckpoint(cp.Note, sg.verifier)
	if err != nil {
		return kin.LogCheckpoint{}, fmt.Errorf("stored checkpoint of size %d: %w", cp.Size, err)
	}
	out := kin.LogCheckpoint{Size: c.Size, Root: base64.StdEncoding.EncodeToString(c.Root[:]), Time: cp.Time, Note: string(cp.Note)}
	if withKey {
		out.Key = sg.key.VerifierKey()
	}
	return out, nil
}

// LogCheckpoint returns a signed checkpoint covering every event so far.
// Any caller may read it: it reveals the log's size and root only.
func (sg *Signer) LogCheckpoint(ctx context.Context) (*kin.LogCheckpoint, error) {
	cp, err := sg.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	out, err := sg.publicCheckpoint(cp, true)
	return &out, err
}

// LogCheckpoints returns every kept checkpoint, by size.
func (sg *Signer) LogCheckpoints(ctx context.Context) ([]kin.LogCheckpoint, error) {
	if err := caller.OperatorOnly(ctx, "read the event log's checkpoints"); err != nil {
		return nil, err
	}
	cps, err := sg.st.LogCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]kin.LogCheckpoint, 0, len(cps))
	for _, cp := range cps {
		c, err := sg.publicCheckpoint(cp, false)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// LogProof proves that event seq is in the log, against a checkpoint that
// covers every event so far.
func (sg *Signer) LogProof(ctx context.Context, seq int64) (*kin.LogProof, error) {
	if err := caller.OperatorOnly(ctx, "read proofs of the event log"); err != nil {
		return nil, err
	}
	if seq < 1 {
		return nil, kin.Errorf(kin.ECodeInvalid, "event seq %d: sequence numbers start at 1", seq)
	}
	cp, err := sg.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if seq > cp.Size {
		return nil, kin.Errorf(kin.ECodeNotFound, "no event %d: the log holds %d events", seq, cp.Size)
	}
	es, err := sg.st.EventList(ctx, kin.EventFilter{Since: seq - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(es) == 0 || es[0].Seq != seq {
		return nil, fmt.Errorf("event %d is missing from the store: run kin log verify", seq)
	}
	p, err := auditlog.Prove(ctx, sg.st, es[0], cp)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// LogConsistency proves that the tree of size from is a prefix of the tree
// of size to (0: a checkpoint covering every event so far).
func (sg *Signer) LogConsistency(ctx context.Context, from, to int64) (*kin.LogConsistency, error) {
	if err := caller.OperatorOnly(ctx, "read proofs of the event log"); err != nil {
		return nil, err
	}
	if to == 0 {
		cp, err := sg.checkpoint(ctx)
		if err != nil {
			return nil, err
		}
		to = cp.Size
	}
	size, err := sg.st.LogSize(ctx)
	if err != nil {
		return nil, store.KinError(err)
	}
	if from < 0 || from > to || to > size {
		return nil, kin.Errorf(kin.ECodeInvalid, "no consistency proof from size %d to %d: sizes must satisfy 0 <= from <= to <= %d (the log's size)", from, to, size)
	}
	p, err := auditlog.ProveConsistency(ctx, sg.st, from, to)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// LogLeaves returns the exact leaves of events from seq from on, at most
// limit (0: a page of maxLeavesPage).
func (sg *Signer) LogLeaves(ctx context.Context, from int64, limit int) ([]string, error) {
	if err := caller.OperatorOnly(ctx, "read the event log's leaves"); err != nil {
		return nil, err
	}
	if from < 1 {
		return nil, kin.Errorf(kin.ECodeInvalid, "from %d: sequence numbers start at 1", from)
	}
	if limit <= 0 || limit > maxLeavesPage {
		limit = maxLeavesPage
	}
	es, err := sg.st.EventList(ctx, kin.EventFilter{Since: from - 1, Limit: limit})
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
func (sg *Signer) LogVerify(ctx context.Context, req kin.LogVerifyRequest) (*kin.LogReport, error) {
	if err := caller.OperatorOnly(ctx, "verify the event log"); err != nil {
		return nil, err
	}
	opts := auditlog.VerifyOptions{Verifier: sg.verifier}
	if req.Checkpoint != "" {
		opts.Kept = []byte(req.Checkpoint)
	}
	r, err := auditlog.Verify(ctx, sg.st, opts)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// AncestryProof proves an agent's responsibility chain: each link's
// agent.registered event with its inclusion proof, against one checkpoint.
// It follows Ancestors' rule on who may ask.
func (sg *Signer) AncestryProof(ctx context.Context, id kin.AgentID) (*kin.AncestryProof, error) {
	chain, err := sg.ancestors(ctx, id)
	if err != nil {
		return nil, err
	}
	cp, err := sg.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	out := &kin.AncestryProof{Checkpoint: string(cp.Note)}
	for _, a := range chain {
		e, err := sg.st.LogRegistration(ctx, a.ID)
		if err != nil {
			return nil, fmt.Errorf("agent %d's registration event: %w", a.ID, err)
		}
		var reg kin.AgentRegisteredData
		if err := json.Unmarshal(e.Data, &reg); err != nil {
			return nil, fmt.Errorf("agent %d's registration event: %w", a.ID, err)
		}
		p, err := auditlog.Prove(ctx, sg.st, e, cp)
		if err != nil {
			return nil, err
		}
		out.Links = append(out.Links, kin.AncestryLink{Agent: reg.Agent, Parent: reg.Parent, Name: reg.Name,
			Responsible: reg.Responsible, Generation: reg.Generation, Proof: p})
	}
	return out, nil
}
