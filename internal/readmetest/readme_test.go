package readmetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/exampletest"
	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/pgtest"
)

// TestReadme runs README.md's shell blocks in order against a real kin serve
// on a temporary home, with the kin binary built from this tree first in
// PATH, in the repository's root (package doc: what runs and how output is
// compared). A block that cannot run here is marked in README.md with
// <!-- readme-test: skip (why) --> right before it: the daemon in the
// foreground and `go install` (this test starts kin serve and builds kin
// itself), and the blocks that need what CI lacks (Claude Code, an AAuth
// resource server in another terminal). Stopping the daemon at the end
// stops every agent the blocks started.
func TestReadme(t *testing.T) { runReadme(t) }

// TestReadmeOnPostgres runs the same blocks, unchanged, against a kin
// serve whose store is a PostgreSQL database (issue 23): `kin serve
// --store postgres://...` on a throw-away cluster (internal/pgtest).
func TestReadmeOnPostgres(t *testing.T) {
	runReadme(t, "--store", pgtest.NewDatabase(t))
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// runReadme runs README.md's blocks against a kin serve started with
// serveArgs.
func runReadme(t *testing.T, serveArgs ...string) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bin := exampletest.Kin(t)
	// "Budgets nobody can lie to": the model gateway, on the fake upstream
	// the README starts with kin dev fake-model.
	up := fakemodel.Start(t, fakemodel.Options{Key: "upstream-secret", InputTokens: 10, OutputTokens: 5, Reply: "ok"})
	key := filepath.Join(t.TempDir(), "upstream.key")
	if err := os.WriteFile(key, []byte("upstream-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The HTTP address on a free port: agents reach the gateway there with
	// $OPENAI_BASE_URL, as their SDKs do.
	serveArgs = append([]string{"--http", "127.0.0.1:0",
		"--model-upstream", "openai=" + up.URL, "--model-upstream", "anthropic=" + up.URL,
		"--model-key", "openai=@" + key, "--model-key", "anthropic=@" + key}, serveArgs...)
	d := exampletest.Serve(t, bin, serveArgs...)
	r := Runner{Dir: workDir(t, root), Env: readerEnv(bin, d.Home), Within: 15 * time.Second}
	ran := 0
	for _, b := range Parse(string(text)) {
		if b.Skip != "" {
			t.Logf("README.md:%d: %s block skipped: %s", b.Line, b.Lang, b.Skip)
		}
		if !b.Runs() {
			continue
		}
		for _, s := range b.Steps {
			if err := r.Run(context.Background(), s); err != nil {
				t.Fatalf("README.md:%d (the block at line %d): %v", s.Line, b.Line, err)
			}
			ran++
		}
	}
	t.Logf("%d README commands ran", ran)
}

// workDir is where the blocks run: a reader's clone, as far as they can
// tell (examples/ and internal/ of this tree), in a directory of its own so
// that the files they write (log.pub, kin-audit/, ...) stay out of the tree.
// Agents run as their own uids: it is readable by all.
func workDir(t *testing.T, root string) string {
	dir, err := os.MkdirTemp("", "kin-readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"examples", "internal"} {
		if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readerEnv is a reader's shell: kin first in PATH, KIN_HOME set, and no
// KIN_* variable of the test's own environment.
func readerEnv(bin, home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "KIN_"):
			continue
		case k == "PATH":
			kv = "PATH=" + filepath.Dir(bin) + ":" + v
		}
		env = append(env, kv)
	}
	return append(env, "KIN_HOME="+home)
}

// TestHarnessFailsOnBrokenBlock: the harness reports a broken block (a
// command that fails, output that differs, an error the file shows that
// does not happen) and passes a good one.
func TestHarnessFailsOnBrokenBlock(t *testing.T) {
	const doc = "# t\n\n```sh\necho fine\nno-such-command-here --flag\n```\n\n" +
		"```console\n$ echo 'agent 12 (rev-123): completed'\nagent 7 (rev-123): completed\n$ echo two apples\nthree apples\n```\n\n" +
		"```sh\ntrue   # -> kin: refused\n```\n\n" +
		"<!-- readme-test: skip (shown only) -->\n```sh\nexit 1\n```\n\n```json\n{}\n```\n"
	blocks := Parse(doc)
	if len(blocks) != 5 || !blocks[0].Runs() || !blocks[1].Runs() || blocks[3].Runs() || blocks[3].Skip != "(shown only)" || blocks[4].Runs() {
		t.Fatalf("blocks = %+v", blocks)
	}
	r := Runner{Dir: t.TempDir(), Env: os.Environ(), Within: 200 * time.Millisecond}
	ctx := context.Background()
	run := func(s Step) error { return r.Run(ctx, s) }
	if err := run(blocks[0].Steps[0]); err != nil {
		t.Errorf("a good command failed: %v", err)
	}
	if err := run(blocks[0].Steps[1]); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("a missing command: %v, want an error naming line 5", err)
	}
	if err := run(blocks[1].Steps[0]); err != nil {
		t.Errorf("output that differs only in an id: %v", err)
	}
	if err := run(blocks[1].Steps[1]); err == nil || !strings.Contains(err.Error(), "three apples") {
		t.Errorf("output that differs: %v, want an error showing what was expected", err)
	}
	if err := run(blocks[2].Steps[0]); err == nil || !strings.Contains(err.Error(), "succeeded") {
		t.Errorf("an error the file shows that does not happen: %v", err)
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"#8 coder  role=- gen=0 pid=17376", "#12 coder  role=- gen=0 pid=9", true},
		{"#8 coder  role=- gen=0 pid=17376", "#12 coder role=x gen=0 pid=9", false},
		{"name sleep-8b022d", "name sleep-0d7c84", true},
		{"a\n...\nz", "a\nb\nc\nz", true},
		{"a\n...", "a", true},
		{"5 ... agent.started  agent=2 command=[\"x\"]", "5 2026-11-21T13:21:13.484Z agent.started  agent=2 command=[\"x\"]", true},
		{"ok  # a comment", "ok", true},
		{"left 48800", "left 50000", true},
		{"completed", "failed", false},
		{"latency_ms=1.692 model=x", "latency_ms=2 model=x", true}, // a whole float prints without its fraction
		{"latency_ms=1.692 model=x", "latency_ms=2.5 model=x", true},
		{"latency_ms=1.692 model=x", "latency_ms=2. model=x", false},
	} {
		if got := Match(strings.Split(c.want, "\n"), strings.Split(c.got, "\n")); got != c.ok {
			t.Errorf("Match(%q, %q) = %v, want %v", c.want, c.got, got, c.ok)
		}
	}
}
