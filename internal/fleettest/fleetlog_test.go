package fleettest_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx": the test edits the fleet's store as an attacker would

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/kin"
)

// verifyFleetLog is the first half of checkFleetLog, for the end of every
// fleet scenario (issue 24: the log verifies after all of them): kin log
// verify on verifyOn passes, holding more than k events, and the log
// exported through exportFrom verifies offline with the fleet's public log
// key alone. It returns the export's folder, the offline check, and the
// reports' reader.
func verifyFleetLog(t *testing.T, f *fleettest.Fleet, verifyOn, exportFrom *fleettest.Host, k int64) (string, func() (kin.LogReport, int), func(string, error, string) kin.LogReport) {
	t.Helper()
	report := func(out string, err error, what string) kin.LogReport {
		t.Helper()
		var r kin.LogReport
		// The report, then whatever the command said on stderr.
		if jerr := json.NewDecoder(strings.NewReader(out[max(strings.Index(out, "{"), 0):])).Decode(&r); jerr != nil {
			t.Fatalf("%s: %v (%v)\n%s", what, jerr, err, out)
		}
		return r
	}
	out, err := verifyOn.Kin("log", "verify", "--json")
	if r := report(out, err, "kin log verify on "+verifyOn.Name); err != nil || !r.OK || r.Events <= k {
		t.Fatalf("kin log verify on %s: %v %+v", verifyOn.Name, err, r)
	}
	exp := filepath.Join(t.TempDir(), "export")
	if out, err := exportFrom.Kin("log", "export", exp); err != nil {
		t.Fatalf("kin log export on %s: %v\n%s", exportFrom.Name, err, out)
	}
	offline := func() (kin.LogReport, int) {
		t.Helper()
		cmd := exec.Command(f.Bin, "log", "verify-export", exp, "--key-file", filepath.Join(f.LogKeyDir, "log.pub"), "--json")
		cmd.Env = exampletest.Env() // no KIN_STORE, no home: nothing but the key and the folder
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return report(string(out), err, "kin log verify-export"), code
	}
	r, code := offline()
	if code != 0 || !r.OK || r.Events <= k {
		t.Fatalf("the export from %s, verified offline: exit %d %+v", exportFrom.Name, code, r)
	}
	t.Logf("the fleet's log (%d events, %d checkpoints) verifies on %s, and exported from %s offline with the fleet's log key alone",
		r.Events, r.Checkpoints, verifyOn.Name, exportFrom.Name)

	return exp, offline, report
}

// checkFleetLog is issue 24's audit of the fleet's one log, after a fleet
// scenario: kin log verify passes on a host; the log exported through
// another host verifies offline (the kin binary alone, with the fleet's
// public log key: no daemon, no store); a one-byte edit of leaf k fails the
// export at the first leaf no good checkpoint covers (all an export can
// pin), and the same edit in the store fails kin log verify at k itself
// (the hashes stored with each event pin it). It edits the store: run it
// last.
func checkFleetLog(t *testing.T, f *fleettest.Fleet, verifyOn, exportFrom *fleettest.Host, k int64) {
	t.Helper()
	exp, offline, report := verifyFleetLog(t, f, verifyOn, exportFrom, k)
	// One byte of leaf k's data changed in the export.
	events := filepath.Join(exp, "events.jsonl")
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines[k] = editDigit(t, lines[k], []byte(`"data":`))
	if err := os.WriteFile(events, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first leaf no checkpoint that still matches covers.
	var want int64
	cps, err := os.ReadFile(filepath.Join(exp, "checkpoints.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(cps)), "\n") {
		var c kin.LogCheckpoint
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		if c.Size <= k {
			want = max(want, c.Size)
		}
	}
	if want == 0 {
		t.Fatalf("no checkpoint in the export is below leaf %d: the scenario signs one before it", k)
	}
	r, code := offline()
	if code != 5 || r.OK || r.BadIndex == nil || *r.BadIndex != want || !strings.Contains(r.Problem, "differs from what was signed") {
		t.Fatalf("the export with leaf %d edited: exit %d, bad index %v (want %d): %s", k, code, r.BadIndex, want, r.Problem)
	}
	t.Logf("leaf %d edited in the export: verify-export fails at index %d, the first leaf no good checkpoint covers: %s", k, want, r.Problem)

	// The same edit in the store: kin log verify names leaf k.
	db, err := sql.Open("pgx", f.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var data string
	if err := db.QueryRowContext(ctx, `SELECT data FROM events WHERE seq = $1`, k+1).Scan(&data); err != nil {
		t.Fatal(err)
	}
	edited := string(editDigit(t, []byte(data), nil))
	if _, err := db.ExecContext(ctx, `UPDATE events SET data = $1 WHERE seq = $2`, edited, k+1); err != nil {
		t.Fatal(err)
	}
	out, err := verifyOn.Kin("log", "verify", "--json")
	rv := report(out, err, "kin log verify after the store's edit")
	if err == nil || rv.OK || rv.BadIndex == nil || *rv.BadIndex != k {
		t.Fatalf("kin log verify on %s with event seq %d edited in the store: %v, bad index %v (want %d): %s", verifyOn.Name, k+1, err, rv.BadIndex, k, rv.Problem)
	}
	t.Logf("event seq %d edited in the store: kin log verify on %s fails at index %d: %s", k+1, verifyOn.Name, k, rv.Problem)
}

// editDigit changes one digit (after the first after, if given) of line
// into another.
func editDigit(t *testing.T, line, after []byte) []byte {
	t.Helper()
	from := 0
	if after != nil {
		from = bytes.Index(line, after)
		if from < 0 {
			t.Fatalf("no %s in %s", after, line)
		}
	}
	for i := from; i < len(line); i++ {
		if c := line[i]; c >= '0' && c <= '9' {
			out := bytes.Clone(line)
			out[i] = '0' + (c-'0'+1)%10
			return out
		}
	}
	t.Fatalf("no digit to edit in %s", line)
	return nil
}
