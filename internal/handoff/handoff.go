package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// The files of the protocol (seed 001, "Handoff Protocol" and "Child
// Session").
const (
	FileHandoff  = "handoff.md"    // parent to child: the task
	FileRefs     = "refs.jsonl"    // input refs (parent to child) or result refs (child to parent)
	FileContract = "contract.json" // parent to child: the output contract
	FilePolicy   = "policy.json"   // parent to child: the policy subset
	FileMounts   = "mounts.json"   // parent to child: the mount subset
	FileResult   = "result.md"     // child to parent
	FileStatus   = "status"        // in context/child/<child>/: a Status
	FileAgent    = "agent"         // in context/child/<child>/: the child's name
	FileSession  = "session"       // in context/child/<child>/: the child's session
)

// Limits of a handoff.
const (
	MaxTaskBytes   = 256 << 10 // handoff.md
	MaxSubsetBytes = 64 << 10  // policy.json, mounts.json
)

// Handoff is what a parent hands its child (seed 001): the task text, input
// refs with their hashes, the policy and mount subsets, and the output
// contract.
type Handoff struct {
	Task string `json:"task"` // handoff.md, verbatim
	// Refs are the input refs: absolute, clean paths, each with the sha256
	// the parent saw (InputRefs computes them).
	Refs []Ref `json:"refs"`
	// Policy and Mounts are the policy and mount subsets, recorded as the
	// parent gave them (a JSON object, or nil for none). This package only
	// carries them; the permissions issue defines and enforces them.
	Policy   json.RawMessage `json:"policy,omitempty"`
	Mounts   json.RawMessage `json:"mounts,omitempty"`
	Contract Contract        `json:"contract"`
}

// File is one file of a handoff, named relative to the folder the child
// receives.
type File struct {
	Name string
	Data []byte
}

// InputRefs hashes the files a parent hands off: each path is made absolute
// and clean, must be a regular file (HashRef), and may appear once.
func InputRefs(paths []string) ([]Ref, error) {
	if len(paths) > MaxRefs {
		return nil, invalidf("%d refs; at most %d are allowed", len(paths), MaxRefs)
	}
	seen := map[string]bool{}
	refs := make([]Ref, 0, len(paths))
	for _, p := range paths {
		if p == "" {
			return nil, invalidf("a ref path is empty")
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, invalidf("ref %s: %v", p, err)
		}
		if seen[abs] {
			return nil, invalidf("ref %s is given twice", abs)
		}
		seen[abs] = true
		h, err := HashRef(abs)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return nil, invalidf("ref %s: %v", abs, pe.Err)
			}
			return nil, invalidf("ref %s", kinMessage(err))
		}
		r := Ref{Path: abs, Hash: h}
		if err := r.Validate(); err != nil {
			return nil, invalidf("ref %s: %s", abs, kinMessage(err))
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// Validate checks a handoff and names the first bad part.
func (h *Handoff) Validate() error {
	switch {
	case strings.TrimSpace(h.Task) == "":
		return invalidf("%s is empty: a child needs a task", FileHandoff)
	case len(h.Task) > MaxTaskBytes:
		return invalidf("%s is %d bytes long; at most %d are allowed", FileHandoff, len(h.Task), MaxTaskBytes)
	case !utf8.ValidString(h.Task):
		return invalidf("%s is not valid UTF-8", FileHandoff)
	case strings.IndexByte(h.Task, 0) >= 0:
		return invalidf("%s contains a NUL byte", FileHandoff)
	case len(h.Refs) > MaxRefs:
		return invalidf("%s has %d refs; at most %d are allowed", FileRefs, len(h.Refs), MaxRefs)
	}
	seen := map[string]bool{}
	for i, r := range h.Refs {
		if err := r.Validate(); err != nil {
			return invalidf("input ref %d: %s", i+1, kinMessage(err))
		}
		if !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path || hasDotDot(r.Path) {
			return invalidf("input ref %d: path %q must be absolute and clean", i+1, r.Path)
		}
		if r.Hash == "" {
			return invalidf("input ref %d (%s) has no hash: the parent hands off what it saw", i+1, r.Path)
		}
		if seen[r.Path] {
			return invalidf("input ref %d: %s is given twice", i+1, r.Path)
		}
		seen[r.Path] = true
	}
	for _, s := range []struct {
		name string
		v    json.RawMessage
	}{{FilePolicy, h.Policy}, {FileMounts, h.Mounts}} {
		if err := checkSubset(s.name, s.v); err != nil {
			return err
		}
	}
	return h.Contract.Validate()
}

func checkSubset(name string, v json.RawMessage) error {
	if v == nil {
		return nil
	}
	switch {
	case len(v) > MaxSubsetBytes:
		return invalidf("%s is %d bytes long; at most %d are allowed", name, len(v), MaxSubsetBytes)
	case !utf8.Valid(v) || !json.Valid(v):
		return invalidf("%s is not valid JSON", name)
	case rawKind(v) != "an object":
		return invalidf("%s must be a JSON object, not %s", name, rawKind(v))
	}
	return nil
}

// Marshal returns the files the child receives, in this order: handoff.md
// (the task, verbatim), refs.jsonl (one input ref a line, possibly empty),
// contract.json, and policy.json and mounts.json when set (as given, ending in
// a newline). The daemon writes them; this package does no writing.
func (h Handoff) Marshal() ([]File, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	refs, err := MarshalRefs(h.Refs)
	if err != nil {
		return nil, err
	}
	contract, err := h.Contract.Marshal()
	if err != nil {
		return nil, err
	}
	files := []File{
		{FileHandoff, []byte(h.Task)},
		{FileRefs, refs},
		{FileContract, contract},
	}
	for _, s := range []struct {
		name string
		v    json.RawMessage
	}{{FilePolicy, h.Policy}, {FileMounts, h.Mounts}} {
		if s.v != nil {
			files = append(files, File{s.name, append(bytes.TrimSpace(s.v), '\n')})
		}
	}
	return files, nil
}

// ReadHandoff reads the files Marshal wrote from fsys (os.DirFS of the
// child's handoff folder). handoff.md and contract.json are required;
// refs.jsonl, policy.json and mounts.json may be absent. Other files are
// ignored.
func ReadHandoff(fsys fs.FS) (Handoff, error) {
	var h Handoff
	read := func(name string, max int64, required bool) ([]byte, error) {
		fi, err := fs.Stat(fsys, name)
		if errors.Is(err, fs.ErrNotExist) && !required {
			return nil, nil
		}
		if err != nil {
			return nil, invalidf("reading the handoff: %v", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, invalidf("%s is %s, not a regular file", name, describeMode(fi.Mode()))
		}
		if fi.Size() > max {
			return nil, invalidf("%s is %d bytes long; at most %d are allowed", name, fi.Size(), max)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, invalidf("reading the handoff: %v", err)
		}
		if int64(len(b)) > max {
			return nil, invalidf("%s is longer than %d bytes", name, max)
		}
		return b, nil
	}
	task, err := read(FileHandoff, MaxTaskBytes, true)
	if err != nil {
		return Handoff{}, err
	}
	h.Task = string(task)
	refs, err := read(FileRefs, MaxRefsFile, false)
	if err != nil {
		return Handoff{}, err
	}
	if h.Refs, err = ParseRefs(refs); err != nil {
		return Handoff{}, err
	}
	contract, err := read(FileContract, MaxContractSize, true)
	if err != nil {
		return Handoff{}, err
	}
	if h.Contract, err = ParseContract(contract); err != nil {
		return Handoff{}, err
	}
	for _, s := range []struct {
		name string
		dst  *json.RawMessage
	}{{FilePolicy, &h.Policy}, {FileMounts, &h.Mounts}} {
		b, err := read(s.name, MaxSubsetBytes+1, false)
		if err != nil {
			return Handoff{}, err
		}
		if b != nil {
			*s.dst = json.RawMessage(bytes.TrimSpace(b))
		}
	}
	if err := h.Validate(); err != nil {
		return Handoff{}, fmt.Errorf("the handoff read back is invalid: %w", err)
	}
	return h, nil
}
