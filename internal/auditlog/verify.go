package auditlog

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

// Entry is one stored event and the tree hashes stored with it.
type Entry struct {
	Event kin.Event
	// Hashes is the stored form of the event's leaf (StoredForm: a
	// fingerprint of its hash and the large subtrees it completes).
	Hashes []byte
	// Damaged says why a column could not be read as kin writes it ("" if
	// all could): the entry is then reported as differing.
	Damaged string
}

// StoredCheckpoint is a signed checkpoint as kin keeps it.
type StoredCheckpoint struct {
	Size int64
	Time time.Time
	Note []byte
}

// Source is a stored log: what `kin log verify` recomputes.
type Source interface {
	// LogEntries calls fn for every stored event, in seq order, and stops
	// at fn's first error, returning it.
	LogEntries(ctx context.Context, fn func(Entry) error) error
	// LogCheckpoints returns every stored checkpoint, by size.
	LogCheckpoints(ctx context.Context) ([]StoredCheckpoint, error)
	// LogHashes returns tree hashes by their tlog storage index: those
	// StoredAt keeps from the stored forms, the others computed from the
	// events under them (ComputedFrom).
	LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)
}

// HashReader adapts a Source's stored hashes to tlog.
func HashReader(ctx context.Context, src Source) tlog.HashReader {
	return tlog.HashReaderFunc(func(x []int64) ([]tlog.Hash, error) { return src.LogHashes(ctx, x) })
}

// errStop ends a replay at its first finding.
var errStop = errors.New("stop")

// check is a signed tree head the replay compares its tree with.
type check struct {
	Checkpoint
	label string // "the checkpoint signed at ...", "your checkpoint"
}

// replay recomputes a tree leaf by leaf and compares it with what was
// recorded (stored hashes) and signed (checkpoints). The first difference
// ends it; report holds the outcome.
type replay struct {
	f      Frontier
	checks []check // by size
	next   int     // the first check not yet reached
	good   int64   // the size of the last check that matched
	leaf   []byte  // buffers, reused from event to event
	hashes []tlog.Hash
	form   []byte
	stored bool // entries carry stored hashes to compare (a store, not an export)
	report kin.LogReport
}

// setChecks sets the checks the replay meets, sorting them by size.
func (r *replay) setChecks(checks []check) {
	slices.SortStableFunc(checks, func(a, b check) int { return cmpInt(a.Size, b.Size) })
	r.checks = checks
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bad records the first difference, at leaf index i (or none, with i < 0).
func (r *replay) bad(i int64, format string, args ...any) error {
	r.report.OK = false
	r.report.Problem = fmt.Sprintf(format, args...)
	if i >= 0 {
		seq := i + 1
		r.report.BadIndex, r.report.BadSeq = &i, &seq
	}
	return errStop
}

// reach compares the tree with every check at its current size.
func (r *replay) reach() error {
	n := r.f.Size()
	for r.next < len(r.checks) && r.checks[r.next].Size <= n {
		c := r.checks[r.next]
		if c.Size == n {
			if root := r.f.Root(); root != c.Root {
				how := "differs from what was signed"
				if r.stored {
					how = "was changed and the hashes stored with it rewritten"
				}
				return r.bad(r.good, "the recomputed tree of %d events does not match %s (root %s, recomputed %s): an event from index %d to %d %s",
					n, c.label, c.Root, root, r.good, n-1, how)
			}
			r.good = n
			r.report.Checkpoints++
		}
		r.next++
	}
	return nil
}

// event checks one entry: its seq, its leaf against the hashes stored with
// it; then appends it.
func (r *replay) event(en Entry) error {
	if err := r.reach(); err != nil {
		return err
	}
	i := r.f.Size()
	e := en.Event
	switch {
	case en.Damaged != "":
		return r.bad(i, "event seq %d (index %d) is damaged: %s", i+1, i, en.Damaged)
	case e.Seq > i+1:
		return r.bad(i, "event seq %d (index %d) is missing: the next stored event is seq %d", i+1, i, e.Seq)
	case e.Seq != i+1:
		return r.bad(i, "event seq %d stands where seq %d (index %d) should", e.Seq, i+1, i)
	}
	r.leaf = AppendLeaf(append(r.leaf[:0], 0), e) // 0x00 || leaf, as the store hashes it
	r.hashes, _ = r.f.AppendTo(r.hashes[:0], HashLeaf(r.leaf))
	r.report.Events = i + 1
	if !r.stored {
		return nil
	}
	return r.compare(i, r.hashes, en.Hashes)
}

// compare compares the stored form of leaf i (StoredForm) with the one
// recomputed from its event.
func (r *replay) compare(i int64, got []tlog.Hash, want []byte) error {
	if len(want) < FingerprintSize || !bytes.Equal(want[:FingerprintSize], got[0][:FingerprintSize]) {
		return r.bad(i, "event seq %d (index %d) differs from the leaf hash stored with it: its content was changed after it was recorded", i+1, i)
	}
	r.form = StoredForm(r.form[:0], got)
	if !bytes.Equal(want, r.form) {
		return r.bad(i, "the tree hashes stored with event seq %d (index %d) differ from the recomputed ones (%d bytes stored, %d recomputed): a stored hash was changed", i+1, i, len(want), len(r.form))
	}
	return nil
}

// end checks what is left once every leaf was replayed.
func (r *replay) end() error {
	if err := r.reach(); err != nil {
		return err
	}
	if r.next < len(r.checks) {
		c := r.checks[r.next]
		n := r.f.Size()
		return r.bad(n, "the log holds %d events but %s covers %d: events from index %d on are missing", n, c.label, c.Size, n)
	}
	r.report.OK = true
	return nil
}

// result turns a replay's end into its report, keeping real errors apart
// from findings.
func (r *replay) result(err error) (kin.LogReport, error) {
	if err == nil {
		err = r.end()
	}
	if err != nil && !errors.Is(err, errStop) {
		return kin.LogReport{}, err
	}
	return r.report, nil
}

// VerifyOptions says what to verify a log against.
type VerifyOptions struct {
	// Verifier is the log's public key.
	Verifier note.Verifier
	// Kept is a signed checkpoint the user kept earlier, or nil.
	Kept []byte
}

// Verify recomputes the whole tree of a stored log from its events and
// checks it against the hashes stored with every event, against every
// stored checkpoint (whose signatures it checks first) and against the
// user's kept checkpoint, which must also be provably consistent with the
// latest stored one. Differences are findings, in the report; the error is
// for a log that could not be read.
func Verify(ctx context.Context, src Source, opts VerifyOptions) (kin.LogReport, error) {
	stored, err := src.LogCheckpoints(ctx)
	if err != nil {
		return kin.LogReport{}, err
	}
	var checks []check
	r := &replay{stored: true}
	for _, sc := range stored {
		c, err := OpenCheckpoint(sc.Note, opts.Verifier)
		label := fmt.Sprintf("the checkpoint of size %d signed at %s", sc.Size, sc.Time.UTC().Format(time.RFC3339))
		if err == nil && c.Size != sc.Size {
			err = fmt.Errorf("it is stored as size %d but its signed text says %d", sc.Size, c.Size)
		}
		if err != nil {
			r.bad(-1, "%s: %v", label, err)
			return r.report, nil
		}
		checks = append(checks, check{c, label})
	}
	// latest is a copy: checks is appended to and sorted below, which would
	// move another check under a pointer into it.
	var latest *check
	if len(checks) > 0 {
		l := checks[len(checks)-1]
		latest = &l
		r.report.Latest = &kin.LogCheckpoint{Size: latest.Size, Root: b64(latest.Root), Time: stored[len(stored)-1].Time, Note: string(stored[len(stored)-1].Note)}
	}
	var kept *check
	if opts.Kept != nil {
		c, err := OpenCheckpoint(opts.Kept, opts.Verifier)
		if err != nil {
			r.bad(-1, "your checkpoint: %v", err)
			return r.report, nil
		}
		kept = &check{c, fmt.Sprintf("your checkpoint of size %d", c.Size)}
		checks = append(checks, *kept)
	}
	r.setChecks(checks)
	report, err := r.result(src.LogEntries(ctx, r.event))
	if err != nil || !report.OK || kept == nil {
		return report, err
	}
	// The recomputed tree matched the kept checkpoint; a light client
	// would instead check that the latest signed head extends it.
	switch {
	case latest == nil || kept.Size > latest.Size:
		r.bad(-1, "your checkpoint of size %d is newer than every checkpoint kin keeps: a signed checkpoint was deleted", kept.Size)
		return r.report, nil
	case kept.Size == 0:
		r.report.Consistency = "your checkpoint is of the empty log"
	case kept.Size == latest.Size:
		r.report.Consistency = fmt.Sprintf("your checkpoint (size %d) matches the recomputed tree and is the latest checkpoint (size %d)", kept.Size, latest.Size)
	default:
		p, err := tlog.ProveTree(latest.Size, kept.Size, HashReader(ctx, src))
		if err == nil {
			err = tlog.CheckTree(p, latest.Size, latest.Root, kept.Size, kept.Root)
		}
		if err != nil {
			r.bad(-1, "no consistency proof from your checkpoint (size %d) to the latest (size %d): %v", kept.Size, latest.Size, err)
			return r.report, nil
		}
		r.report.Consistency = fmt.Sprintf("your checkpoint (size %d) matches the recomputed tree, and a consistency proof of %d hashes shows the latest checkpoint (size %d) extends it", kept.Size, len(p), latest.Size)
	}
	return r.report, nil
}

func b64(h tlog.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }
