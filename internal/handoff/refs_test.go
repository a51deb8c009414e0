package handoff_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

const (
	hashABC   = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // sha256("abc")
	hashEmpty = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func TestSeedRefLinesVerbatim(t *testing.T) {
	lines := strings.Split(strings.TrimSuffix(seed(t, "refs.jsonl"), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("testdata/seed001/refs.jsonl has %d lines", len(lines))
	}
	// The seed's first line carries a placeholder, "sha256:...": strictly,
	// that is no hash, and the error names the line and the field.
	_, err := handoff.ParseRefs([]byte(seed(t, "refs.jsonl")))
	wantInvalid(t, err, "refs.jsonl line 1", `hash "sha256:..." is not "sha256:" followed by 64 lower-case hex digits`)

	// The second line is fine as it is.
	refs, err := handoff.ParseRefs([]byte(lines[1]))
	if err != nil {
		t.Fatal(err)
	}
	want := []handoff.Ref{{Path: "artifact/patch.diff", Kind: "patch", Summary: "suggested patch"}}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("got %+v", refs)
	}

	// With a real hash in place of the placeholder, both parse, and
	// MarshalRefs writes them back byte for byte.
	real := strings.Replace(seed(t, "refs.jsonl"), "sha256:...", hashABC, 1)
	refs, err = handoff.ParseRefs([]byte(real))
	if err != nil {
		t.Fatal(err)
	}
	want = append([]handoff.Ref{{Path: "/work/docs/spec/agent-tool-security.md", Hash: hashABC, Summary: "mount spec reviewed"}}, want...)
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("got %+v", refs)
	}
	out, err := handoff.MarshalRefs(refs)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != real {
		t.Errorf("MarshalRefs:\n%s\nwant\n%s", out, real)
	}
}

func TestParseRefs(t *testing.T) {
	good := `{"path":"a"}`
	tests := []struct {
		name  string
		in    string
		want  int      // refs, when wants is empty
		wants []string // error parts
	}{
		{"empty file", "", 0, nil},
		{"blank lines are skipped", "\n  \n" + good + "\n\n" + good + "\n", 2, nil},
		{"no final newline", good + "\n" + good, 2, nil},
		{"CRLF", good + "\r\n" + good + "\r\n", 2, nil},
		{"every field", `{"summary":"s <&>","kind":"text/x-diff","hash":"` + hashABC + `","path":"/x y/z"}`, 1, nil},
		{"empty summary", `{"path":"a","summary":""}`, 1, nil},
		{"unicode", `{"path":"/tmp/über","summary":"naïve \u00e9"}`, 1, nil},

		{"unknown key, named with its line", good + "\n" + `{"path":"a","sha":"x"}`, 0, []string{`refs.jsonl line 2 has an unknown key "sha"`, "allowed: path, hash, kind, summary"}},
		{"line numbers count blank lines", "\n\n" + `{"path":"a","size":1}`, 0, []string{"refs.jsonl line 3"}},
		{"wrong case key", `{"Path":"a"}`, 0, []string{`unknown key "Path"`, `did you mean "path"`}},
		{"duplicate key", `{"path":"a","path":"b"}`, 0, []string{`line 1 has the key "path" twice`}},
		{"no path", `{"summary":"x"}`, 0, []string{"refs.jsonl line 1 has no path"}},
		{"empty path", `{"path":""}`, 0, []string{"refs.jsonl line 1: path is empty"}},
		{"null path", `{"path":null}`, 0, []string{"line 1: path must be a string, not null"}},
		{"number path", `{"path":1}`, 0, []string{"path must be a string, not a number"}},
		{"object summary", `{"path":"a","summary":{}}`, 0, []string{"summary must be a string, not an object"}},
		{"empty hash", `{"path":"a","hash":""}`, 0, []string{"line 1: hash is empty"}},
		{"placeholder hash", `{"path":"a","hash":"sha256:..."}`, 0, []string{`hash "sha256:..." is not`}},
		{"upper-case hash", `{"path":"a","hash":"` + strings.ToUpper(hashABC) + `"}`, 0, []string{"lower-case hex"}},
		{"short hash", `{"path":"a","hash":"sha256:abcd"}`, 0, []string{"hash"}},
		{"other algorithm", `{"path":"a","hash":"md5:d41d8cd98f00b204e9800998ecf8427e"}`, 0, []string{"hash"}},
		{"bare hex", `{"path":"a","hash":"` + strings.TrimPrefix(hashABC, "sha256:") + `"}`, 0, []string{"hash"}},
		{"empty kind", `{"path":"a","kind":""}`, 0, []string{"line 1: kind is empty"}},
		{"kind with a space", `{"path":"a","kind":"a patch"}`, 0, []string{`kind "a patch" must hold only`}},
		{"summary with a newline", `{"path":"a","summary":"two\nlines"}`, 0, []string{"summary has a control character", "one line"}},
		{"path with NUL", `{"path":"a\u0000"}`, 0, []string{"path has a control character"}},
		{"long summary", `{"path":"a","summary":"` + strings.Repeat("s", handoff.MaxSummaryLen+1) + `"}`, 0, []string{"summary is 4097 bytes long"}},
		{"long path", `{"path":"` + strings.Repeat("p", handoff.MaxPathLen+1) + `"}`, 0, []string{"path is 4097 bytes long"}},
		{"long line", `{"path":"a","summary":"` + strings.Repeat("s", handoff.MaxRefLine) + `"}`, 0, []string{"refs.jsonl line 1 is 65561 bytes long"}},
		{"invalid UTF-8", "{\"path\":\"\xff\"}", 0, []string{"refs.jsonl line 1 is not valid UTF-8"}},
		{"not JSON", "path: a", 0, []string{"refs.jsonl line 1 is not valid JSON"}},
		{"a list", `["a"]`, 0, []string{"line 1 must be a JSON object, not a list"}},
		{"a string", `"a"`, 0, []string{"must be a JSON object, not a string"}},
		{"two objects on a line", good + good, 0, []string{"line 1 has data after the JSON object"}},
		{"an object over two lines", "{\"path\":\n\"a\"}", 0, []string{"refs.jsonl line 1 is not valid JSON"}},
		{"trailing comma", `{"path":"a",}`, 0, []string{"line 1 is not valid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := handoff.ParseRefs([]byte(tc.in))
			if len(tc.wants) > 0 {
				if err == nil {
					t.Fatalf("parsed: %+v", refs)
				}
				wantInvalid(t, err, tc.wants...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(refs) != tc.want {
				t.Errorf("%d refs, want %d: %+v", len(refs), tc.want, refs)
			}
			out, err := handoff.MarshalRefs(refs)
			if err != nil {
				t.Fatal(err)
			}
			again, err := handoff.ParseRefs(out)
			if err != nil || !reflect.DeepEqual(again, refs) {
				t.Errorf("round trip: %v %+v", err, again)
			}
		})
	}
}

func TestMarshalRefsRefusesBadRefs(t *testing.T) {
	_, err := handoff.MarshalRefs([]handoff.Ref{{Path: "a"}, {Path: "b", Hash: "sha256:x"}})
	wantInvalid(t, err, `ref 2 ("b")`, "hash")
	out, err := handoff.MarshalRefs(nil)
	if err != nil || len(out) != 0 {
		t.Errorf("no refs: %q %v", out, err)
	}
}

func TestHashRef(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"abc": "abc", "empty": "", "link": "->abc", "sub/": "", "dangling": "->nowhere"})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"abc": hashABC, "empty": hashEmpty, "link": hashABC} {
		got, err := handoff.HashRef(filepath.Join(dir, name))
		if err != nil || got != want {
			t.Errorf("HashRef(%s) = %q, %v; want %s", name, got, err, want)
		}
	}
	if handoff.HashBytes([]byte("abc")) != hashABC {
		t.Error("HashBytes disagrees with HashRef")
	}
	_, err := handoff.HashRef(filepath.Join(dir, "sub"))
	wantInvalid(t, err, "is a directory; a ref names one file")
	_, err = handoff.HashRef(filepath.Join(dir, "fifo")) // must not block
	wantInvalid(t, err, "is a named pipe, not a regular file")
	_, err = handoff.HashRef("/dev/null")
	wantInvalid(t, err, "is a device")
	for _, name := range []string{"missing", "dangling"} {
		if _, err := handoff.HashRef(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("HashRef(%s): %v", name, err)
		}
	}
}

func TestValidHash(t *testing.T) {
	for s, want := range map[string]bool{
		hashABC: true, hashEmpty: true, "": false, "sha256:": false, "sha256:...": false,
		strings.ToUpper(hashABC): false, hashABC + "0": false, hashABC[:len(hashABC)-1] + "g": false,
		"sha512:" + strings.TrimPrefix(hashABC, "sha256:"): false,
	} {
		if handoff.ValidHash(s) != want {
			t.Errorf("ValidHash(%q) = %v", s, !want)
		}
	}
}
