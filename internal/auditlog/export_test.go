package auditlog

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// writeExport exports l's whole log (every leaf, every stored checkpoint,
// a consistency proof from each checkpoint to the next) into a new folder.
func writeExport(t *testing.T, l *testLog) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "export")
	w, err := CreateExport(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range l.src.entries {
		if err := w.Leaf(Leaf(en.Event)); err != nil {
			t.Fatal(err)
		}
	}
	for k, cp := range l.src.cps {
		c := kin.LogCheckpoint{Size: cp.Size, Root: b64(l.roots[cp.Size]), Time: cp.Time, Note: string(cp.Note)}
		if err := w.Checkpoint(c); err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			p, err := ProveConsistency(context.Background(), l.src, l.src.cps[k-1].Size, cp.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Consistency(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		t.Fatalf("%s does not end in a newline", path)
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	s := strings.Join(lines, "\n")
	if len(lines) > 0 {
		s += "\n"
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyExport copies an export folder, for one tampering.
func copyExport(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(out, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return out
}

func verifyExport(t *testing.T, dir string, l *testLog) kin.LogReport {
	t.Helper()
	rep, err := VerifyExport(dir, l.v)
	if err != nil {
		t.Fatalf("VerifyExport: %v", err)
	}
	return rep
}

var exportCheckpoints = []int{100, 200, 256, 300}

func TestExportVerifies(t *testing.T) {
	l := buildLog(t, 31, 300, exportCheckpoints...)
	dir := writeExport(t, l)
	for _, name := range []string{ExportEvents, ExportCheckpoints, ExportConsistency, ExportReadme} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("export lacks %s: %v", name, err)
		}
	}
	// events.jsonl holds exactly the leaves, one per line.
	lines := readLines(t, filepath.Join(dir, ExportEvents))
	if len(lines) != 300 {
		t.Fatalf("%d event lines, want 300", len(lines))
	}
	for i, line := range lines {
		if line != string(Leaf(l.src.entries[i].Event)) {
			t.Fatalf("line %d is %s, want the leaf", i+1, line)
		}
	}
	if n := len(readLines(t, filepath.Join(dir, ExportConsistency))); n != len(exportCheckpoints)-1 {
		t.Fatalf("%d consistency lines, want %d", n, len(exportCheckpoints)-1)
	}
	rep := verifyExport(t, dir, l)
	if !rep.OK || rep.Problem != "" || rep.BadIndex != nil {
		t.Fatalf("export: %+v", rep)
	}
	if rep.Events != 300 || rep.Checkpoints != len(exportCheckpoints) {
		t.Fatalf("export: %d events, %d checkpoints", rep.Events, rep.Checkpoints)
	}
	if rep.Latest == nil || rep.Latest.Size != 300 || rep.Latest.Note != string(l.src.cps[len(l.src.cps)-1].Note) {
		t.Fatalf("export: latest %+v", rep.Latest)
	}
}

func TestExportWithEmptyAndSingleCheckpoints(t *testing.T) {
	// A checkpoint of the empty log first: its proof to the next is empty.
	l := newTestLog(t, 32)
	l.checkpoint(t)
	l.addRandom(t, 40)
	l.checkpoint(t)
	rep := verifyExport(t, writeExport(t, l), l)
	if !rep.OK || rep.Events != 40 || rep.Checkpoints != 2 {
		t.Fatalf("export with an empty checkpoint: %+v", rep)
	}
	// The empty log, signed.
	l = newTestLog(t, 33)
	l.checkpoint(t)
	rep = verifyExport(t, writeExport(t, l), l)
	if !rep.OK || rep.Events != 0 || rep.Checkpoints != 1 {
		t.Fatalf("export of the empty log: %+v", rep)
	}
	// One checkpoint, no proofs needed.
	l = buildLog(t, 34, 17, 17)
	rep = verifyExport(t, writeExport(t, l), l)
	if !rep.OK || rep.Events != 17 || rep.Checkpoints != 1 {
		t.Fatalf("export with one checkpoint: %+v", rep)
	}
	// No checkpoint at all: nothing is signed.
	l = buildLog(t, 35, 5)
	rep = verifyExport(t, writeExport(t, l), l)
	if rep.OK || !strings.Contains(rep.Problem, "no checkpoint") {
		t.Fatalf("export without checkpoints: %+v", rep)
	}
}

func TestExportTampering(t *testing.T) {
	l := buildLog(t, 36, 300, exportCheckpoints...)
	clean := writeExport(t, l)
	events := func(dir string) string { return filepath.Join(dir, ExportEvents) }
	cps := func(dir string) string { return filepath.Join(dir, ExportCheckpoints) }
	cons := func(dir string) string { return filepath.Join(dir, ExportConsistency) }
	edit := func(t *testing.T, path string, f func([]string) []string) {
		writeLines(t, path, f(readLines(t, path)))
	}
	const (
		indexed   = iota // a finding at an exact leaf index
		unindexed        // a finding about a file, naming no leaf
	)
	tests := []struct {
		name    string
		tamper  func(t *testing.T, dir string)
		kind    int
		index   int64
		mention string
	}{
		{"data byte changed, still canonical", func(t *testing.T, dir string) {
			// A digit of data changes: the leaf still parses, only the
			// next checkpoint's root tells, so the finding is at the
			// last checkpoint that matched (100 for index 150).
			edit(t, events(dir), func(ls []string) []string {
				ls[150] = strings.Replace(ls[150], `"tokens":`, `"tokens":9`, 1)
				return ls
			})
		}, indexed, 100, "does not match"},
		{"data byte changed before the first checkpoint", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string {
				ls[42] = strings.Replace(ls[42], `"text":"note `, `"text":"nOte `, 1)
				return ls
			})
		}, indexed, 0, "does not match"},
		{"byte changed, no longer a leaf", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string {
				ls[123] = strings.Replace(ls[123], `"seq":`, `"seq" :`, 1)
				return ls
			})
		}, indexed, 123, "leaf index 123"},
		{"a line deleted", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string { return append(ls[:77], ls[78:]...) })
		}, indexed, 77, "seq 79"},
		{"two lines swapped", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string {
				ls[30], ls[210] = ls[210], ls[30]
				return ls
			})
		}, indexed, 30, "seq 211"},
		{"a line duplicated", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string { return append(ls[:61], ls[60:]...) })
		}, indexed, 61, "seq 61"},
		{"last events dropped", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string { return ls[:270] })
		}, indexed, 270, "missing"},
		{"every event dropped", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string { return nil })
		}, indexed, 0, "missing"},
		{"last line cut", func(t *testing.T, dir string) {
			b, err := os.ReadFile(events(dir))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(events(dir), b[:len(b)-10], 0o644); err != nil {
				t.Fatal(err)
			}
		}, indexed, 299, "line 300 does not end in a newline"},
		{"events after the last checkpoint", func(t *testing.T, dir string) {
			more := newTestLog(t, 37)
			more.f = l.f
			edit(t, events(dir), func(ls []string) []string {
				for range 3 {
					e := more.randomEvent()
					e.Seq = int64(len(ls) + 1)
					e.Time = l.t0
					ls = append(ls, string(Leaf(e)))
				}
				return ls
			})
		}, indexed, 300, "signed by no checkpoint"},
		{"checkpoint note changed", func(t *testing.T, dir string) {
			edit(t, cps(dir), func(ls []string) []string {
				ls[1] = strings.Replace(ls[1], `\n200\n`, `\n201\n`, 1)
				return ls
			})
		}, unindexed, 0, ExportCheckpoints + ": line 2"},
		{"checkpoint root field changed", func(t *testing.T, dir string) {
			edit(t, cps(dir), func(ls []string) []string {
				var c kin.LogCheckpoint
				if err := json.Unmarshal([]byte(ls[2]), &c); err != nil {
					t.Fatal(err)
				}
				c.Root = b64(l.roots[255])
				b, _ := json.Marshal(c)
				ls[2] = string(b)
				return ls
			})
		}, unindexed, 0, "not those of its signed note"},
		{"checkpoint by another key", func(t *testing.T, dir string) {
			other := buildLog(t, 38, 100, 100)
			edit(t, cps(dir), func(ls []string) []string {
				c := kin.LogCheckpoint{Size: 100, Root: b64(other.roots[100]), Note: string(other.src.cps[0].Note)}
				b, _ := json.Marshal(c)
				ls[0] = string(b)
				return ls
			})
		}, unindexed, 0, "not signed by the log key"},
		{"checkpoints reordered", func(t *testing.T, dir string) {
			edit(t, cps(dir), func(ls []string) []string {
				ls[0], ls[1] = ls[1], ls[0]
				return ls
			})
		}, unindexed, 0, "increasing size"},
		{"last checkpoint dropped", func(t *testing.T, dir string) {
			// The remaining ones still hold, but the last events are
			// signed by none; and its proof names a missing checkpoint.
			edit(t, cps(dir), func(ls []string) []string { return ls[:len(ls)-1] })
		}, unindexed, 0, "not both checkpoints"},
		{"last checkpoint and its proof dropped", func(t *testing.T, dir string) {
			edit(t, cps(dir), func(ls []string) []string { return ls[:len(ls)-1] })
			edit(t, cons(dir), func(ls []string) []string { return ls[:len(ls)-1] })
		}, indexed, 256, "signed by no checkpoint"},
		{"data changed between later checkpoints", func(t *testing.T, dir string) {
			edit(t, events(dir), func(ls []string) []string {
				ls[220] = strings.Replace(ls[220], `"tokens":`, `"tokens":1`, 1)
				return ls
			})
		}, indexed, 200, "does not match"},
		{"consistency line dropped", func(t *testing.T, dir string) {
			edit(t, cons(dir), func(ls []string) []string { return append(ls[:1], ls[2:]...) })
		}, unindexed, 0, "no proof that the checkpoint of size 256 extends the one of size 200"},
		{"every consistency line dropped", func(t *testing.T, dir string) {
			edit(t, cons(dir), func(ls []string) []string { return nil })
		}, unindexed, 0, ExportConsistency},
		{"consistency proof hash corrupted", func(t *testing.T, dir string) {
			edit(t, cons(dir), func(ls []string) []string {
				var p kin.LogConsistency
				if err := json.Unmarshal([]byte(ls[2]), &p); err != nil {
					t.Fatal(err)
				}
				p.Proof[0] = flipHash(p.Proof[0])
				b, _ := json.Marshal(p)
				ls[2] = string(b)
				return ls
			})
		}, unindexed, 0, ExportConsistency + ": line 3"},
		{"consistency proof between other sizes", func(t *testing.T, dir string) {
			edit(t, cons(dir), func(ls []string) []string {
				ls[0] = strings.Replace(ls[0], `"from":100`, `"from":99`, 1)
				return ls
			})
		}, unindexed, 0, "not both checkpoints"},
		{"consistency line not JSON", func(t *testing.T, dir string) {
			edit(t, cons(dir), func(ls []string) []string { return append(ls, "garbage") })
		}, unindexed, 0, "not a consistency proof"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyExport(t, clean)
			tt.tamper(t, dir)
			rep := verifyExport(t, dir, l)
			if rep.OK {
				t.Fatalf("tampered export verified: %+v", rep)
			}
			if !strings.Contains(rep.Problem, tt.mention) {
				t.Fatalf("problem %q does not mention %q", rep.Problem, tt.mention)
			}
			switch tt.kind {
			case indexed:
				wantBad(t, rep, tt.index)
			case unindexed:
				if rep.BadIndex != nil {
					t.Fatalf("BadIndex %d, want none (%s)", *rep.BadIndex, rep.Problem)
				}
			}
		})
	}
	// The clean export was not touched.
	if rep := verifyExport(t, clean, l); !rep.OK {
		t.Fatalf("clean export: %+v", rep)
	}
}

func TestExportMissingFile(t *testing.T) {
	l := buildLog(t, 39, 10, 10)
	for _, name := range []string{ExportEvents, ExportCheckpoints, ExportConsistency} {
		dir := copyExport(t, writeExport(t, l))
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if rep, err := VerifyExport(dir, l.v); err == nil {
			t.Fatalf("export without %s: %+v, want an error", name, rep)
		}
	}
}

func TestCreateExportRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "something"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err := CreateExport(dir); err == nil {
		w.Close()
		t.Fatal("CreateExport into a non-empty dir succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, ExportEvents)); !os.IsNotExist(err) {
		t.Fatalf("CreateExport wrote into a non-empty dir (%v)", err)
	}
	// An empty existing dir is fine.
	empty := t.TempDir()
	w, err := CreateExport(empty)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A file where the dir should be is refused.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateExport(file); err == nil {
		t.Fatal("CreateExport over a file succeeded")
	}
}

func TestExportWriterRefusesNewlineInLeaf(t *testing.T) {
	w, err := CreateExport(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Leaf([]byte("{\"a\":\n1}")); err == nil {
		t.Fatal("Leaf with a newline accepted")
	}
}

func TestEachLine(t *testing.T) {
	long := strings.Repeat("y", 200_000) // longer than the reader's buffer
	tests := []struct {
		in    string
		max   int
		want  []string
		error string
	}{
		{"", 100, nil, ""},
		{"a\nb\n", 100, []string{"a", "b"}, ""},
		{"a\n\nb\n", 100, []string{"a", "", "b"}, ""},
		{"a\nb", 100, []string{"a"}, "does not end in a newline"},
		{long + "\nz\n", 300_000, []string{long, "z"}, ""},
		{long + "\n", 100_000, nil, "longer than"},
		{"z\n" + long, 300_000, []string{"z"}, "line 2 does not end in a newline"},
	}
	for k, tt := range tests {
		var got []string
		err := eachLine(strings.NewReader(tt.in), tt.max, func(n int, line []byte) error {
			if n != len(got)+1 {
				return fmt.Errorf("line number %d, want %d", n, len(got)+1)
			}
			got = append(got, string(line))
			return nil
		})
		if tt.error == "" && err != nil || tt.error != "" && (err == nil || !strings.Contains(err.Error(), tt.error)) {
			t.Fatalf("case %d: error %v, want %q", k, err, tt.error)
		}
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Fatalf("case %d: lines %d, want %d", k, len(got), len(tt.want))
		}
	}
}
