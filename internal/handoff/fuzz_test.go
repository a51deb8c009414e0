package handoff_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// FuzzParseContract: never a panic; an error is a kin invalid error that
// starts with "contract" and names the problem; a contract that parses is
// valid and survives Marshal and ParseContract unchanged.
func FuzzParseContract(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"version":1}`, `null`, `[]`, ``, `{"sections":[{"name":"Summary"}]}`,
		`{"version":1,"sections":[{"name":"Summary","max_bytes":4096},{"name":"Risk notes","optional":true,"aliases":["risks"]}],` +
			`"artifacts":[{"path":"artifact/patch.diff","kind":"patch","max_bytes":1048576},{"path":"artifact/x","optional":true}],` +
			`"unlisted_artifacts":"reject","limits":{"result_bytes":65536,"artifact_bytes":67108864,"artifacts":256,"refs":1000}}`,
		`{"artifacts":[{"path":"artifact/../x"}]}`, `{"artifacts":[{"path":"artifact/a"},{"path":"artifact/a/b"}]}`,
		`{"sections":[{"name":"a","name":"b"}]}`, `{"Sections":[]}`, `{"limits":{"refs":1e3}}`,
		`{"sections":[{"name":"\u00dcber"}]}`, "{\"sections\":[{\"name\":\"\xff\"}]}", `{"sections":[[[[]]]]}`,
		`{"limits":{"result_bytes":-0}}`, `{"version":1}{}`, `{"sections":[{"name":"a","aliases":["A"]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := handoff.ParseContract(data)
		if err != nil {
			var ke *kin.Error
			if !errors.As(err, &ke) || ke.Code != kin.ECodeInvalid || !strings.HasPrefix(ke.Message, "contract") || len(ke.Message) < len("contract x") {
				t.Fatalf("error %#v does not name the problem", err)
			}
			if !utf8.ValidString(ke.Message) {
				t.Fatalf("error %q is not UTF-8", ke.Message)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed an invalid contract: %v", err)
		}
		b, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := handoff.ParseContract(b)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", b, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip changed %+v to %+v", c, again)
		}
	})
}

// FuzzParseRefs: never a panic; an error names its line; refs that parse
// survive MarshalRefs and ParseRefs unchanged.
func FuzzParseRefs(f *testing.F) {
	for _, s := range []string{
		`{"path":"/work/docs/spec/agent-tool-security.md","hash":"sha256:...","summary":"mount spec reviewed"}`,
		`{"path":"artifact/patch.diff","kind":"patch","summary":"suggested patch"}`,
		`{"path":"/a","hash":"` + hashABC + `"}` + "\n\n" + `{"path":"b"}`,
		``, "\n", `{}`, `{"path":""}`, `{"path":"a","sha":"x"}`, `{"path":"a","path":"a"}`, `{"Path":"a"}`,
		`[]`, `null`, `{"path":"a"}{"path":"b"}`, "{\"path\":\"\xff\"}", `{"path":"a","summary":"a\nb"}`,
		`{"path":"a","kind":"a b"}`, `{"path":"a\u0000"}`, `{"path":"<&>","summary":"\u2028"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, err := handoff.ParseRefs(data)
		if err != nil {
			var ke *kin.Error
			if !errors.As(err, &ke) || ke.Code != kin.ECodeInvalid || !strings.HasPrefix(ke.Message, "refs.jsonl line ") {
				t.Fatalf("error %#v does not name its line", err)
			}
			return
		}
		for _, r := range refs {
			if err := r.Validate(); err != nil {
				t.Fatalf("parsed an invalid ref %+v: %v", r, err)
			}
		}
		out, err := handoff.MarshalRefs(refs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := handoff.ParseRefs(out)
		if err != nil || len(again) != len(refs) || (len(refs) > 0 && !reflect.DeepEqual(again, refs)) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, refs, again)
		}
	})
}

// FuzzParseSections: never a panic, and every section's line and body come
// from the input.
func FuzzParseSections(f *testing.F) {
	f.Add("Summary:\nx\n# Findings\n```\n# no\n```\n", "summary")
	f.Add("**Summary:** a\r\n## B ##\n~~~\n", "")
	f.Fuzz(func(t *testing.T, md, label string) {
		lines := strings.Count(md, "\n") + 1
		for _, s := range handoff.ParseSections(md, label) {
			if s.Line < 1 || s.Line > lines || s.Level < 1 || s.Level > handoff.LabelLevel {
				t.Fatalf("section %+v out of range", s)
			}
			if s.Body != "" && !strings.Contains(strings.ReplaceAll(md, "\r", ""), strings.ReplaceAll(firstLine(s.Body), "\r", "")) {
				t.Fatalf("body %q is not from the input", s.Body)
			}
		}
	})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
