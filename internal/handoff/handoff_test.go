package handoff_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kin-agents/kin/internal/handoff"
)

func TestInputRefs(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"abc": "abc", "sub/": "", "link": "->abc"})
	t.Chdir(dir)
	refs, err := handoff.InputRefs([]string{"abc", filepath.Join(dir, "link"), "./sub/../abc2"})
	if err == nil {
		t.Fatalf("a missing file was handed off: %+v", refs)
	}
	wantInvalid(t, err, "ref "+filepath.Join(dir, "abc2"), "no such file")

	refs, err = handoff.InputRefs([]string{"abc", filepath.Join(dir, "link")})
	if err != nil {
		t.Fatal(err)
	}
	want := []handoff.Ref{{Path: filepath.Join(dir, "abc"), Hash: hashABC}, {Path: filepath.Join(dir, "link"), Hash: hashABC}}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("got %+v", refs)
	}
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"sub"}, "is a directory; a ref names one file"},
		{[]string{"abc", "./abc"}, "is given twice"},
		{[]string{""}, "a ref path is empty"},
		{[]string{"/dev/null"}, "a device"},
	} {
		_, err := handoff.InputRefs(tc.paths)
		wantInvalid(t, err, tc.want)
	}
}

func TestHandoffRoundTrip(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"spec.md": seed(t, "agent-tool-security.md")})
	refs, err := handoff.InputRefs([]string{filepath.Join(dir, "spec.md")})
	if err != nil {
		t.Fatal(err)
	}
	refs[0].Summary = "the spec to review"
	h := handoff.Handoff{
		Task:     seed(t, "handoff.md"),
		Refs:     refs,
		Policy:   json.RawMessage(`{"write":false}`),
		Mounts:   json.RawMessage(` {"/work/docs":"ro"} `),
		Contract: mustContract(t, seed(t, "contract.json")),
	}
	files, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	out := filepath.Join(dir, "handoff")
	for _, f := range files {
		names = append(names, f.Name)
		writeTree(t, out, map[string]string{f.Name: string(f.Data)})
	}
	if got := strings.Join(names, " "); got != "handoff.md refs.jsonl contract.json policy.json mounts.json" {
		t.Errorf("files: %s", got)
	}
	if string(files[0].Data) != seed(t, "handoff.md") {
		t.Error("handoff.md is not the task verbatim")
	}
	if want := `{"path":"` + refs[0].Path + `","hash":"` + refs[0].Hash + `","summary":"the spec to review"}` + "\n"; string(files[1].Data) != want {
		t.Errorf("refs.jsonl:\n%s", files[1].Data)
	}
	if string(files[4].Data) != `{"/work/docs":"ro"}`+"\n" {
		t.Errorf("mounts.json: %q", files[4].Data)
	}
	got, err := handoff.ReadHandoff(os.DirFS(out))
	if err != nil {
		t.Fatal(err)
	}
	h.Mounts = json.RawMessage(`{"/work/docs":"ro"}`)
	if !reflect.DeepEqual(got, h) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, h)
	}

	// The minimal handoff: a task and a contract; no refs or subsets.
	min := handoff.Handoff{Task: "Task: x\n", Contract: handoff.DefaultContract()}
	files, err = min.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || len(files[1].Data) != 0 {
		t.Errorf("files %+v", files)
	}
	fsys := fstest.MapFS{}
	for _, f := range files {
		fsys[f.Name] = &fstest.MapFile{Data: f.Data}
	}
	delete(fsys, handoff.FileRefs)
	got, err = handoff.ReadHandoff(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, min) {
		t.Errorf("read back %+v", got)
	}

	// And as one JSON document (the API's form), strictly.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON handoff.Handoff
	if err := json.Unmarshal(b, &fromJSON); err != nil || !reflect.DeepEqual(fromJSON, h) {
		t.Errorf("JSON round trip: %v\n%s", err, b)
	}
}

func TestHandoffValidate(t *testing.T) {
	good := func() handoff.Handoff {
		return handoff.Handoff{Task: "Task: x", Contract: handoff.DefaultContract(),
			Refs: []handoff.Ref{{Path: "/a", Hash: hashABC}}}
	}
	tests := []struct {
		name   string
		change func(h *handoff.Handoff)
		want   string
	}{
		{"empty task", func(h *handoff.Handoff) { h.Task = " \n" }, "handoff.md is empty"},
		{"huge task", func(h *handoff.Handoff) { h.Task = strings.Repeat("x", handoff.MaxTaskBytes+1) }, "handoff.md is 262145 bytes long"},
		{"task not UTF-8", func(h *handoff.Handoff) { h.Task = "\xff" }, "not valid UTF-8"},
		{"task with NUL", func(h *handoff.Handoff) { h.Task = "a\x00" }, "NUL"},
		{"relative ref", func(h *handoff.Handoff) { h.Refs[0].Path = "a" }, `input ref 1: path "a" must be absolute and clean`},
		{"unclean ref", func(h *handoff.Handoff) { h.Refs[0].Path = "/a/../b" }, "must be absolute and clean"},
		{"ref without hash", func(h *handoff.Handoff) { h.Refs[0].Hash = "" }, "input ref 1 (/a) has no hash"},
		{"ref with a bad hash", func(h *handoff.Handoff) { h.Refs[0].Hash = "sha256:..." }, "input ref 1: hash"},
		{"ref twice", func(h *handoff.Handoff) { h.Refs = append(h.Refs, h.Refs[0]) }, "input ref 2: /a is given twice"},
		{"policy not JSON", func(h *handoff.Handoff) { h.Policy = json.RawMessage(`{`) }, "policy.json is not valid JSON"},
		{"policy a list", func(h *handoff.Handoff) { h.Policy = json.RawMessage(`[]`) }, "policy.json must be a JSON object, not a list"},
		{"mounts null", func(h *handoff.Handoff) { h.Mounts = json.RawMessage(`null`) }, "mounts.json must be a JSON object, not null"},
		{"mounts huge", func(h *handoff.Handoff) {
			h.Mounts = json.RawMessage(`{"a":"` + strings.Repeat("x", handoff.MaxSubsetBytes) + `"}`)
		}, "mounts.json is 65544 bytes long"},
		{"bad contract", func(h *handoff.Handoff) { h.Contract.Limits.Refs = -1 }, "contract: limits.refs is -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			if err := h.Validate(); err != nil {
				t.Fatal(err)
			}
			tc.change(&h)
			_, err := h.Marshal()
			wantInvalid(t, err, tc.want)
		})
	}
}

func TestReadHandoffBad(t *testing.T) {
	ok := fstest.MapFS{
		"handoff.md":    {Data: []byte("Task: x\n")},
		"contract.json": {Data: []byte(`{}`)},
	}
	tests := []struct {
		name  string
		files map[string]string // "" deletes
		want  string
	}{
		{"no handoff.md", map[string]string{"handoff.md": ""}, "handoff.md"},
		{"no contract.json", map[string]string{"contract.json": ""}, "contract.json"},
		{"bad contract", map[string]string{"contract.json": `{"x":1}`}, `contract has an unknown key "x"`},
		{"bad refs line", map[string]string{"refs.jsonl": `{"path":"/a","hash":"` + hashABC + `"}` + "\n{}"}, "refs.jsonl line 2 has no path"},
		{"relative input ref", map[string]string{"refs.jsonl": `{"path":"a","hash":"` + hashABC + `"}`}, "must be absolute"},
		{"policy not an object", map[string]string{"policy.json": `"all"`}, "policy.json must be a JSON object"},
		{"empty task", map[string]string{"handoff.md": "\n"}, "handoff.md is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for k, v := range ok {
				fsys[k] = v
			}
			for k, v := range tc.files {
				if v == "" {
					delete(fsys, k)
				} else {
					fsys[k] = &fstest.MapFile{Data: []byte(v)}
				}
			}
			_, err := handoff.ReadHandoff(fsys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	fsys := fstest.MapFS{"handoff.md": {Mode: 0o755 | os.ModeDir}, "contract.json": ok["contract.json"]}
	if _, err := handoff.ReadHandoff(fsys); err == nil || !strings.Contains(err.Error(), "handoff.md is a directory") {
		t.Errorf("a directory as handoff.md: %v", err)
	}
}
