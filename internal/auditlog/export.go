package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/note"

	"github.com/kin-agents/kin/kin"
)

// The files of an export.
const (
	ExportEvents      = "events.jsonl"      // one leaf per line, leaf index 0 first
	ExportCheckpoints = "checkpoints.jsonl" // one kin.LogCheckpoint per line, by size
	ExportConsistency = "consistency.jsonl" // one kin.LogConsistency per line: each checkpoint to the next
	ExportReadme      = "README.txt"
)

const exportReadme = `This is an export of a kin event log: a transparency log whose leaves are
kin's events (RFC 6962 hashing) and whose heads kin signed with its log key
(C2SP signed notes).

  events.jsonl       every event, one leaf per line: the exact bytes hashed,
                     leaf index 0 (seq 1) first
  checkpoints.jsonl  every signed checkpoint, one JSON object per line; its
                     "note" is the signed checkpoint (origin, size, root hash,
                     blank line, signature)
  consistency.jsonl  proofs that each checkpoint's tree extends the one before

To check it, with no daemon and no database, and a log key you obtained from
the log's operator (not from this folder):

  kin log verify-export DIR --key 'kin.host/log/...+hash+key'

It recomputes the tree from events.jsonl and requires every checkpoint's
signature and root, and every consistency proof, to hold; the last checkpoint
must cover every event.
`

// ExportWriter writes an export folder.
type ExportWriter struct {
	dir   string
	files []*os.File
	bufs  []*bufio.Writer
}

// CreateExport starts an export in dir, which must not exist or be empty.
func CreateExport(dir string) (*ExportWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if len(ents) > 0 {
		return nil, fmt.Errorf("export: %s is not empty; export into a new folder", dir)
	}
	w := &ExportWriter{dir: dir}
	for _, name := range []string{ExportEvents, ExportCheckpoints, ExportConsistency} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			w.abort()
			return nil, fmt.Errorf("export: %w", err)
		}
		w.files = append(w.files, f)
		w.bufs = append(w.bufs, bufio.NewWriterSize(f, 1<<16))
	}
	return w, nil
}

// Leaf adds the next leaf.
func (w *ExportWriter) Leaf(leaf []byte) error {
	if bytes.IndexByte(leaf, '\n') >= 0 {
		return fmt.Errorf("export: a leaf holds a newline; the log is damaged (run kin log verify)")
	}
	w.bufs[0].Write(leaf)
	return w.bufs[0].WriteByte('\n')
}

// Checkpoint adds a checkpoint; they go in by size.
func (w *ExportWriter) Checkpoint(c kin.LogCheckpoint) error { return writeLine(w.bufs[1], c) }

// Consistency adds a consistency proof.
func (w *ExportWriter) Consistency(c kin.LogConsistency) error { return writeLine(w.bufs[2], c) }

func writeLine(b *bufio.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(line)
	return b.WriteByte('\n')
}

// Close flushes and syncs the files and writes the README.
func (w *ExportWriter) Close() error {
	var errs []error
	for i, f := range w.files {
		errs = append(errs, w.bufs[i].Flush(), f.Sync(), f.Close())
	}
	errs = append(errs, os.WriteFile(filepath.Join(w.dir, ExportReadme), []byte(exportReadme), 0o644))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

func (w *ExportWriter) abort() {
	for _, f := range w.files {
		f.Close()
	}
}

// VerifyExport checks an export folder with nothing but the log's key: every
// checkpoint's signature, the tree recomputed from the leaves against every
// checkpoint, every consistency proof, and that the last checkpoint covers
// every leaf. Differences are findings in the report; the error is for a
// folder that could not be read.
func VerifyExport(dir string, v note.Verifier) (kin.LogReport, error) {
	fail := func(format string, args ...any) (kin.LogReport, error) {
		return kin.LogReport{Problem: fmt.Sprintf(format, args...)}, nil
	}
	cf, err := os.Open(filepath.Join(dir, ExportCheckpoints))
	if err != nil {
		return kin.LogReport{}, fmt.Errorf("export: %w", err)
	}
	defer cf.Close()
	var checks []check
	var last *kin.LogCheckpoint
	roots := map[int64]check{}
	err = eachLine(cf, 1<<20, func(n int, line []byte) error {
		var c kin.LogCheckpoint
		if err := json.Unmarshal(line, &c); err != nil {
			return fmt.Errorf("line %d is not a checkpoint: %v", n, err)
		}
		cp, err := OpenCheckpoint([]byte(c.Note), v)
		if err != nil {
			return fmt.Errorf("line %d: %v", n, err)
		}
		if cp.Size != c.Size || b64(cp.Root) != c.Root {
			return fmt.Errorf("line %d: its size and root are not those of its signed note", n)
		}
		if last != nil && cp.Size <= last.Size {
			return fmt.Errorf("line %d: checkpoints are not in increasing size", n)
		}
		ch := check{cp, fmt.Sprintf("the checkpoint of size %d (%s line %d)", cp.Size, ExportCheckpoints, n)}
		checks = append(checks, ch)
		roots[cp.Size] = ch
		last = &c
		return nil
	})
	if err != nil {
		return fail("%s: %v", ExportCheckpoints, err)
	}
	if last == nil {
		return fail("%s holds no checkpoint: nothing in the export is signed", ExportCheckpoints)
	}
	pf, err := os.Open(filepath.Join(dir, ExportConsistency))
	if err != nil {
		return kin.LogReport{}, fmt.Errorf("export: %w", err)
	}
	defer pf.Close()
	proven := map[[2]int64]bool{}
	err = eachLine(pf, 1<<20, func(n int, line []byte) error {
		var p kin.LogConsistency
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("line %d is not a consistency proof: %v", n, err)
		}
		from, ok1 := roots[p.From]
		to, ok2 := roots[p.To]
		if !ok1 || !ok2 {
			return fmt.Errorf("line %d: a proof from size %d to %d, which are not both checkpoints", n, p.From, p.To)
		}
		if err := VerifyConsistency(p, from.Root, to.Root); err != nil {
			return fmt.Errorf("line %d: %v", n, err)
		}
		proven[[2]int64{p.From, p.To}] = true
		return nil
	})
	if err != nil {
		return fail("%s: %v", ExportConsistency, err)
	}
	// Each checkpoint must be proven to extend the one before: a missing
	// proof is a line taken out.
	for k := 1; k < len(checks); k++ {
		if from, to := checks[k-1].Size, checks[k].Size; !proven[[2]int64{from, to}] {
			return fail("%s: no proof that the checkpoint of size %d extends the one of size %d before it", ExportConsistency, to, from)
		}
	}
	ef, err := os.Open(filepath.Join(dir, ExportEvents))
	if err != nil {
		return kin.LogReport{}, fmt.Errorf("export: %w", err)
	}
	defer ef.Close()
	rp := &replay{}
	rp.setChecks(checks)
	rp.report.Latest = last
	err = eachLine(ef, 64<<20, func(_ int, line []byte) error {
		i := rp.f.Size()
		e, err := ParseLeaf(line)
		if err != nil {
			return rp.bad(i, "leaf index %d: %v", i, err)
		}
		if e.Seq != i+1 {
			return rp.bad(i, "leaf index %d is seq %d, not %d", i, e.Seq, i+1)
		}
		return rp.event(Entry{Event: e})
	})
	if le := (*lineError)(nil); errors.As(err, &le) {
		// A cut or overlong line is a finding at the leaf it holds, not a
		// folder that could not be read.
		err = rp.bad(rp.f.Size(), "%s: %v", ExportEvents, err)
	}
	report, err := rp.result(err)
	if err != nil || !report.OK {
		return report, err
	}
	if n := report.Events; n != last.Size {
		rp.bad(last.Size, "the export holds %d events but its last checkpoint covers %d: events from index %d on are signed by no checkpoint", n, last.Size, last.Size)
		return rp.report, nil
	}
	return report, nil
}

// lineError is a line eachLine could not hand on: cut or too long.
type lineError struct{ msg string }

func (e *lineError) Error() string { return e.msg }

// eachLine calls fn for every line of r (without its newline), counting
// from 1; a line longer than max is an error.
func eachLine(r io.Reader, max int, fn func(n int, line []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(full) <= max {
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			if len(full) > max {
				return &lineError{fmt.Sprintf("line %d is longer than %d bytes", n, max)}
			}
			line = full
		}
		if err == io.EOF {
			if len(line) > 0 {
				return &lineError{fmt.Sprintf("line %d does not end in a newline: the file was cut", n)}
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(n, line[:len(line)-1]); err != nil {
			return err
		}
	}
}
