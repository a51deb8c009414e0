package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store/storeopen"
	"github.com/kin-agents/kin/kin"
)

// maxProofFile bounds what the log commands read from a file: a proof, a
// chain proof, a checkpoint or a key.
const maxProofFile = 16 << 20

// ExitNotVerified: kin log verify, verify-export or verify-proof ran and
// found that the log, export or proof does not hold.
const ExitNotVerified = 5

func (a *app) logCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Audit the verifiable event log: checkpoints, proofs, export, verify",
		Long: `Every event kin records is a leaf of an append-only Merkle tree (RFC 6962
hashing, as in Certificate Transparency and Go's checksum database), whose
hashes are stored with the event in the same transaction. kin signs the
tree's head with its own Ed25519 log key (in <home>/keys/log, separate from
the identity keys) as a checkpoint in the signed-note format: at least every
1000 events or 10 seconds while events arrive, and on shutdown.

Keep a checkpoint (kin log checkpoint > cp.txt) and the log's public key
(kin log key): later, kin log verify --from-checkpoint cp.txt proves that
nothing recorded before it was changed, removed or reordered since, and
kin log export / verify-export let a third party check the whole log with
nothing but the key.

Exit status of the verify commands: 0 when everything holds, 5 when
something does not (the report names the first bad leaf index), 1 when the
check could not run, 2 when the command line is wrong.`,
		Example: `  kin log key > log.pub
  kin log checkpoint > cp.txt
  kin log verify --from-checkpoint cp.txt
  kin log proof 42 > proof.json && kin log verify-proof proof.json --key "$(cat log.pub)"
  kin log export /tmp/audit && kin log verify-export /tmp/audit --key "$(cat log.pub)"`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.logCheckpointCommand(), a.logKeyCommand(), a.logVerifyCommand(), a.logProofCommand(),
		a.logVerifyProofCommand(), a.logExportCommand(), a.logVerifyExportCommand())
	return cmd
}

func (a *app) logCheckpointCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "checkpoint",
		Short: "Print a signed checkpoint covering every event so far",
		Long: `Print the latest signed checkpoint, signing a new one first if events were
recorded since: the signed note (origin, size, root hash, a blank line, the
signature), exactly what to keep for "kin log verify --from-checkpoint".
With --json: size, root, time, note and the log's public key.`,
		Example: `  kin log checkpoint > cp-$(date +%F).txt`,
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cp, err := a.latestCheckpoint(cmd)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(cp)
			}
			_, err = io.WriteString(a.env.Stdout, cp.Note)
			return err
		}),
	}
}

func (a *app) logKeyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "key",
		Short: "Print the log's public key",
		Long: `Print the public key that checks the log's checkpoints, in the signed-note
form name+hash+key. Hand it to auditors through a channel they trust: it is
all "kin log verify-export" and "kin log verify-proof" need.`,
		Example: `  kin log key > log.pub`,
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cp, err := a.latestCheckpoint(cmd)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(map[string]string{"key": cp.Key})
			}
			_, err = fmt.Fprintln(a.env.Stdout, cp.Key)
			return err
		}),
	}
}

// latestCheckpoint asks the daemon for a checkpoint covering every event.
func (a *app) latestCheckpoint(cmd *cobra.Command) (*kin.LogCheckpoint, error) {
	svc, err := a.service()
	if err != nil {
		return nil, err
	}
	return svc.LogCheckpoint(cmd.Context())
}

func (a *app) logVerifyCommand() *cobra.Command {
	var from, db string
	var key keyFlags
	cmd := &cobra.Command{
		Use:   "verify [--from-checkpoint FILE] [--db FILE --key KEY]",
		Short: "Recompute the whole log and check it against every signed checkpoint",
		Long: `Recompute the Merkle tree from every stored event and check it against the
hashes stored with each event, against every checkpoint kin kept (and their
signatures), and, with --from-checkpoint, against a checkpoint you kept
earlier: the tree at its size must have its root, and a consistency proof
must show the latest checkpoint extends it. Any difference is reported with
the first bad leaf index (leaf index = event seq - 1).

The daemon does the work by default. With --db, kin reads a database file
(or the store a DSN such as sqlite:PATH names) itself, read-only, with no
daemon (a stopped daemon's kin.db or a copy); then --key (or --key-file)
gives the log's public key.

Exit status: 0 when it holds, 5 when it does not, 1 when it could not run.`,
		Example: `  kin log verify
  kin log verify --from-checkpoint cp.txt
  kin log verify --db /backup/kin.db --key-file log.pub --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			var kept []byte
			if from != "" {
				var err error
				if kept, err = readCheckpointFile(from); err != nil {
					return err
				}
			}
			var rep *kin.LogReport
			if db != "" {
				v, err := key.verifier()
				if err != nil {
					return err
				}
				dsn := db
				if !storeopen.IsDSN(db) {
					dsn = "sqlite:" + db // a file
				}
				ro, err := storeopen.OpenReadOnly(cmd.Context(), dsn, storeopen.Options{})
				if err != nil {
					return err
				}
				defer ro.Close()
				r, err := auditlog.Verify(cmd.Context(), ro, auditlog.VerifyOptions{Verifier: v, Kept: kept})
				if err != nil {
					return err
				}
				rep = &r
			} else {
				if key.set() {
					return &usageError{"--key and --key-file go with --db: the daemon checks with its own key"}
				}
				svc, err := a.service()
				if err != nil {
					return err
				}
				if rep, err = svc.LogVerify(cmd.Context(), kin.LogVerifyRequest{Checkpoint: string(kept)}); err != nil {
					return err
				}
			}
			return a.printReport(rep)
		}),
	}
	cmd.Flags().StringVar(&from, "from-checkpoint", "", "also check against this kept checkpoint `file` (a signed note, or kin log checkpoint --json)")
	cmd.Flags().StringVar(&db, "db", "", "verify this database `file` (or store DSN, sqlite:PATH) directly, without a daemon")
	key.add(cmd)
	return cmd
}

// printReport prints a verification report and ends with ExitNotVerified
// when it failed.
func (a *app) printReport(r *kin.LogReport) error {
	if a.jsonOut {
		if err := a.printJSON(r); err != nil {
			return err
		}
	} else if r.OK {
		fmt.Fprintf(a.env.Stdout, "ok: %d events recomputed, %s match", r.Events, plural(r.Checkpoints, "signed checkpoint", "signed checkpoints"))
		if r.Latest != nil {
			fmt.Fprintf(a.env.Stdout, " (latest: size %d, root %s)", r.Latest.Size, r.Latest.Root)
		}
		fmt.Fprintln(a.env.Stdout)
		if r.Latest == nil || r.Latest.Size < r.Events {
			signed := int64(0)
			if r.Latest != nil {
				signed = r.Latest.Size
			}
			fmt.Fprintf(a.env.Stdout, "note: the last %d events are under no checkpoint yet (kin signs one within seconds, or run kin log checkpoint)\n", r.Events-signed)
		}
		if r.Consistency != "" {
			fmt.Fprintf(a.env.Stdout, "ok: %s\n", r.Consistency)
		}
	} else {
		where := ""
		if r.BadIndex != nil {
			where = fmt.Sprintf(" at leaf index %d (event seq %d)", *r.BadIndex, *r.BadSeq)
		}
		fmt.Fprintf(a.env.Stdout, "FAILED%s: %s\n", where, r.Problem)
	}
	if !r.OK {
		return &exitStatus{code: ExitNotVerified}
	}
	return nil
}

func (a *app) logProofCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "proof SEQ",
		Short: "Print the inclusion proof of one event",
		Long: `Print, as JSON, the proof that event SEQ is in the log: its leaf (the exact
bytes hashed), its leaf index (SEQ-1), the RFC 6962 inclusion proof and the
signed checkpoint it leads to (a new one is signed if the latest does not
cover every event). Anyone with the log's public key checks it with
"kin log verify-proof". Operator only.`,
		Example: `  kin log proof 42 > proof-42.json`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || seq < 1 {
				return &usageError{fmt.Sprintf("SEQ %q is not an event sequence number (1, 2, ...)", args[0])}
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			p, err := svc.LogProof(cmd.Context(), seq)
			if err != nil {
				return err
			}
			return a.printJSON(p)
		}),
	}
}

func (a *app) logVerifyProofCommand() *cobra.Command {
	var key keyFlags
	cmd := &cobra.Command{
		Use:   "verify-proof FILE --key KEY",
		Short: "Check an event proof or a chain proof with only the log's key",
		Long: `Check a proof printed by "kin log proof" or "kin ancestors --proof" (FILE, or
- for standard input) with nothing but the log's public key: no daemon, no
database. For an event, it prints the proven event; for a chain, each link
as its proven agent.registered event states it, from the agent up to the
human responsible.

Exit status: 0 when the proof holds, 5 when it does not, 2 when the command
line is wrong.`,
		Example: `  kin ancestors 7 --proof > chain.json
  kin log verify-proof chain.json --key-file log.pub`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			v, err := key.verifier()
			if err != nil {
				return err
			}
			data, err := readFlagFile("FILE", args[0], maxProofFile, a.env.Stdin)
			if err != nil {
				return err
			}
			var probe map[string]json.RawMessage
			if err := json.Unmarshal(data, &probe); err != nil {
				return kin.Errorf(kin.ECodeInvalid, "%s is not a proof (JSON object): %v", args[0], err)
			}
			if _, chain := probe["links"]; chain {
				return a.verifyAncestry(data, v)
			}
			var p kin.LogProof
			if err := strictJSON(data, &p); err != nil {
				return kin.Errorf(kin.ECodeInvalid, "%s is not an event proof: %v", args[0], err)
			}
			e, c, err := auditlog.VerifyProof(p, v)
			if err != nil {
				return a.notVerified(err)
			}
			if a.jsonOut {
				return a.printJSON(map[string]any{"ok": true, "event": e, "checkpoint_size": c.Size, "log": c.Origin})
			}
			b, _ := json.Marshal(e)
			_, err = fmt.Fprintf(a.env.Stdout, "ok: event seq %d is leaf %d of the log %s at size %d:\n%s\n", e.Seq, e.Seq-1, c.Origin, c.Size, b)
			return err
		}),
	}
	key.add(cmd)
	return cmd
}

func (a *app) verifyAncestry(data []byte, v note.Verifier) error {
	var p kin.AncestryProof
	if err := strictJSON(data, &p); err != nil {
		return kin.Errorf(kin.ECodeInvalid, "not a chain proof: %v", err)
	}
	links, c, err := auditlog.VerifyAncestry(p, v)
	if err != nil {
		return a.notVerified(err)
	}
	if a.jsonOut {
		return a.printJSON(map[string]any{"ok": true, "links": links, "checkpoint_size": c.Size, "log": c.Origin})
	}
	fmt.Fprintf(a.env.Stdout, "ok: the chain is proven by the log %s at size %d:\n", c.Origin, c.Size)
	for _, l := range links {
		fmt.Fprintf(a.env.Stdout, "#%d %s (gen %d) responsible: %s, registered by event seq %d at %s\n",
			l.Agent, l.Name, l.Generation, l.Responsible, l.Seq, l.Time.Format("2006-01-02T15:04:05Z07:00"))
	}
	return nil
}

// notVerified reports a proof that does not hold: exit status 5.
func (a *app) notVerified(err error) error {
	if a.jsonOut {
		a.printJSON(map[string]any{"ok": false, "problem": err.Error()})
		return &exitStatus{code: ExitNotVerified}
	}
	fmt.Fprintf(a.env.Stdout, "FAILED: %v\n", err)
	return &exitStatus{code: ExitNotVerified}
}

func (a *app) logExportCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "export DIR",
		Short: "Write the log, its checkpoints and proofs for a third party",
		Long: `Write into DIR (new or empty) every event's leaf (events.jsonl), every signed
checkpoint (checkpoints.jsonl), a consistency proof from each checkpoint to
the next (consistency.jsonl) and a README.txt. The last checkpoint covers
every exported event (kin signs one first if needed). A third party checks
the folder with "kin log verify-export DIR --key KEY" and nothing else.
Operator only.`,
		Example: `  kin log export /tmp/audit-$(date +%F)`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			latest, err := svc.LogCheckpoint(ctx)
			if err != nil {
				return err
			}
			cps, err := svc.LogCheckpoints(ctx)
			if err != nil {
				return err
			}
			w, err := auditlog.CreateExport(args[0])
			if err != nil {
				return kin.Errorf(kin.ECodeInvalid, "%v", err)
			}
			var kept []kin.LogCheckpoint
			for _, c := range cps {
				if c.Size <= latest.Size {
					kept = append(kept, c)
				}
			}
			for i, c := range kept {
				if err := w.Checkpoint(c); err != nil {
					return err
				}
				if i > 0 {
					p, err := svc.LogConsistency(ctx, kept[i-1].Size, c.Size)
					if err != nil {
						return err
					}
					if err := w.Consistency(*p); err != nil {
						return err
					}
				}
			}
			for from := int64(1); from <= latest.Size; {
				leaves, err := svc.LogLeaves(ctx, from, 0)
				if err != nil {
					return err
				}
				if len(leaves) == 0 {
					return fmt.Errorf("the daemon returned no leaves from seq %d, below its checkpoint's %d", from, latest.Size)
				}
				for _, l := range leaves {
					if from > latest.Size {
						break
					}
					if err := w.Leaf([]byte(l)); err != nil {
						return err
					}
					from++
				}
			}
			if err := w.Close(); err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(map[string]any{"dir": args[0], "events": latest.Size, "checkpoints": len(kept), "key": latest.Key})
			}
			_, err = fmt.Fprintf(a.env.Stdout, "exported %d events and %s to %s\ncheck it with: kin log verify-export %s --key '%s'\n",
				latest.Size, plural(len(kept), "checkpoint", "checkpoints"), args[0], args[0], latest.Key)
			return err
		}),
	}
}

func (a *app) logVerifyExportCommand() *cobra.Command {
	var key keyFlags
	cmd := &cobra.Command{
		Use:   "verify-export DIR --key KEY",
		Short: "Check an export with only the log's public key (no daemon, no database)",
		Long: `Check a folder written by "kin log export": every checkpoint's signature with
KEY, the Merkle tree recomputed from events.jsonl against every checkpoint,
every consistency proof, and that the last checkpoint covers every event.
It needs no daemon and no database. The first difference is reported with
its leaf index.

Exit status: 0 when the export holds, 5 when it does not, 1 when it could
not be read, 2 when the command line is wrong.`,
		Example: `  kin log verify-export /tmp/audit --key 'kin.host/log/4c1f0a2e+8a1b2c3d+AbCd...'
  kin log verify-export /tmp/audit --key-file log.pub --json`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			v, err := key.verifier()
			if err != nil {
				return err
			}
			r, err := auditlog.VerifyExport(args[0], v)
			if err != nil {
				return err
			}
			return a.printReport(&r)
		}),
	}
	key.add(cmd)
	return cmd
}

// keyFlags are --key and --key-file: the log's public key.
type keyFlags struct{ key, file string }

func (k *keyFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.key, "key", "", "the log's public `key` (name+hash+key, as kin log key prints)")
	cmd.Flags().StringVar(&k.file, "key-file", "", "read the log's public key from this `file`")
}

func (k *keyFlags) set() bool { return k.key != "" || k.file != "" }

func (k *keyFlags) verifier() (note.Verifier, error) {
	switch {
	case k.key != "" && k.file != "":
		return nil, &usageError{"give --key or --key-file, not both"}
	case k.key == "" && k.file == "":
		return nil, &usageError{"the log's public key is needed: --key KEY or --key-file FILE (kin log key prints it)"}
	}
	text := k.key
	if k.file != "" {
		b, err := readFlagFile("--key-file", k.file, maxProofFile, nil)
		if err != nil {
			return nil, err
		}
		text = string(b)
	}
	v, err := auditlog.NewVerifier(text)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	return v, nil
}

// readCheckpointFile reads a kept checkpoint: a signed note, or the JSON
// kin log checkpoint --json prints.
func readCheckpointFile(path string) ([]byte, error) {
	b, err := readFlagFile("--from-checkpoint", path, maxProofFile, nil)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var cp kin.LogCheckpoint
		if err := json.Unmarshal(t, &cp); err != nil || cp.Note == "" {
			return nil, kin.Errorf(kin.ECodeInvalid, "--from-checkpoint: %s is JSON but not a checkpoint with a note", path)
		}
		return []byte(cp.Note), nil
	}
	if !strings.Contains(string(b), "\n\n") {
		return nil, kin.Errorf(kin.ECodeInvalid, "--from-checkpoint: %s is not a signed checkpoint (the text kin log checkpoint prints)", path)
	}
	return b, nil
}

// strictJSON decodes one JSON value, refusing unknown fields.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}
