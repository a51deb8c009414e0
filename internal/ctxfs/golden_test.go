package ctxfs_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Seed 001's example handoff and result.
const (
	seedHandoff = `Task: Review the mount ABI section.

Scope:
- Read spec/agent-tool-security.md
- Check whether bind/rbind/noexec/nosuid/nodev semantics are clear
- Do not edit files
- Return issues and proposed patches

Output:
- summary
- concrete suggested changes
- risk notes
`
	seedResult = `Summary:
The mount ABI is mostly clear, but it needs explicit same-directory atomic
rename requirements for queue claims.

Findings:
1. ...
2. ...

Suggested patch:
...
`
	seedSpec  = "# Agent tool security\n\n## Mount ABI\n...\n"
	seedPatch = "--- a/spec/agent-tool-security.md\n+++ b/spec/agent-tool-security.md\n@@ -3 +3,2 @@\n ## Mount ABI\n+Queue claims rename within one directory.\n"
)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// seedRefs is seed 001's example refs.jsonl, with real hashes.
var seedRefs = `{"path":"/work/docs/spec/agent-tool-security.md","hash":"` + sha(seedSpec) + `","summary":"mount spec reviewed"}
{"path":"artifact/patch.diff","kind":"patch","hash":"` + sha(seedPatch) + `","summary":"suggested patch"}
`

// buildTwoAgents builds seed 001's example to its end on a fresh FS: coder
// (uid 1000) hands a review to rev-123 (uid 1001), rev-123 writes its
// result, refs and a patch, ends, and kin copies the result into coder's
// session and marks it completed.
func buildTwoAgents(t *testing.T, root string) (*ctxfs.FS, ctxfs.Session, ctxfs.Session) {
	t.Helper()
	f := openFS(t, root, ctxfs.Options{})
	parent, child := twoAgents(t, f, 1001)
	event := func(s ctxfs.Session, seq int64, typ string, agent, parentID kin.AgentID, data any) {
		t.Helper()
		ev, err := kin.NewEvent(typ, agent, parentID, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.Seq, ev.Time = seq, t0.Add(time.Duration(seq)*time.Second)
		b, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AppendEvent(s, b); err != nil {
			t.Fatal(err)
		}
	}
	event(parent, 1, kin.EventAgentRegistered, 1, 0, map[string]any{"agent": 1, "responsible": "shai@example.com", "parent": 0, "generation": 0})
	event(parent, 2, kin.EventAgentStarted, 1, 0, map[string]any{"agent": 1, "pid": 4242})
	if err := f.SetSessionState(parent, kin.StateActive, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	event(parent, 3, kin.EventChildSpawned, 2, 1, map[string]any{"parent": 1, "child": 2, "generation": 1})
	event(child, 4, kin.EventAgentRegistered, 2, 1, map[string]any{"agent": 2, "responsible": "shai@example.com", "parent": 1, "generation": 1})
	event(child, 5, kin.EventAgentStarted, 2, 1, map[string]any{"agent": 2, "pid": 4243})
	if err := f.SetSessionState(child, kin.StateActive, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}

	// The child works in its own session, as uid 1001.
	out := f.OutputDir(child.UID, child.Agent, child.ID)
	for name, content := range map[string]string{
		"result.md": seedResult, "refs.jsonl": seedRefs, "artifact/patch.diff": seedPatch,
	} {
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, child.UID, child.GID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.Dir(child), ctxfs.FileLatest), []byte("Reviewed the mount ABI; patch in artifact/patch.diff.\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// It ends; kin copies its result into the parent's session.
	event(child, 6, kin.EventAgentExited, 2, 1, map[string]any{"agent": 2, "state": "terminated", "code": 0})
	if err := f.SetSessionState(child, kin.StateTerminated, t0.Add(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	a := agentFixture(2, "rev-123", 1, 4243)
	a.State, a.EndedAt, a.EndReason, a.Exit = kin.StateTerminated, t0.Add(6*time.Second), "exited", &kin.Exit{Code: 0, Known: true}
	v, err := ctxfs.ControlFor(a, runtimeFixture(child.Owner, ctxfs.ParentRef{Agent: "coder", Session: "default", Run: "r123"}, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteControl("rev-123", v); err != nil {
		t.Fatal(err)
	}
	m, err := f.CopyResult(out, f.ChildDir(parent.UID, parent.Agent, parent.ID, child.Agent))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := m.Lookup("artifact/patch.diff"); !ok || c.SHA256 != sha(seedPatch) {
		t.Fatalf("manifest %+v", m)
	}
	if err := f.SetChildStatus(parent, child.Agent, ctxfs.ChildCompleted); err != nil {
		t.Fatal(err)
	}
	return f, parent, child
}

// render lists the tree under root like `ls -lR`, one line per entry:
// type and mode, owner (the daemon's uid and gid shown as "kin"), path;
// small text files follow with their content, each line prefixed "  | ".
func render(t *testing.T, root string) string {
	t.Helper()
	me, mg := os.Geteuid(), os.Getegid()
	id := func(n uint32, mine int) string {
		if int(n) == mine {
			return "kin"
		}
		return strconv.Itoa(int(n))
	}
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(&b, "%s %s:%s %s\n", fi.Mode(), id(st.Uid, me), id(st.Gid, mg), rel)
		if !fi.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case len(data) == 0:
		case len(data) > 4096 || !utf8.Valid(data):
			fmt.Fprintf(&b, "  (%d bytes)\n", len(data))
		default:
			for _, l := range strings.SplitAfter(string(data), "\n") {
				if l == "" {
					continue
				}
				if !strings.HasSuffix(l, "\n") {
					l += "\n  (no newline at end)\n"
				}
				b.WriteString("  | " + l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n%s", path, diff(string(want), got))
	}
}

// diff shows the first lines where want and got differ.
func diff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, w, g)
		}
	}
	return ""
}

// TestGoldenTwoAgents renders the whole tree of seed 001's two-agent
// example and compares it with testdata/golden/two-agents.txt.
func TestGoldenTwoAgents(t *testing.T) {
	requireRoot(t)
	f, _, _ := buildTwoAgents(t, filepath.Join(t.TempDir(), "ctx"))
	golden(t, filepath.Join("testdata", "golden", "two-agents.txt"), render(t, f.Root))
}

// lsR is `ls -R dir` (one name per line, as when piped, in C-locale order)
// with the ctx root shown as /ctx.
func lsR(t *testing.T, root, dir string, recursive bool) string {
	t.Helper()
	var b strings.Builder
	show := func(p string) string { return "/ctx" + strings.TrimPrefix(p, root) }
	var list func(dir string, header bool)
	list = func(dir string, header bool) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		if header {
			b.WriteString(show(dir) + ":\n")
		}
		for _, n := range names {
			b.WriteString(n + "\n")
		}
		if !recursive {
			return
		}
		for _, e := range ents {
			if e.IsDir() {
				b.WriteString("\n")
				list(filepath.Join(dir, e.Name()), true)
			}
		}
	}
	list(dir, recursive)
	return b.String()
}

const (
	readmeBegin = "<!-- ls-R: generated by internal/ctxfs TestReadmeListing -->\n```\n"
	readmeEnd   = "```\n<!-- /ls-R -->"
)

// TestReadmeListing keeps the listing in the README's section "The agent
// filesystem" true to the tree.
func TestReadmeListing(t *testing.T) { readmeListing(t, false) }

// TestReadmeListingServed: the same, the control files served (ctxfuse).
func TestReadmeListingServed(t *testing.T) { readmeListing(t, true) }

func readmeListing(t *testing.T, served bool) {
	requireRoot(t)
	f, parent, child := buildTwoAgents(t, filepath.Join(t.TempDir(), "ctx"))
	if served {
		serveOver(t, f, "coder", "rev-123")
	}
	var b bytes.Buffer
	for _, c := range []struct {
		dir       string
		recursive bool
	}{
		{f.AgentDir(), false},
		{f.ControlDir("rev-123"), false},
		{f.Dir(child), true},
		{f.ChildDir(parent.UID, parent.Agent, parent.ID, child.Agent), true},
	} {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		flag := ""
		if c.recursive {
			flag = "-R "
		}
		fmt.Fprintf(&b, "$ ls %s%s\n", flag, "/ctx"+strings.TrimPrefix(c.dir, f.Root))
		b.WriteString(lsR(t, f.Root, c.dir, c.recursive))
	}
	path := filepath.Join("..", "..", "README.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(doc, []byte(readmeBegin))
	j := bytes.Index(doc, []byte(readmeEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no listing between %q and %q", path, readmeBegin, readmeEnd)
	}
	got := string(doc[:i+len(readmeBegin)]) + b.String() + string(doc[j:])
	golden(t, path, got)
}
