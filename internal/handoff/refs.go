package handoff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/kin-agents/kin/kin"
)

// Limits of refs.jsonl and of hashing.
const (
	MaxRefLine     = 64 << 10 // bytes in one line of refs.jsonl
	MaxRefsFile    = 16 << 20 // bytes in refs.jsonl
	MaxSummaryLen  = 4096
	MaxHashBytes   = 1 << 30 // files larger than this are not hashed
	HashPrefix     = "sha256:"
	maxLineReports = 50 // malformed refs.jsonl lines reported one by one
)

// Ref is one line of refs.jsonl (seed 001):
//
//	{"path":"/work/docs/spec/agent-tool-security.md","hash":"sha256:...","summary":"mount spec reviewed"}
//	{"path":"artifact/patch.diff","kind":"patch","summary":"suggested patch"}
type Ref struct {
	Path    string `json:"path"`
	Hash    string `json:"hash,omitempty"`    // "sha256:" and 64 lower-case hex digits
	Kind    string `json:"kind,omitempty"`    // a short token: "patch"
	Summary string `json:"summary,omitempty"` // one line
}

var refKeys = []string{"path", "hash", "kind", "summary"}

// Validate checks a ref's own fields (not the file it names).
func (r *Ref) Validate() error {
	switch {
	case r.Path == "":
		return invalidf("path is empty")
	case len(r.Path) > MaxPathLen:
		return invalidf("path is %d bytes long; at most %d are allowed", len(r.Path), MaxPathLen)
	case r.Hash != "" && !ValidHash(r.Hash):
		return invalidf("hash %q is not %q followed by 64 lower-case hex digits", clip(r.Hash, 80), HashPrefix)
	case len(r.Summary) > MaxSummaryLen:
		return invalidf("summary is %d bytes long; at most %d are allowed", len(r.Summary), MaxSummaryLen)
	}
	if err := checkNoControl(r.Path); err != nil {
		return invalidf("path %s", err)
	}
	if r.Kind != "" {
		if err := checkKind(r.Kind); err != nil {
			return invalidf("kind %q %s", clip(r.Kind, 80), err)
		}
	}
	if err := checkNoControl(r.Summary); err != nil {
		return invalidf("summary %s (a summary is one line)", err)
	}
	return nil
}

// ValidHash reports whether s is "sha256:" followed by 64 lower-case hex
// digits, the form HashRef returns.
func ValidHash(s string) bool {
	h, ok := strings.CutPrefix(s, HashPrefix)
	if !ok || len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
			return false
		}
	}
	return true
}

// refLineError is a malformed line of refs.jsonl.
type refLineError struct {
	line int
	err  error
}

// ParseRefs reads refs.jsonl strictly: one JSON object per line with a
// non-empty "path" and optional "hash", "kind" and "summary" strings; unknown
// or repeated keys, null, other types and over-long lines are errors naming
// the line. Blank lines are skipped. It returns the first error.
func ParseRefs(data []byte) ([]Ref, error) {
	refs, _, errs := parseRefs(data)
	if len(errs) > 0 {
		return nil, errs[0].err
	}
	if len(refs) > MaxRefs {
		return nil, invalidf("refs.jsonl has %d refs; at most %d are allowed", len(refs), MaxRefs)
	}
	return refs, nil
}

// parseRefs returns every good ref with its line number, and every bad line.
func parseRefs(data []byte) (refs []Ref, lines []int, errs []refLineError) {
	n := 0
	for len(data) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := parseRefLine(line, n)
		if err != nil {
			errs = append(errs, refLineError{n, err})
			continue
		}
		refs, lines = append(refs, r), append(lines, n)
	}
	return refs, lines, errs
}

func parseRefLine(line []byte, n int) (Ref, error) {
	prefix := fmt.Sprintf("refs.jsonl line %d", n)
	if len(line) > MaxRefLine {
		return Ref{}, invalidf("%s is %d bytes long; at most %d are allowed", prefix, len(line), MaxRefLine)
	}
	if !utf8.Valid(line) {
		return Ref{}, invalidf("%s is not valid UTF-8", prefix)
	}
	o, err := decodeObject(prefix, "", line, refKeys)
	if err != nil {
		return Ref{}, err
	}
	if !o.has("path") {
		return Ref{}, o.errf("has no path")
	}
	var r Ref
	for _, f := range []struct {
		key string
		dst *string
	}{{"path", &r.Path}, {"hash", &r.Hash}, {"kind", &r.Kind}, {"summary", &r.Summary}} {
		if o.has(f.key) {
			if *f.dst, err = o.str(f.key); err != nil {
				return Ref{}, err
			}
			if *f.dst == "" && f.key != "summary" {
				return Ref{}, o.fieldErrf(f.key, "is empty")
			}
		}
	}
	if err := r.Validate(); err != nil {
		return Ref{}, invalidf("%s: %s", prefix, kinMessage(err))
	}
	return r, nil
}

// MarshalRefs writes refs as refs.jsonl: one line each, keys in the order
// path, hash, kind, summary (seed 001's lines come out byte for byte).
func MarshalRefs(refs []Ref) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range refs {
		if err := refs[i].Validate(); err != nil {
			return nil, invalidf("ref %d (%q): %s", i+1, clip(refs[i].Path, 200), kinMessage(err))
		}
		if err := enc.Encode(refs[i]); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// HashRef returns "sha256:<hex>" of the regular file at path, following
// symbolic links (the parent names the file it means). Directories are
// refused: a ref names one file, and a tree has no single agreed hash; hand
// off the files inside it instead. Devices, pipes and sockets are refused
// too, and so are files larger than MaxHashBytes.
func HashRef(path string) (string, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashFile(f, fi)
}

// openRegular opens path (following symlinks) without blocking on a FIFO,
// and refuses anything but a regular file.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if fi.IsDir() {
			return nil, nil, invalidf("%s is a directory; a ref names one file (name the files inside it instead)", path)
		}
		return nil, nil, invalidf("%s is %s, not a regular file", path, describeMode(fi.Mode()))
	}
	return f, fi, nil
}

func hashFile(f *os.File, fi fs.FileInfo) (string, error) {
	if fi.Size() > MaxHashBytes {
		return "", invalidf("%s is %d bytes long; files over %d bytes are not hashed", f.Name(), fi.Size(), MaxHashBytes)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxHashBytes+1))
	if err != nil {
		return "", err
	}
	if n > MaxHashBytes {
		return "", invalidf("%s grew past %d bytes while being hashed", f.Name(), int64(MaxHashBytes))
	}
	return HashPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// HashBytes is the hash HashRef would return for a file holding b.
func HashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return HashPrefix + hex.EncodeToString(s[:])
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsRegular():
		return "a regular file"
	}
	return "not a regular file"
}

// kinMessage drops the "invalid: " code prefix of a kin error, for nesting
// one message in another.
func kinMessage(err error) string {
	var e *kin.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// clip shortens s for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
