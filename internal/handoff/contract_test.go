package handoff_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

func TestParseContractGood(t *testing.T) {
	def := handoff.DefaultLimits()
	tests := []struct {
		name string
		in   string
		want handoff.Contract
	}{
		{"empty object: nothing required, default limits", `{}`,
			handoff.Contract{UnlistedArtifacts: handoff.UnlistedAllow, Limits: def}},
		{"seed 001's e2e contract", seed(t, "contract.json"), handoff.Contract{
			Sections: []handoff.SectionSpec{{Name: "Summary"}, {Name: "Findings"},
				{Name: "Suggested patch", Aliases: []string{"concrete suggested changes"}}},
			Artifacts:         []handoff.ArtifactSpec{{Path: "artifact/patch.diff", Kind: "patch"}},
			UnlistedArtifacts: handoff.UnlistedAllow, Limits: def}},
		{"seed 001's handoff Output list", seed(t, "output-contract.json"), handoff.Contract{
			Sections: []handoff.SectionSpec{{Name: "summary"},
				{Name: "concrete suggested changes", Aliases: []string{"suggested patch"}}, {Name: "risk notes"}},
			UnlistedArtifacts: handoff.UnlistedAllow, Limits: def}},
		{"every field", `{"version":1,
			"sections":[{"name":"Summary","max_bytes":4096},{"name":"Risk notes","optional":true,"aliases":["risks","Risk (notes)"]}],
			"artifacts":[{"path":"artifact/out/patch.diff","kind":"text/x-diff","max_bytes":1048576},{"path":"artifact/log.txt","optional":true}],
			"unlisted_artifacts":"reject",
			"limits":{"result_bytes":4194304,"artifact_bytes":2097152,"artifacts":2,"refs":0}}`,
			handoff.Contract{
				Sections: []handoff.SectionSpec{{Name: "Summary", MaxBytes: 4096},
					{Name: "Risk notes", Optional: true, Aliases: []string{"risks", "Risk (notes)"}}},
				Artifacts: []handoff.ArtifactSpec{{Path: "artifact/out/patch.diff", Kind: "text/x-diff", MaxBytes: 1048576},
					{Path: "artifact/log.txt", Optional: true}},
				UnlistedArtifacts: handoff.UnlistedReject,
				Limits:            handoff.Limits{ResultBytes: 4 << 20, ArtifactBytes: 2 << 20, Artifacts: 2, Refs: 0},
			}},
		{"some limits, the rest default", `{"limits":{"refs":5}}`,
			handoff.Contract{UnlistedArtifacts: handoff.UnlistedAllow,
				Limits: handoff.Limits{ResultBytes: def.ResultBytes, ArtifactBytes: def.ArtifactBytes, Artifacts: def.Artifacts, Refs: 5}}},
		{"white space and unicode names", " \n{ \"sections\" : [ { \"name\" : \"Zusammenfassung  Über\" } ] }\n ",
			handoff.Contract{Sections: []handoff.SectionSpec{{Name: "Zusammenfassung  Über"}},
				UnlistedArtifacts: handoff.UnlistedAllow, Limits: def}},
		{"empty lists", `{"sections":[],"artifacts":[]}`,
			handoff.Contract{UnlistedArtifacts: handoff.UnlistedAllow, Limits: def}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := handoff.ParseContract([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			// What Marshal writes parses back to the same contract.
			b, err := got.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			again, err := handoff.ParseContract(b)
			if err != nil {
				t.Fatalf("%s\ndoes not parse back: %v", b, err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Errorf("round trip changed the contract:\n%s\n%+v", b, again)
			}
		})
	}
}

func TestParseContractBad(t *testing.T) {
	long := strings.Repeat("a", 65)
	tests := []struct {
		name  string
		in    string
		wants []string
	}{
		{"nothing", ``, []string{"contract is empty"}},
		{"white space", "  \n", []string{"contract is empty"}},
		{"not JSON", `sections: []`, []string{"contract is not valid JSON"}},
		{"truncated", `{"sections":[`, []string{"contract is not valid JSON", "ends too early"}},
		{"trailing comma", `{"version":1,}`, []string{"not valid JSON"}},
		{"a list", `[]`, []string{"must be a JSON object, not a list"}},
		{"null", `null`, []string{"must be a JSON object, not null"}},
		{"a string", `"x"`, []string{"must be a JSON object, not a string"}},
		{"a number", `1`, []string{"not a number"}},
		{"two objects", `{} {}`, []string{"data after the JSON object"}},
		{"garbage after", `{}x`, []string{"contract"}},
		{"unknown key", `{"sectons":[]}`, []string{`unknown key "sectons"`, "allowed: version, sections, artifacts, unlisted_artifacts, limits"}},
		{"wrong case", `{"Sections":[]}`, []string{`unknown key "Sections"`, `did you mean "sections"`}},
		{"duplicate key", `{"sections":[],"sections":[]}`, []string{`key "sections" twice`}},
		{"unknown section key", `{"sections":[{"name":"Summary","nmae":"x"}]}`, []string{`contract: sections[0] has an unknown key "nmae"`, "allowed: name, aliases, optional, max_bytes"}},
		{"unknown artifact key", `{"artifacts":[{"path":"artifact/a","size":1}]}`, []string{`artifacts[0] has an unknown key "size"`}},
		{"unknown limit", `{"limits":{"bytes":1}}`, []string{`limits has an unknown key "bytes"`}},
		{"duplicate nested key", `{"sections":[{"name":"a","name":"b"}]}`, []string{`sections[0] has the key "name" twice`}},
		{"version 2", `{"version":2}`, []string{"version is 2, outside 1..1"}},
		{"version string", `{"version":"1"}`, []string{"version must be a whole number, not a string"}},
		{"sections not a list", `{"sections":{"name":"a"}}`, []string{"sections must be a list, not an object"}},
		{"sections null", `{"sections":null}`, []string{"sections must be a list, not null"}},
		{"section not an object", `{"sections":["Summary"]}`, []string{"sections[0] must be a JSON object, not a string"}},
		{"section without name", `{"sections":[{"optional":true}]}`, []string{"sections[0] has no name"}},
		{"name a number", `{"sections":[{"name":5}]}`, []string{"sections[0].name must be a string, not a number"}},
		{"name null", `{"sections":[{"name":null}]}`, []string{"sections[0].name must be a string, not null"}},
		{"name empty", `{"sections":[{"name":""}]}`, []string{`sections[0].name "" is empty`}},
		{"name with colon", `{"sections":[{"name":"Summary:"}]}`, []string{`sections[0].name "Summary:" must start with a letter`}},
		{"name with #", `{"sections":[{"name":"# Summary"}]}`, []string{`sections[0].name "# Summary"`}},
		{"name starts with a digit", `{"sections":[{"name":"1st"}]}`, []string{`"1st" must start with a letter`}},
		{"name ends with a space", `{"sections":[{"name":"Summary "}]}`, []string{"not end with a space"}},
		{"name with newline", `{"sections":[{"name":"Sum\nmary"}]}`, []string{"sections[0].name"}},
		{"name too long", `{"sections":[{"name":"` + long + `"}]}`, []string{"is 65 bytes long; at most 64"}},
		{"duplicate names", `{"sections":[{"name":"Summary"},{"name":"SUMMARY"}]}`, []string{`sections[1].name "SUMMARY" names the same section as sections[0].name`}},
		{"names differing in spaces", `{"sections":[{"name":"Risk notes"},{"name":"Risk  notes"}]}`, []string{"names the same section"}},
		{"alias clashes", `{"sections":[{"name":"Summary"},{"name":"Findings","aliases":["summary"]}]}`, []string{`sections[1].aliases[0] "summary" names the same section as sections[0].name`}},
		{"aliases not a list", `{"sections":[{"name":"a","aliases":"b"}]}`, []string{"sections[0].aliases must be a list, not a string"}},
		{"alias not a string", `{"sections":[{"name":"a","aliases":[1]}]}`, []string{"sections[0].aliases[0] must be a string, not a number"}},
		{"too many aliases", `{"sections":[{"name":"a","aliases":["b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r"]}]}`, []string{"aliases has 17 entries; at most 16"}},
		{"optional not a boolean", `{"sections":[{"name":"a","optional":"yes"}]}`, []string{"sections[0].optional must be true or false, not a string"}},
		{"max_bytes fraction", `{"sections":[{"name":"a","max_bytes":1.5}]}`, []string{"sections[0].max_bytes must be a whole number, not 1.5"}},
		{"max_bytes exponent", `{"sections":[{"name":"a","max_bytes":1e3}]}`, []string{"must be a whole number, not 1e3"}},
		{"max_bytes zero", `{"sections":[{"name":"a","max_bytes":0}]}`, []string{"sections[0].max_bytes is 0, outside 1..4194304"}},
		{"max_bytes negative", `{"sections":[{"name":"a","max_bytes":-1}]}`, []string{"is -1, outside"}},
		{"max_bytes overflow", `{"sections":[{"name":"a","max_bytes":99999999999999999999}]}`, []string{"max_bytes is 99999999999999999999, outside"}},
		{"section max over result_bytes", `{"sections":[{"name":"a","max_bytes":100}],"limits":{"result_bytes":10}}`, []string{"sections[0].max_bytes is 100", "limits.result_bytes"}},
		{"artifact without path", `{"artifacts":[{"kind":"patch"}]}`, []string{"artifacts[0] has no path"}},
		{"artifact path without artifact/", `{"artifacts":[{"path":"patch.diff"}]}`, []string{`artifacts[0].path "patch.diff" must start with "artifact/"`}},
		{"artifact path the folder", `{"artifacts":[{"path":"artifact/"}]}`, []string{`must start with "artifact/" and name a file`}},
		{"artifact path with ..", `{"artifacts":[{"path":"artifact/../result.md"}]}`, []string{`artifacts[0].path "artifact/../result.md" must not contain ".."`}},
		{"artifact path escaping", `{"artifacts":[{"path":"artifact/../../etc/passwd"}]}`, []string{`must not contain ".."`}},
		{"artifact path trailing ..", `{"artifacts":[{"path":"artifact/x/.."}]}`, []string{`must not contain ".."`}},
		{"artifact path absolute", `{"artifacts":[{"path":"/artifact/a"}]}`, []string{`must start with "artifact/"`}},
		{"artifact path unclean", `{"artifacts":[{"path":"artifact/./a"}]}`, []string{`is not a clean path (it would be "artifact/a")`}},
		{"artifact path double slash", `{"artifacts":[{"path":"artifact//a"}]}`, []string{"is not a clean path"}},
		{"artifact path with NUL", `{"artifacts":[{"path":"artifact/a\u0000b"}]}`, []string{"control character"}},
		{"duplicate artifacts", `{"artifacts":[{"path":"artifact/a"},{"path":"artifact/a"}]}`, []string{`artifacts[1].path "artifact/a" is also artifacts[0].path`}},
		{"artifact inside an artifact", `{"artifacts":[{"path":"artifact/a"},{"path":"artifact/a/b"}]}`, []string{`"artifact/a/b" is inside artifacts[0].path "artifact/a"`}},
		{"bad kind", `{"artifacts":[{"path":"artifact/a","kind":"a patch"}]}`, []string{`artifacts[0].kind "a patch" must hold only`}},
		{"empty kind", `{"artifacts":[{"path":"artifact/a","kind":""}]}`, []string{`artifacts[0].kind is empty`}},
		{"artifact max over artifact_bytes", `{"artifacts":[{"path":"artifact/a","max_bytes":10}],"limits":{"artifact_bytes":5}}`, []string{"artifacts[0].max_bytes is 10", "limits.artifact_bytes"}},
		{"more required artifacts than allowed", `{"artifacts":[{"path":"artifact/a"},{"path":"artifact/b"}],"limits":{"artifacts":1}}`, []string{"2 artifacts are required but limits.artifacts is 1"}},
		{"unlisted_artifacts unknown", `{"unlisted_artifacts":"maybe"}`, []string{`unlisted_artifacts is "maybe"; it must be "allow" or "reject"`}},
		{"unlisted_artifacts a boolean", `{"unlisted_artifacts":true}`, []string{"unlisted_artifacts must be a string, not a boolean"}},
		{"limits not an object", `{"limits":[]}`, []string{"contract: limits must be a JSON object, not a list"}},
		{"result_bytes zero", `{"limits":{"result_bytes":0}}`, []string{"limits.result_bytes is 0, outside 1..4194304"}},
		{"result_bytes over the ceiling", `{"limits":{"result_bytes":4194305}}`, []string{"limits.result_bytes is 4194305"}},
		{"artifact_bytes over the ceiling", `{"limits":{"artifact_bytes":1073741825}}`, []string{"limits.artifact_bytes is 1073741825"}},
		{"artifacts negative", `{"limits":{"artifacts":-1}}`, []string{"limits.artifacts is -1"}},
		{"refs over the ceiling", `{"limits":{"refs":100001}}`, []string{"limits.refs is 100001"}},
		{"invalid UTF-8", "{\"sections\":[{\"name\":\"\xff\"}]}", []string{"contract is not valid UTF-8"}},
		{"too large", `{"sections":[]` + strings.Repeat(" ", handoff.MaxContractSize) + `}`, []string{"at most 65536 are allowed"}},
		{"too many sections", `{"sections":[` + strings.Repeat(`{"name":"a"},`, 64) + `{"name":"b"}]}`, []string{"sections has 65 entries; at most 64"}},
		{"deep nesting", `{"sections":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, []string{"sections[0] must be a JSON object, not a list"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := handoff.ParseContract([]byte(tc.in))
			if err == nil {
				t.Fatalf("parsed: %+v", c)
			}
			wantInvalid(t, err, tc.wants...)
		})
	}
}

func TestDefaultContract(t *testing.T) {
	c := handoff.DefaultContract()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "sections": [
    {
      "name": "Summary"
    }
  ],
  "artifacts": [],
  "unlisted_artifacts": "allow",
  "limits": {
    "result_bytes": 65536,
    "artifact_bytes": 67108864,
    "artifacts": 256,
    "refs": 1000
  }
}
`
	if string(b) != want {
		t.Errorf("default contract.json:\n%s", b)
	}
	if got := c.Required(); !reflect.DeepEqual(got, []string{"Summary"}) {
		t.Errorf("Required() = %v", got)
	}
}

func TestContractValidateNamesTheField(t *testing.T) {
	var zero handoff.Contract
	wantInvalid(t, zero.Validate(), "limits.result_bytes is 0")
	c := handoff.DefaultContract()
	c.UnlistedArtifacts = ""
	wantInvalid(t, c.Validate(), "unlisted_artifacts")
	c = handoff.DefaultContract()
	c.Artifacts = []handoff.ArtifactSpec{{Path: "artifact/a/../../b"}}
	wantInvalid(t, c.Validate(), `artifacts[0].path "artifact/a/../../b" must not contain ".."`)
	c = handoff.DefaultContract()
	c.Sections = append(c.Sections, handoff.SectionSpec{Name: "x", Aliases: make([]string, 17)})
	wantInvalid(t, c.Validate(), "sections[1].aliases[0]")
	if _, err := c.Marshal(); err == nil {
		t.Error("Marshal wrote an invalid contract")
	}
}

func TestContractInsideJSONIsStrict(t *testing.T) {
	var h handoff.Handoff
	err := jsonUnmarshal(`{"task":"t","contract":{"sections":[{"name":"a","extra":1}]}}`, &h)
	wantInvalid(t, err, `sections[0] has an unknown key "extra"`)
}
