package handoff

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits a contract can set, their defaults and the ceilings no contract may
// exceed. Sizes are in bytes.
const (
	DefaultResultBytes   = 64 << 10 // result.md is a compact result (seed 001)
	MaxResultBytes       = 4 << 20
	DefaultArtifactBytes = 64 << 20 // all files under artifact/ together
	MaxArtifactBytes     = 1 << 30
	DefaultArtifacts     = 256 // files under artifact/
	MaxArtifacts         = 10000
	DefaultRefs          = 1000 // lines of refs.jsonl
	MaxRefs              = 100000

	MaxContractSize  = 64 << 10 // contract.json itself
	MaxSections      = 64
	MaxAliases       = 16
	MaxArtifactSpecs = 256
	MaxNameLen       = 64 // a section name or alias
	MaxKindLen       = 64
	MaxPathLen       = 4096
)

// ArtifactDir is the folder of the result directory that holds artifacts.
// Artifact paths in contracts and refs.jsonl start with it.
const ArtifactDir = "artifact"

// Unlisted says what happens to files under artifact/ that the contract does
// not list.
type Unlisted string

const (
	UnlistedAllow  Unlisted = "allow"  // default: any artifact within the limits
	UnlistedReject Unlisted = "reject" // only listed artifacts ("authorized artifacts", seed 001)
)

// Contract is the output contract a parent hands its child (seed 001): what
// result.md must contain and which artifacts the child must produce.
type Contract struct {
	Sections          []SectionSpec  `json:"sections"`
	Artifacts         []ArtifactSpec `json:"artifacts"`
	UnlistedArtifacts Unlisted       `json:"unlisted_artifacts"`
	Limits            Limits         `json:"limits"`
}

// SectionSpec is one section result.md must have: a heading ("# Summary") or
// a label line ("Summary:") whose title matches Name or one of Aliases,
// ignoring case and runs of spaces, followed by non-empty text.
type SectionSpec struct {
	Name     string   `json:"name"`
	Aliases  []string `json:"aliases,omitempty"`
	Optional bool     `json:"optional,omitempty"`  // when present, still non-empty and within MaxBytes
	MaxBytes int64    `json:"max_bytes,omitempty"` // of the section's text; 0: only Limits.ResultBytes
}

// ArtifactSpec is one file the child must produce (or, when Optional, may).
type ArtifactSpec struct {
	Path     string `json:"path"`                // "artifact/patch.diff": relative to the result directory
	Kind     string `json:"kind,omitempty"`      // "patch"; when refs.jsonl names the file with a kind, it must match
	Optional bool   `json:"optional,omitempty"`  // listed (so allowed under "reject") but not required
	MaxBytes int64  `json:"max_bytes,omitempty"` // 0: only Limits.ArtifactBytes
}

// Limits bound what a child may return.
type Limits struct {
	ResultBytes   int64 `json:"result_bytes"`   // size of result.md
	ArtifactBytes int64 `json:"artifact_bytes"` // all artifacts together
	Artifacts     int64 `json:"artifacts"`      // number of files under artifact/
	Refs          int64 `json:"refs"`           // lines of refs.jsonl
}

// DefaultLimits are the limits of a contract that sets none.
func DefaultLimits() Limits {
	return Limits{ResultBytes: DefaultResultBytes, ArtifactBytes: DefaultArtifactBytes,
		Artifacts: DefaultArtifacts, Refs: DefaultRefs}
}

// DefaultContract is the contract of a child handed off without one: a
// non-empty result.md with a non-empty "Summary" section (the one section both
// of seed 001's examples have), any artifacts, the default limits.
func DefaultContract() Contract {
	return Contract{
		Sections:          []SectionSpec{{Name: "Summary"}},
		UnlistedArtifacts: UnlistedAllow,
		Limits:            DefaultLimits(),
	}
}

var (
	contractKeys = []string{"version", "sections", "artifacts", "unlisted_artifacts", "limits"}
	sectionKeys  = []string{"name", "aliases", "optional", "max_bytes"}
	artifactKeys = []string{"path", "kind", "optional", "max_bytes"}
	limitKeys    = []string{"result_bytes", "artifact_bytes", "artifacts", "refs"}
)

// ContractVersion is the only "version" ParseContract accepts.
const ContractVersion = 1

// ParseContract reads a contract.json strictly: unknown or repeated keys,
// wrong types, null, and values outside their limits are errors naming the
// field. Keys left out take their defaults: no sections, no artifacts,
// unlisted artifacts allowed, DefaultLimits. (A contract given replaces
// DefaultContract wholly; it does not add to it.)
func ParseContract(data []byte) (Contract, error) {
	if len(data) > MaxContractSize {
		return Contract{}, invalidf("contract is %d bytes long; at most %d are allowed", len(data), MaxContractSize)
	}
	if !utf8.Valid(data) {
		return Contract{}, invalidf("contract is not valid UTF-8")
	}
	o, err := decodeObject("contract", "", data, contractKeys)
	if err != nil {
		return Contract{}, err
	}
	c := Contract{UnlistedArtifacts: UnlistedAllow, Limits: DefaultLimits()}
	if o.has("version") {
		if _, err := o.integer("version", ContractVersion, ContractVersion); err != nil {
			return Contract{}, err
		}
	}
	if o.has("limits") {
		lo, err := decodeObject("contract", "limits", o.vals["limits"], limitKeys)
		if err != nil {
			return Contract{}, err
		}
		for _, f := range []struct {
			key     string
			dst     *int64
			lo, max int64
		}{
			{"result_bytes", &c.Limits.ResultBytes, 1, MaxResultBytes},
			{"artifact_bytes", &c.Limits.ArtifactBytes, 0, MaxArtifactBytes},
			{"artifacts", &c.Limits.Artifacts, 0, MaxArtifacts},
			{"refs", &c.Limits.Refs, 0, MaxRefs},
		} {
			if lo.has(f.key) {
				if *f.dst, err = lo.integer(f.key, f.lo, f.max); err != nil {
					return Contract{}, err
				}
			}
		}
	}
	if o.has("unlisted_artifacts") {
		s, err := o.str("unlisted_artifacts")
		if err != nil {
			return Contract{}, err
		}
		c.UnlistedArtifacts = Unlisted(s)
	}
	if o.has("sections") {
		items, err := o.list("sections")
		if err != nil {
			return Contract{}, err
		}
		if len(items) > MaxSections {
			return Contract{}, invalidf("contract: sections has %d entries; at most %d are allowed", len(items), MaxSections)
		}
		for i, raw := range items {
			so, err := decodeObject("contract", fmt.Sprintf("sections[%d]", i), raw, sectionKeys)
			if err != nil {
				return Contract{}, err
			}
			var s SectionSpec
			if !so.has("name") {
				return Contract{}, so.errf("has no name")
			}
			if s.Name, err = so.str("name"); err != nil {
				return Contract{}, err
			}
			if so.has("aliases") {
				al, err := so.list("aliases")
				if err != nil {
					return Contract{}, err
				}
				if len(al) > MaxAliases {
					return Contract{}, so.fieldErrf("aliases", "has %d entries; at most %d are allowed", len(al), MaxAliases)
				}
				for j, a := range al {
					if rawKind(a) != "a string" {
						return Contract{}, so.fieldErrf(fmt.Sprintf("aliases[%d]", j), "must be a string, not %s", rawKind(a))
					}
					var v string
					if err := json.Unmarshal(a, &v); err != nil {
						return Contract{}, so.fieldErrf(fmt.Sprintf("aliases[%d]", j), "is not a valid string")
					}
					s.Aliases = append(s.Aliases, v)
				}
			}
			if so.has("optional") {
				if s.Optional, err = so.boolean("optional"); err != nil {
					return Contract{}, err
				}
			}
			if so.has("max_bytes") {
				if s.MaxBytes, err = so.integer("max_bytes", 1, MaxResultBytes); err != nil {
					return Contract{}, err
				}
			}
			c.Sections = append(c.Sections, s)
		}
	}
	if o.has("artifacts") {
		items, err := o.list("artifacts")
		if err != nil {
			return Contract{}, err
		}
		if len(items) > MaxArtifactSpecs {
			return Contract{}, invalidf("contract: artifacts has %d entries; at most %d are allowed", len(items), MaxArtifactSpecs)
		}
		for i, raw := range items {
			ao, err := decodeObject("contract", fmt.Sprintf("artifacts[%d]", i), raw, artifactKeys)
			if err != nil {
				return Contract{}, err
			}
			var a ArtifactSpec
			if !ao.has("path") {
				return Contract{}, ao.errf("has no path")
			}
			if a.Path, err = ao.str("path"); err != nil {
				return Contract{}, err
			}
			if ao.has("kind") {
				if a.Kind, err = ao.str("kind"); err != nil {
					return Contract{}, err
				}
				if a.Kind == "" {
					return Contract{}, ao.fieldErrf("kind", "is empty; leave it out for no kind")
				}
			}
			if ao.has("optional") {
				if a.Optional, err = ao.boolean("optional"); err != nil {
					return Contract{}, err
				}
			}
			if ao.has("max_bytes") {
				if a.MaxBytes, err = ao.integer("max_bytes", 1, MaxArtifactBytes); err != nil {
					return Contract{}, err
				}
			}
			c.Artifacts = append(c.Artifacts, a)
		}
	}
	if err := c.Validate(); err != nil {
		return Contract{}, err
	}
	return c, nil
}

// Validate checks a contract's values and names the first bad field. It
// accepts exactly the contracts ParseContract returns.
func (c *Contract) Validate() error {
	bad := func(format string, args ...any) error {
		return invalidf("contract: %s", fmt.Sprintf(format, args...))
	}
	l := c.Limits
	switch {
	case l.ResultBytes < 1 || l.ResultBytes > MaxResultBytes:
		return bad("limits.result_bytes is %d, outside 1..%d", l.ResultBytes, MaxResultBytes)
	case l.ArtifactBytes < 0 || l.ArtifactBytes > MaxArtifactBytes:
		return bad("limits.artifact_bytes is %d, outside 0..%d", l.ArtifactBytes, MaxArtifactBytes)
	case l.Artifacts < 0 || l.Artifacts > MaxArtifacts:
		return bad("limits.artifacts is %d, outside 0..%d", l.Artifacts, MaxArtifacts)
	case l.Refs < 0 || l.Refs > MaxRefs:
		return bad("limits.refs is %d, outside 0..%d", l.Refs, MaxRefs)
	}
	if c.UnlistedArtifacts != UnlistedAllow && c.UnlistedArtifacts != UnlistedReject {
		return bad("unlisted_artifacts is %q; it must be %q or %q", c.UnlistedArtifacts, UnlistedAllow, UnlistedReject)
	}
	if len(c.Sections) > MaxSections {
		return bad("sections has %d entries; at most %d are allowed", len(c.Sections), MaxSections)
	}
	names := map[string]string{} // SectionKey -> the field that used it
	for i, s := range c.Sections {
		for j, n := range append([]string{s.Name}, s.Aliases...) {
			field := fmt.Sprintf("sections[%d].name", i)
			if j > 0 {
				field = fmt.Sprintf("sections[%d].aliases[%d]", i, j-1)
			}
			if err := checkSectionName(n); err != nil {
				return bad("%s %q %s", field, n, err)
			}
			k := SectionKey(n)
			if prev, dup := names[k]; dup {
				return bad("%s %q names the same section as %s", field, n, prev)
			}
			names[k] = field
		}
		if len(s.Aliases) > MaxAliases {
			return bad("sections[%d].aliases has %d entries; at most %d are allowed", i, len(s.Aliases), MaxAliases)
		}
		if s.MaxBytes < 0 || s.MaxBytes > l.ResultBytes {
			return bad("sections[%d].max_bytes is %d, outside 1..%d (limits.result_bytes)", i, s.MaxBytes, l.ResultBytes)
		}
	}
	if len(c.Artifacts) > MaxArtifactSpecs {
		return bad("artifacts has %d entries; at most %d are allowed", len(c.Artifacts), MaxArtifactSpecs)
	}
	paths := map[string]int{}
	required := int64(0)
	for i, a := range c.Artifacts {
		if err := checkArtifactPath(a.Path); err != nil {
			return bad("artifacts[%d].path %q %s", i, a.Path, err)
		}
		if j, dup := paths[a.Path]; dup {
			return bad("artifacts[%d].path %q is also artifacts[%d].path", i, a.Path, j)
		}
		paths[a.Path] = i
		if a.Kind != "" {
			if err := checkKind(a.Kind); err != nil {
				return bad("artifacts[%d].kind %q %s", i, a.Kind, err)
			}
		}
		if a.MaxBytes < 0 || a.MaxBytes > l.ArtifactBytes {
			return bad("artifacts[%d].max_bytes is %d, outside 1..%d (limits.artifact_bytes)", i, a.MaxBytes, l.ArtifactBytes)
		}
		if !a.Optional {
			required++
		}
	}
	for p, i := range paths {
		for d := path.Dir(p); d != ArtifactDir; d = path.Dir(d) {
			if j, ok := paths[d]; ok {
				return bad("artifacts[%d].path %q is inside artifacts[%d].path %q, which must be a file", i, p, j, d)
			}
		}
	}
	if required > l.Artifacts {
		return bad("%d artifacts are required but limits.artifacts is %d", required, l.Artifacts)
	}
	return nil
}

// MarshalJSON writes the contract as contract.json, with every limit spelled
// out so the child sees exactly what will be checked.
func (c Contract) MarshalJSON() ([]byte, error) {
	type plain Contract // no methods: no recursion
	v := struct {
		Version int `json:"version"`
		plain
	}{ContractVersion, plain(c)}
	if v.Sections == nil {
		v.Sections = []SectionSpec{}
	}
	if v.Artifacts == nil {
		v.Artifacts = []ArtifactSpec{}
	}
	if v.UnlistedArtifacts == "" {
		v.UnlistedArtifacts = UnlistedAllow
	}
	return json.Marshal(v)
}

// UnmarshalJSON is ParseContract, so a contract inside other JSON is read
// just as strictly.
func (c *Contract) UnmarshalJSON(data []byte) error {
	v, err := ParseContract(data)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Marshal returns the contract.json file: indented, ending in a newline.
func (c Contract) Marshal() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Required lists the names of the sections a result must have, for messages.
func (c *Contract) Required() []string {
	var out []string
	for _, s := range c.Sections {
		if !s.Optional {
			out = append(out, s.Name)
		}
	}
	return out
}

// checkSectionName accepts what a label line can spell (see isLabel), so a
// result can always satisfy a contract in either heading style.
func checkSectionName(n string) error {
	switch {
	case n == "":
		return fmt.Errorf("is empty")
	case len(n) > MaxNameLen:
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(n), MaxNameLen)
	case !isLabel(n):
		return fmt.Errorf("must start with a letter, not end with a space, and hold only letters, digits, spaces and - _ / ( ) & ' ,")
	}
	return nil
}

func checkArtifactPath(p string) error {
	if len(p) > MaxPathLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(p), MaxPathLen)
	}
	if err := checkNoControl(p); err != nil {
		return err
	}
	// ".." is refused before anything else looks at the path: a cleaned or
	// glob-matched "artifact/../x" would name a file outside artifact/.
	if hasDotDot(p) {
		return fmt.Errorf("must not contain \"..\"")
	}
	if !strings.HasPrefix(p, ArtifactDir+"/") || len(p) == len(ArtifactDir)+1 {
		return fmt.Errorf("must start with %q and name a file (paths are relative to the result directory, as in refs.jsonl)", ArtifactDir+"/")
	}
	if path.Clean(p) != p {
		return fmt.Errorf("is not a clean path (it would be %q)", path.Clean(p))
	}
	return nil
}

// checkKind: a short token such as "patch" or "text/x-diff".
func checkKind(k string) error {
	if len(k) > MaxKindLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(k), MaxKindLen)
	}
	for _, r := range k {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._+/-", r))) {
			return fmt.Errorf("must hold only ASCII letters, digits and . _ + / -")
		}
	}
	if k == "" {
		return fmt.Errorf("is empty")
	}
	return nil
}

// checkNoControl refuses control characters: these strings end up in
// files, terminals and the parent's context.
func checkNoControl(s string) error {
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("has a control character at byte %d", i)
		}
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Errorf("is not valid UTF-8 at byte %d", i)
			}
		}
	}
	return nil
}
