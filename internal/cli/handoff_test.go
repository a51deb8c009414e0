package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// writeFiles writes name/content pairs into a new directory and returns it.
func writeFiles(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSpawnHandoff: the CLI reads the handoff's files, hashes the refs
// itself, and sends the contract as written.
func TestSpawnHandoff(t *testing.T) {
	dir := writeFiles(t,
		"task.md", "Review the mount spec for path traversal.\n",
		"spec.md", "# Mounts\n",
		"notes.txt", "earlier notes\n",
		"contract.json", "{\n  \"sections\": [{\"name\": \"Summary\"}, {\"name\": \"Findings\"}],\n  \"unlisted_artifacts\": \"reject\"\n}\n",
	)
	t.Chdir(dir) // --ref spec.md is relative to the working directory
	svc := &fakeService{}
	r := runFake(t, svc, "", "spawn", "--json", "--name", "rev-123", "--parent", "7",
		"--handoff", "task.md", "--ref", "spec.md", "--ref", filepath.Join(dir, "notes.txt"),
		"--contract", "contract.json", "--", "true")
	wantOK(t, r)
	if len(svc.spawns) != 1 {
		t.Fatalf("%d spawns", len(svc.spawns))
	}
	want := &kin.Handoff{
		Task: "Review the mount spec for path traversal.\n",
		Refs: []kin.Ref{
			{Path: filepath.Join(dir, "spec.md"), Hash: handoff.HashBytes([]byte("# Mounts\n"))},
			{Path: filepath.Join(dir, "notes.txt"), Hash: handoff.HashBytes([]byte("earlier notes\n"))},
		},
		Contract: []byte("{\n  \"sections\": [{\"name\": \"Summary\"}, {\"name\": \"Findings\"}],\n  \"unlisted_artifacts\": \"reject\"\n}"),
	}
	if got := svc.spawns[0].Handoff; !reflect.DeepEqual(got, want) {
		t.Errorf("handoff = %+v\nwant %+v", got, want)
	}

	// The task from stdin; no contract is no contract (the daemon applies
	// the default).
	r = runFake(t, svc, "Summarise the logs.\n", "spawn", "--json", "--parent", "7", "--handoff", "-", "true")
	wantOK(t, r)
	if got := svc.spawns[1].Handoff; got == nil || got.Task != "Summarise the logs.\n" || got.Refs != nil || got.Contract != nil {
		t.Errorf("handoff from stdin = %+v", got)
	}

	// Without --handoff there is none.
	wantOK(t, runFake(t, svc, "", "spawn", "--json", "--parent", "7", "true"))
	if got := svc.spawns[2].Handoff; got != nil {
		t.Errorf("a spawn without --handoff sent %+v", got)
	}
}

func TestSpawnHandoffErrors(t *testing.T) {
	dir := writeFiles(t,
		"task.md", "Do it.\n",
		"blank.md", " \n\n",
		"spec.md", "spec\n",
		"zero.json", `{"sections":[{"name":"Summary","max_bytes":0}]}`,
		"typo.json", `{"section":[{"name":"Summary"}]}`,
	)
	t.Chdir(dir)
	svc := &fakeService{}
	spawn := func(args ...string) result {
		t.Helper()
		return runFake(t, svc, "", append(append([]string{"spawn", "--parent", "7"}, args...), "true")...)
	}
	for _, flag := range []string{"--ref", "--contract"} {
		wantUsage(t, spawn(flag, "spec.md"), flag, "needs --handoff")
	}
	// The handoff's policy and mount subsets are gone: the agent's policy
	// is kin spawn --policy, which needs no handoff.
	wantUsage(t, spawn("--handoff", "task.md", "--mounts", "spec.md"), "unknown flag: --mounts")
	for _, tc := range []struct {
		args []string
		want []string // in the message
	}{
		{[]string{"--handoff", "missing.md"}, []string{"--handoff", "missing.md", "no such file"}},
		{[]string{"--handoff", "blank.md"}, []string{"--handoff blank.md", "handoff.md is empty"}},
		{[]string{"--handoff", "."}, []string{"--handoff . is a directory"}},
		{[]string{"--handoff", ""}, []string{"--handoff needs a file name"}},
		{[]string{"--handoff", "task.md", "--ref", "missing.txt"}, []string{"--ref", filepath.Join(dir, "missing.txt"), "no such file"}},
		{[]string{"--handoff", "task.md", "--ref", "."}, []string{"--ref", "is a directory"}},
		{[]string{"--handoff", "task.md", "--ref", "spec.md", "--ref", filepath.Join(dir, "spec.md")}, []string{"--ref", "given twice"}},
		{[]string{"--handoff", "task.md", "--contract", "zero.json"}, []string{"--contract zero.json", "max_bytes"}},
		{[]string{"--handoff", "task.md", "--contract", "typo.json"}, []string{"--contract typo.json", `"section"`}},
		{[]string{"--handoff", "task.md", "--contract", "missing.json"}, []string{"--contract", "missing.json"}},
	} {
		msg := wantError(t, spawn(append([]string{"--json"}, tc.args...)...), kin.ECodeInvalid)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: message %q does not say %q", tc.args, msg, w)
			}
		}
	}
	if len(svc.spawns) != 0 {
		t.Errorf("bad handoffs reached the service: %+v", svc.spawns)
	}
}

// TestHandoffInsideAnAgent runs seed 001's handoff as a parent agent would,
// against the real daemon: it hands two children a task (one with a
// contract its result fails), waits for each, and reads its context pack
// and a result.
func TestHandoffInsideAnAgent(t *testing.T) {
	d := kintest.StartDaemon(t)
	dir := kintest.SharedDir(t) // the parent runs as its own uid
	for name, content := range map[string]string{
		"task.md":       "Review the spec.\nIn detail.\n",
		"spec.md":       "# Spec\n",
		"contract.json": `{"sections":[{"name":"Summary"},{"name":"Findings"}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := kintest.AgentBinaryPath()
	if err != nil {
		t.Fatal(err)
	}
	// The children print the input refs they were handed and write
	// result.md into $KIN_OUTPUT; the parent reads each one's id from kin
	// spawn --json.
	script := `K="$1"; D="$2"
child='cat "${KIN_HANDOFF%/*}/refs.jsonl"; printf "Summary: fine\n" > "$KIN_OUTPUT/result.md"'
spawn() { "$K" spawn --json "$@" -- sh -c "$child" | sed -n 's/^  "id": \([0-9]*\),$/\1/p'; }
ok=$(spawn --name rev-ok --handoff "$D/task.md" --ref "$D/spec.md")
bad=$(spawn --name rev-bad --handoff - --contract "$D/contract.json" <"$D/task.md")
"$K" wait "$ok"; echo "exit $?"
"$K" wait "$bad"; echo "exit $?"
"$K" result "$ok"; echo "exit $?"
"$K" logs "$ok"
"$K" context pack; echo "exit $?"
`
	a := spawnJSON(t, d, "--name", "lead", "--responsible", "ops", "--env", asKinEnv+"=1", "--", "sh", "-c", script, "sh", bin, dir)
	a = waitEnded(t, d, a.ID)
	out := logsOf(t, d, a.ID)
	if a.Exit == nil || a.Exit.Code != 0 {
		t.Fatalf("the parent ended with %v:\n%s", a.Exit, out)
	}
	for _, want := range []string{
		"agent 2 (rev-ok): completed\n\nSummary: fine\nexit 0\n",
		"agent 3 (rev-bad): contract_violated\n- ",
		"Findings",
		"\n\nSummary: fine\nexit 3\nSummary: fine\nexit 0\n",
		// The input ref, hashed by kin spawn, as the child found it.
		`{"path":"` + filepath.Join(dir, "spec.md") + `","hash":"` + handoff.HashBytes([]byte("# Spec\n")) + `"}` + "\n# Context pack: 2 children\n",
		"## Child rev-bad\n\nstatus: contract_violated\n",
		"## Child rev-ok\n\nstatus: completed\n",
		"task: Review the spec.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the parent's output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "exit 0\n") {
		t.Errorf("kin context pack failed:\n%s", out)
	}
}
