package handoff_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

const checkContract = `{
  "sections": [{"name": "Summary", "max_bytes": 50}, {"name": "Findings"}],
  "artifacts": [
    {"path": "artifact/patch.diff", "kind": "patch", "max_bytes": 1000},
    {"path": "artifact/notes.txt", "optional": true}
  ],
  "limits": {"result_bytes": 400, "artifacts": 3, "artifact_bytes": 2000, "refs": 3}
}`

const deleted = "\x00delete"

func TestCheckViolations(t *testing.T) {
	base := map[string]string{
		"result.md":           "# Summary\ns\n# Findings\nf\n",
		"artifact/patch.diff": "diff",
		"refs.jsonl":          "",
	}
	reject := strings.Replace(checkContract, `"limits"`, `"unlisted_artifacts": "reject", "limits"`, 1)
	tests := []struct {
		name     string
		contract string                             // checkContract when empty
		files    func(out string) map[string]string // over base; out holds "abc" (abc) and "sub/"
		setup    func(t *testing.T, dir string)
		want     []string // violation codes, in order
		mentions []string // in the report's String
	}{
		{name: "a good result", files: func(string) map[string]string { return nil }},
		{name: "optional artifact and unlisted files are fine", files: func(string) map[string]string {
			return map[string]string{"artifact/notes.txt": "n", "artifact/more/x.txt": "x"}
		}},

		{name: "result.md missing", files: func(string) map[string]string { return map[string]string{"result.md": deleted} },
			want: []string{handoff.VResultMissing}, mentions: []string{`result.md: required a non-empty result.md with the sections "Summary" and "Findings"; found no result.md`}},
		{name: "result.md a symlink", files: func(string) map[string]string {
			return map[string]string{"result.md": "->other.md", "other.md": "# Summary\ns\n# Findings\nf\n"}
		}, want: []string{handoff.VResultNotFile}, mentions: []string{"found a symlink"}},
		{name: "result.md a directory", files: func(string) map[string]string { return map[string]string{"result.md": deleted, "result.md/": ""} },
			want: []string{handoff.VResultNotFile}, mentions: []string{"found a directory"}},
		{name: "result.md empty", files: func(string) map[string]string { return map[string]string{"result.md": " \n\n"} },
			want: []string{handoff.VResultEmpty, handoff.VSectionMissing, handoff.VSectionMissing}},
		{name: "result.md too large", files: func(string) map[string]string {
			return map[string]string{"result.md": "# Summary\ns\n# Findings\n" + strings.Repeat("f", 400)}
		}, want: []string{handoff.VResultTooLarge}, mentions: []string{"at most 400 bytes (limits.result_bytes); found 423 bytes"}},
		{name: "result.md not UTF-8", files: func(string) map[string]string {
			return map[string]string{"result.md": "# Summary\ns\xff\n# Findings\nf\n"}
		}, want: []string{handoff.VResultNotText}},

		{name: "a section missing", files: func(string) map[string]string { return map[string]string{"result.md": "Summary: all good\n"} },
			want:     []string{handoff.VSectionMissing},
			mentions: []string{`section "Findings": required a non-empty section "Findings" (a "# Findings" heading or a "Findings:" line); found no such section; result.md has only "Summary"`}},
		{name: "a section empty", files: func(string) map[string]string { return map[string]string{"result.md": "Summary:\ns\n\nFindings:\n\n"} },
			want: []string{handoff.VSectionEmpty}, mentions: []string{`found "Findings" at line 4 with no text`}},
		{name: "a section too large", files: func(string) map[string]string {
			return map[string]string{"result.md": "Summary:\n" + strings.Repeat("s", 51) + "\nFindings:\nf\n"}
		}, want: []string{handoff.VSectionTooLarge}, mentions: []string{"at most 50 bytes of text (max_bytes); found 51 bytes"}},
		{name: "an empty section and a later full one", files: func(string) map[string]string {
			return map[string]string{"result.md": "# Summary\n\n# Findings\nf\n## Summary\ns\n"}
		}},
		{name: "many sections, none asked for", files: func(string) map[string]string {
			return map[string]string{"result.md": strings.Repeat("# Other\nx\n", 25) + "Summary: s\n"}
		}, want: []string{handoff.VSectionMissing}, mentions: []string{`"Other", "Other" and 6 more`}},
		{name: "sections matched ignoring case, labels only when known", files: func(string) map[string]string {
			return map[string]string{"result.md": "SUMMARY: fine\nSeverity: low\n## findings\nf\n"}
		}},

		{name: "artifact missing", files: func(string) map[string]string { return map[string]string{"artifact/patch.diff": deleted} },
			want: []string{handoff.VArtifactMissing}, mentions: []string{`artifact/patch.diff: required a regular file of kind "patch"; found no such file`}},
		{name: "no artifact folder", files: func(string) map[string]string { return map[string]string{"artifact/patch.diff": deleted} },
			setup: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "artifact")) },
			want:  []string{handoff.VArtifactMissing}, mentions: []string{"found no artifact"}},
		{name: "artifact a symlink out of the result", files: func(out string) map[string]string {
			return map[string]string{"artifact/patch.diff": "->" + filepath.Join(out, "abc")}
		}, want: []string{handoff.VArtifactSymlink}, mentions: []string{"artifacts are never symlinks", "found a symlink"}},
		{name: "artifact a symlink within the result", files: func(string) map[string]string {
			return map[string]string{"artifact/patch.diff": "->../result.md"}
		}, want: []string{handoff.VArtifactSymlink}},
		{name: "an unlisted symlink", files: func(string) map[string]string {
			return map[string]string{"artifact/x": "->/etc/passwd"}
		}, want: []string{handoff.VArtifactSymlink}},
		{name: "artifact a directory", files: func(string) map[string]string {
			return map[string]string{"artifact/patch.diff": deleted, "artifact/patch.diff/x": "x"}
		}, want: []string{handoff.VArtifactNotFile}, mentions: []string{"found artifact/patch.diff is a directory"}},
		{name: "artifact a named pipe", files: func(string) map[string]string { return map[string]string{"artifact/patch.diff": deleted} },
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "artifact/patch.diff"), 0o644); err != nil {
					t.Fatal(err)
				}
			}, want: []string{handoff.VArtifactNotFile}, mentions: []string{"found a named pipe"}},
		{name: "artifact folder a symlink", files: func(out string) map[string]string {
			return map[string]string{"artifact/patch.diff": deleted, "elsewhere/patch.diff": "diff"}
		}, setup: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "artifact"))
			if err := os.Symlink("elsewhere", filepath.Join(dir, "artifact")); err != nil {
				t.Fatal(err)
			}
		}, want: []string{handoff.VArtifactSymlink, handoff.VArtifactSymlink}, mentions: []string{"artifact/: required a directory of regular files; found a symlink", "found artifact is a symlink"}},
		{name: "artifact folder a file", files: func(string) map[string]string {
			return map[string]string{"artifact/patch.diff": deleted}
		}, setup: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "artifact"))
			writeTree(t, dir, map[string]string{"artifact": "x"})
		}, want: []string{handoff.VArtifactNotFile, handoff.VArtifactNotFile}},
		{name: "artifact too large", files: func(string) map[string]string {
			return map[string]string{"artifact/patch.diff": strings.Repeat("d", 1001)}
		}, want: []string{handoff.VArtifactTooLarge}, mentions: []string{"at most 1000 bytes (max_bytes); found 1001 bytes"}},
		{name: "unlisted artifact under reject", contract: reject, files: func(string) map[string]string {
			return map[string]string{"artifact/extra.txt": "x", "artifact/notes.txt": "n"}
		}, want: []string{handoff.VArtifactUnlisted}, mentions: []string{"artifact/extra.txt: required only the artifacts the contract lists"}},
		{name: "kind mismatch", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"artifact/patch.diff","kind":"log"}`}
		}, want: []string{handoff.VArtifactKindMismatch}, mentions: []string{`required kind "patch"; found kind "log" in refs.jsonl`}},
		{name: "too many artifacts", files: func(string) map[string]string {
			return map[string]string{"artifact/a": "", "artifact/b": "", "artifact/c": ""}
		}, want: []string{handoff.VArtifactsTooMany}, mentions: []string{"at most 3 files (limits.artifacts)"}},
		{name: "artifacts too large together", files: func(string) map[string]string {
			return map[string]string{"artifact/a": strings.Repeat("a", 1500), "artifact/b": strings.Repeat("b", 1500)}
		}, want: []string{handoff.VArtifactsTooLarge}, mentions: []string{"at most 2000 bytes in all"}},

		{name: "truthful refs", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"` + filepath.Join(out, "abc") + `","hash":"` + hashABC + `"}` + "\n" +
				`{"path":"./artifact/patch.diff","hash":"` + handoff.HashBytes([]byte("diff")) + `","kind":"patch"}` + "\n" +
				`{"path":"result.md"}`}
		}},
		{name: "malformed refs lines are each named", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": "{\"path\":\"result.md\",\"sha\":\"x\"}\n{\"path\":\"result.md\"}\nnot json\n"}
		}, want: []string{handoff.VRefsMalformed, handoff.VRefsMalformed},
			mentions: []string{`refs.jsonl line 1: required a JSON object {"path", "hash"?, "kind"?, "summary"?}; found refs.jsonl line 1 has an unknown key "sha"`, "refs.jsonl line 3"}},
		{name: "a lying hash on an artifact", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"artifact/patch.diff","hash":"` + hashABC + `"}`}
		}, want: []string{handoff.VRefHashMismatch},
			mentions: []string{"refs.jsonl line 1 (artifact/patch.diff): required the hash the child claimed, " + hashABC + "; found the file's sha256 is " + handoff.HashBytes([]byte("diff"))}},
		{name: "a lying hash on an input file", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"` + filepath.Join(out, "abc") + `","hash":"` + hashEmpty + `"}`}
		}, want: []string{handoff.VRefHashMismatch}, mentions: []string{"the file's sha256 is " + hashABC}},
		{name: "an absolute ref that is not there is unverified", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"` + filepath.Join(out, "gone") + `","hash":"` + hashABC + `"}`}
		}},
		{name: "a hash claimed for a directory", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"` + filepath.Join(out, "sub") + `","hash":"` + hashABC + `"}` + "\n" +
				`{"path":"` + filepath.Join(out, "sub") + `","summary":"a folder, no hash: fine"}`}
		}, want: []string{handoff.VRefNotFile}, mentions: []string{"a regular file, since a hash is claimed"}},
		{name: "ref paths with ..", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"artifact/../result.md"}` + "\n" + `{"path":"` + out + `/sub/../abc","hash":"` + hashABC + `"}`}
		}, want: []string{handoff.VRefPathInvalid, handoff.VRefPathInvalid}, mentions: []string{`required a path without ".."; found artifact/../result.md`}},
		{name: "a relative ref the child did not produce", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"artifact/review.md","summary":"my review"}`}
		}, want: []string{handoff.VRefMissing}, mentions: []string{"found no artifact/review.md"}},
		{name: "a relative ref through a symlink", files: func(out string) map[string]string {
			return map[string]string{"notes.md": "->" + filepath.Join(out, "abc"), "refs.jsonl": `{"path":"notes.md","hash":"` + hashABC + `"}`}
		}, want: []string{handoff.VRefNotFile}, mentions: []string{"found notes.md is a symlink"}},
		{name: "a ref to the result folder", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": `{"path":"."}`}
		}, want: []string{handoff.VRefNotFile}},
		{name: "too many refs", files: func(string) map[string]string {
			return map[string]string{"refs.jsonl": strings.Repeat(`{"path":"result.md"}`+"\n", 4)}
		}, want: []string{handoff.VRefsTooMany}, mentions: []string{"found 4 refs; only the first 3 were checked"}},
		{name: "refs.jsonl a symlink", files: func(out string) map[string]string {
			return map[string]string{"refs.jsonl": "->" + filepath.Join(out, "abc")}
		}, want: []string{handoff.VRefsNotFile}},
		{name: "everything at once", files: func(out string) map[string]string {
			return map[string]string{"result.md": "Findings:\n", "artifact/patch.diff": deleted,
				"refs.jsonl": `{"path":"` + filepath.Join(out, "abc") + `","hash":"` + hashEmpty + `"}` + "\nx\n"}
		}, want: []string{handoff.VSectionMissing, handoff.VSectionEmpty, handoff.VArtifactMissing, handoff.VRefsMalformed, handoff.VRefHashMismatch}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, out := t.TempDir(), t.TempDir()
			writeTree(t, out, map[string]string{"abc": "abc", "sub/": ""})
			files := map[string]string{}
			for k, v := range base {
				files[k] = v
			}
			for k, v := range tc.files(out) {
				files[k] = v
			}
			for k, v := range files {
				if v == deleted {
					delete(files, k)
				}
			}
			writeTree(t, dir, files)
			if _, ok := files["artifact/patch.diff"]; !ok {
				os.MkdirAll(filepath.Join(dir, "artifact"), 0o755)
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			c := checkContract
			if tc.contract != "" {
				c = tc.contract
			}
			rep, err := handoff.Check(mustContract(t, c), dir)
			if err != nil {
				t.Fatal(err)
			}
			if !sameCodes(codes(rep), tc.want) {
				t.Errorf("violations %v, want %v\n%s", codes(rep), tc.want, rep)
			}
			wantStatus := handoff.StatusCompleted
			if len(tc.want) > 0 {
				wantStatus = handoff.StatusContractViolated
			}
			if rep.Status != wantStatus {
				t.Errorf("status %s, want %s", rep.Status, wantStatus)
			}
			for _, v := range rep.Violations {
				if v.Subject == "" || v.Required == "" || v.Found == "" {
					t.Errorf("violation without a subject, requirement or finding: %+v", v)
				}
			}
			for _, m := range tc.mentions {
				if !strings.Contains(rep.String(), m) {
					t.Errorf("report does not mention %q:\n%s", m, rep)
				}
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCheckRefStates(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	abc := filepath.Join(out, "abc")
	writeTree(t, out, map[string]string{"abc": "abc"})
	writeTree(t, dir, map[string]string{
		"result.md":           "Summary: ok\n",
		"artifact/patch.diff": "diff",
		"refs.jsonl": `{"path":"` + abc + `","hash":"` + hashABC + `","summary":"read"}` + "\n" +
			`{"path":"artifact//patch.diff","kind":"patch"}` + "\n" +
			`{"path":"` + filepath.Join(out, "gone") + `","hash":"` + hashABC + `"}` + "\n" +
			`{"path":"result.md","hash":"` + hashEmpty + `"}` + "\n",
	})
	rep, err := handoff.Check(handoff.DefaultContract(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, r := range rep.Refs {
		states = append(states, string(r.State))
	}
	if got := strings.Join(states, " "); got != "verified hashed unverified mismatch" {
		t.Errorf("states %s\n%s", got, rep)
	}
	if !sameCodes(codes(rep), []string{handoff.VRefHashMismatch}) {
		t.Errorf("violations %v", codes(rep))
	}
	diff := handoff.HashBytes([]byte("diff"))
	want := []handoff.Ref{
		{Path: abc, Hash: hashABC, Summary: "read"},
		{Path: "artifact/patch.diff", Hash: diff, Kind: "patch"},
		{Path: filepath.Join(out, "gone")}, // a hash kin could not check is not passed on
		{Path: "result.md", Hash: handoff.HashBytes([]byte("Summary: ok\n"))},
	}
	got := rep.VerifiedRefs()
	if len(got) != len(want) {
		t.Fatalf("VerifiedRefs = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("VerifiedRefs[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(rep.Artifacts) != 1 || rep.Artifacts[0] != (handoff.ArtifactFile{Path: "artifact/patch.diff", Size: 4, Hash: diff, Kind: "patch"}) {
		t.Errorf("artifacts %+v", rep.Artifacts)
	}

	// Confined to other roots, the absolute ref is not read at all.
	rep, err = handoff.CheckWith(handoff.DefaultContract(), dir, handoff.CheckOptions{AbsRoots: []string{"/nonexistent", out + "/../x"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refs[0].State != handoff.RefUnverified || rep.Refs[0].Computed != "" || !strings.Contains(rep.Refs[0].Note, "outside") {
		t.Errorf("outside the roots: %+v", rep.Refs[0])
	}
	// Inside them, a lie is still caught.
	writeTree(t, dir, map[string]string{"refs.jsonl": `{"path":"` + abc + `","hash":"` + hashEmpty + `"}`})
	rep, err = handoff.CheckWith(handoff.DefaultContract(), dir, handoff.CheckOptions{AbsRoots: []string{out + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sameCodes(codes(rep), []string{handoff.VRefHashMismatch}) {
		t.Errorf("inside the roots: %s", rep)
	}
}

func TestCheckErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := handoff.Check(handoff.Contract{}, dir); err == nil {
		t.Error("an invalid contract was used")
	}
	if _, err := handoff.Check(handoff.DefaultContract(), filepath.Join(dir, "missing")); !os.IsNotExist(errorsUnwrap(err)) {
		t.Errorf("missing folder: %v", err)
	}
	writeTree(t, dir, map[string]string{"file": "x", "link": "->."})
	for _, p := range []string{"file", "link"} {
		if _, err := handoff.Check(handoff.DefaultContract(), filepath.Join(dir, p)); err == nil {
			t.Errorf("%s: checked", p)
		}
	}
}

func TestReportString(t *testing.T) {
	r := handoff.Report{Status: handoff.StatusCompleted}
	if r.String() != "completed" {
		t.Error(r.String())
	}
	r = handoff.Report{Status: handoff.StatusContractViolated, Violations: []handoff.Violation{{Code: "c", Subject: "s", Required: "r", Found: "f"}}}
	if r.String() != "contract_violated: 1 violation\n- c: s: required r; found f" {
		t.Error(r.String())
	}
	for _, s := range []handoff.Status{handoff.StatusCompleted, handoff.StatusContractViolated, handoff.StatusFailed, handoff.StatusCancelled} {
		if !s.Valid() {
			t.Errorf("%s is not valid", s)
		}
	}
	if handoff.Status("done").Valid() {
		t.Error("done is valid")
	}
}
