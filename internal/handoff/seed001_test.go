package handoff_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// seedWorld lays out seed 001's example in a temporary folder: the spec the
// reviewer reads (at <tmp>/work/docs/spec/agent-tool-security.md), the
// handoff the parent "coder" gives child "rev-123", and the result the child
// writes, whose refs.jsonl holds the seed's two lines with a real hash.
type seedWorld struct {
	tmp, spec, handoffDir, resultDir string
	h                                handoff.Handoff
}

func newSeedWorld(t *testing.T) *seedWorld {
	t.Helper()
	w := &seedWorld{tmp: t.TempDir()}
	w.spec = filepath.Join(w.tmp, "work/docs/spec/agent-tool-security.md")
	writeTree(t, w.tmp, map[string]string{"work/docs/spec/agent-tool-security.md": seed(t, "agent-tool-security.md")})

	// Parent to child: handoff.md, input refs, policy and mount subsets,
	// output contract.
	refs, err := handoff.InputRefs([]string{w.spec})
	if err != nil {
		t.Fatal(err)
	}
	w.h = handoff.Handoff{
		Task:     seed(t, "handoff.md"),
		Refs:     refs,
		Policy:   json.RawMessage(`{"write":["result"]}`),
		Mounts:   json.RawMessage(`{"` + filepath.Join(w.tmp, "work/docs") + `":"ro"}`),
		Contract: mustContract(t, seed(t, "contract.json")),
	}
	files, err := w.h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w.handoffDir = filepath.Join(w.tmp, "rev-123/handoff")
	for _, f := range files {
		writeTree(t, w.handoffDir, map[string]string{f.Name: string(f.Data)})
	}

	// The child reads its handoff, reviews the spec and answers.
	got, err := handoff.ReadHandoff(os.DirFS(w.handoffDir))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w.h) {
		t.Fatalf("the child read\n%+v\nthe parent handed\n%+v", got, w.h)
	}
	specHash, err := handoff.HashRef(got.Refs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	refLines := strings.Replace(strings.Replace(seed(t, "refs.jsonl"),
		"/work/docs/spec/agent-tool-security.md", w.spec, 1), "sha256:...", specHash, 1)
	w.resultDir = filepath.Join(w.tmp, "rev-123/result")
	writeTree(t, w.resultDir, map[string]string{
		"result.md":           seed(t, "result.md"),
		"refs.jsonl":          refLines,
		"artifact/patch.diff": seed(t, "patch.diff"),
	})
	return w
}

func TestSeed001EndToEnd(t *testing.T) {
	w := newSeedWorld(t)
	rep, err := handoff.Check(w.h.Contract, w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != handoff.StatusCompleted || len(rep.Violations) != 0 {
		t.Fatalf("%s", rep)
	}
	var titles []string
	for _, s := range rep.Sections {
		if !s.OK {
			t.Errorf("section %+v", s)
		}
		titles = append(titles, s.Title)
	}
	if strings.Join(titles, "|") != "Summary|Findings|Suggested patch" {
		t.Errorf("sections %v", titles)
	}
	patchHash := handoff.HashBytes([]byte(seed(t, "patch.diff")))
	if len(rep.Artifacts) != 1 || rep.Artifacts[0] != (handoff.ArtifactFile{Path: "artifact/patch.diff",
		Size: int64(len(seed(t, "patch.diff"))), Hash: patchHash, Kind: "patch", Listed: true}) {
		t.Errorf("artifacts %+v", rep.Artifacts)
	}
	if len(rep.Refs) != 2 || rep.Refs[0].State != handoff.RefVerified || rep.Refs[1].State != handoff.RefHashed || rep.Refs[1].Computed != patchHash {
		t.Errorf("refs %+v", rep.Refs)
	}
	verified := rep.VerifiedRefs()
	want := []handoff.Ref{
		{Path: w.spec, Hash: w.h.Refs[0].Hash, Summary: "mount spec reviewed"},
		{Path: "artifact/patch.diff", Hash: patchHash, Kind: "patch", Summary: "suggested patch"},
	}
	if !reflect.DeepEqual(verified, want) {
		t.Errorf("verified refs %+v", verified)
	}

	// Without a contract of its own the default applies: Summary suffices.
	rep, err = handoff.Check(handoff.DefaultContract(), w.resultDir)
	if err != nil || rep.Status != handoff.StatusCompleted {
		t.Errorf("default contract: %v %s", err, rep)
	}
}

// TestSeed001ContractViolation checks the seed's example result.md against
// the seed's own handoff "Output:" list: it answers "Suggested patch" (an
// alias of "concrete suggested changes") but has no "risk notes".
func TestSeed001ContractViolation(t *testing.T) {
	w := newSeedWorld(t)
	c := mustContract(t, seed(t, "output-contract.json"))
	rep, err := handoff.Check(c, w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != handoff.StatusContractViolated || !sameCodes(codes(rep), []string{handoff.VSectionMissing}) {
		t.Fatalf("%s", rep)
	}
	want := `section_missing: section "risk notes": required a non-empty section "risk notes" (a "# risk notes" heading or a "risk notes:" line); found no such section; result.md has only "Summary", "Findings" and "Suggested patch"`
	if rep.Violations[0].String() != want {
		t.Errorf("got  %s\nwant %s", rep.Violations[0], want)
	}
	// The result is still all there to keep: sections, artifacts, refs.
	if len(rep.Sections) != 3 || len(rep.Artifacts) != 1 || len(rep.Refs) != 2 {
		t.Errorf("the report dropped parts of the result: %+v", rep)
	}
}

func TestSeed001LyingChild(t *testing.T) {
	w := newSeedWorld(t)
	// The child claims the spec it "reviewed" had another content, and
	// that its patch has the spec's hash.
	lie := `{"path":"` + w.spec + `","hash":"` + hashABC + `","summary":"mount spec reviewed"}` + "\n" +
		`{"path":"artifact/patch.diff","hash":"` + w.h.Refs[0].Hash + `","kind":"patch","summary":"suggested patch"}` + "\n"
	writeTree(t, w.resultDir, map[string]string{"refs.jsonl.new": lie})
	if err := os.Rename(filepath.Join(w.resultDir, "refs.jsonl.new"), filepath.Join(w.resultDir, "refs.jsonl")); err != nil {
		t.Fatal(err)
	}
	rep, err := handoff.Check(w.h.Contract, w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	if !sameCodes(codes(rep), []string{handoff.VRefHashMismatch, handoff.VRefHashMismatch}) {
		t.Fatalf("%s", rep)
	}
	for i, path := range []string{w.spec, "artifact/patch.diff"} {
		if v := rep.Violations[i]; !strings.Contains(v.Subject, path) || !strings.Contains(v.Subject, "line") {
			t.Errorf("violation %d does not name %s: %s", i, path, v)
		}
	}
}

func TestSeed001ContextPack(t *testing.T) {
	w := newSeedWorld(t)
	rep, err := handoff.Check(w.h.Contract, w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	// What the daemon does at the end of a child: copy the result into the
	// parent's context/child/<child>/, with the refs it verified.
	parent := filepath.Join(w.tmp, "home/1000/agent/coder/session/default/context/child")
	refs, err := handoff.MarshalRefs(rep.VerifiedRefs())
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, filepath.Join(parent, "rev-123"), map[string]string{
		"agent":               "rev-123\n",
		"session":             "default\n",
		"status":              string(rep.Status) + "\n",
		"handoff.md":          w.h.Task,
		"result.md":           seed(t, "result.md"),
		"refs.jsonl":          string(refs),
		"artifact/patch.diff": seed(t, "patch.diff"),
		// Never part of a pack, even were it here.
		"messages.jsonl": `{"role":"user","content":"SECRET-PARENT-PROMPT"}` + "\n",
		"events.jsonl":   `{"type":"SECRET-EVENT"}` + "\n",
	})
	// A second child: its result broke the contract, it left a binary
	// artifact and one nobody asked for, and a symlink.
	writeTree(t, filepath.Join(parent, "rev-124"), map[string]string{
		"agent":              "rev-124",
		"session":            "default",
		"status":             "contract_violated",
		"handoff.md":         "\n\nTask: Review the cgroup section.\n",
		"result.md":          "# Summary\nNothing to report.\n```\n```` odd fences\n```\n",
		"refs.jsonl":         `{"path":"artifact/trace.bin","kind":"trace"}` + "\nnot json\n",
		"contract.json":      `{"artifacts":[{"path":"artifact/notes.md","kind":"notes"}]}`,
		"artifact/notes.md":  "notes\n",
		"artifact/trace.bin": "\x00\x01\x02",
		"artifact/extra.txt": "unasked for",
		"artifact/link":      "->../messages.jsonl",
		"messages.jsonl":     "SECRET-CHILD-MESSAGES\n",
	})
	// A third that has not answered yet.
	writeTree(t, filepath.Join(parent, "rev-125"), map[string]string{"status": "running", "handoff.md": "Task: wait"})

	dirs := []string{filepath.Join(parent, "rev-125"), filepath.Join(parent, "rev-123"), filepath.Join(parent, "rev-124")}
	p, err := handoff.ContextPack(dirs, handoff.PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(p.Text(), w.tmp, "$TMP")
	js, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	jsText := strings.ReplaceAll(string(js), w.tmp, "$TMP")
	for _, out := range []string{text, jsText} {
		if strings.Contains(out, "SECRET") {
			t.Errorf("the pack includes a messages.jsonl or events.jsonl:\n%s", out)
		}
	}
	golden(t, "testdata/pack.golden.md", text)
	golden(t, "testdata/pack.golden.json", jsText)

	// The same folders in another order give the same pack.
	p2, err := handoff.ContextPack([]string{dirs[2], dirs[0], dirs[1] + "/"}, handoff.PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Text() != p.Text() {
		t.Error("the pack depends on the order of its folders")
	}
	if _, err := handoff.ContextPack([]string{filepath.Join(parent, "nobody")}, handoff.PackOptions{}); err == nil {
		t.Error("a missing child folder was packed")
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
