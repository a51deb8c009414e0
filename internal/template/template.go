package template

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kin-agents/kin/kin"
)

// ConfigFile is the template's config fragment (seed 003's .openclaw.json),
// at the template's top; it is not copied into the workspace. ConfigYAML
// and ConfigYML are its YAML spellings; a template has at most one.
const (
	ConfigFile = ".kin.json"
	ConfigYAML = ".kin.yaml"
	ConfigYML  = ".kin.yml"
)

// Limits of a template, on the wire and once rendered.
const (
	MaxFiles     = 1000    // entries (files and directories)
	MaxFileSize  = 1 << 20 // bytes of one file
	MaxTotalSize = 8 << 20 // bytes of all files
	MaxPathLen   = 1024    // bytes of one path
	MaxNameLen   = 255     // bytes of one path component
	MaxVars      = 100     // entries of kin.Template.Vars
	MaxVarSize   = 4096    // bytes of one Vars value
)

// The built-in placeholders.
const (
	AgentName   = "AGENT_NAME"  // the new agent's name
	Parent      = "PARENT"      // its parent's name, empty for a root agent
	ParentA     = "PARENT_A"    // seed 003's first creator: the parent in kin
	Responsible = "RESPONSIBLE" // the human responsible for it
	Role        = "ROLE"        // its role
)

// Builtins returns the names of the built-in placeholders, sorted.
func Builtins() []string {
	return []string{AgentName, Parent, ParentA, Responsible, Role}
}

func isBuiltin(name string) bool {
	switch name {
	case AgentName, Parent, ParentA, Responsible, Role:
		return true
	}
	return false
}

// Config is the template's config fragment. Unknown keys are an error.
type Config struct {
	Role   string      `json:"role,omitempty"`
	Stage  string      `json:"stage,omitempty"`
	Policy *kin.Policy `json:"policy,omitempty"`
}

// invalid is the error of a template that breaks a rule.
func invalid(format string, args ...any) error {
	return kin.Errorf(kin.ECodeInvalid, "template: "+format, args...)
}

// checkPath says why p is not a valid template path, or "".
func checkPath(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > MaxPathLen:
		return fmt.Sprintf("is %d bytes long; at most %d are allowed", len(p), MaxPathLen)
	case !utf8.ValidString(p):
		return "is not valid UTF-8"
	case strings.HasPrefix(p, "/"):
		return "is absolute"
	case strings.ContainsFunc(p, isControl):
		return "holds a control character"
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return `holds a ".." component`
		case len(c) > MaxNameLen:
			return fmt.Sprintf("has a component of %d bytes; at most %d are allowed", len(c), MaxNameLen)
		}
	}
	if path.Clean(p) != p || p == "." {
		return "is not a clean relative path"
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkFiles checks the structure of files: paths, duplicates, directories
// listed before what lies under them (when dirsListed), data, modes and
// sizes.
func checkFiles(files []kin.TemplateFile, dirsListed bool) error {
	if len(files) > MaxFiles {
		return invalid("%d files and directories; at most %d are allowed", len(files), MaxFiles)
	}
	seen := make(map[string]bool, len(files)) // path: is a directory
	total := 0
	for _, f := range files {
		if why := checkPath(f.Path); why != "" {
			return invalid("path %q %s", f.Path, why)
		}
		if _, dup := seen[f.Path]; dup {
			return invalid("%s is listed twice", f.Path)
		}
		if f.Mode&^0o777 != 0 {
			return invalid("%s has mode %#o; only permission bits (0o777) are allowed", f.Path, f.Mode)
		}
		if dirsListed {
			if dir := path.Dir(f.Path); dir != "." {
				isDir, ok := seen[dir]
				switch {
				case !ok:
					return invalid("%s comes before its directory %s", f.Path, dir)
				case !isDir:
					return invalid("%s lies under %s, which is a file", f.Path, dir)
				}
			}
		}
		seen[f.Path] = f.Dir
		if f.Dir {
			if f.Data != "" {
				return invalid("%s is a directory with data", f.Path)
			}
			continue
		}
		if len(f.Data) > MaxFileSize {
			return invalid("%s is %d bytes; at most %d are allowed per file", f.Path, len(f.Data), MaxFileSize)
		}
		total += len(f.Data)
		if total > MaxTotalSize {
			return invalid("the files are more than %d bytes in all", MaxTotalSize)
		}
		if !utf8.ValidString(f.Data) {
			return invalid("%s is not UTF-8 text; a template holds only text files", f.Path)
		}
	}
	return nil
}

// checkVars checks the --set values.
func checkVars(vars map[string]string) error {
	if len(vars) > MaxVars {
		return invalid("%d --set values; at most %d are allowed", len(vars), MaxVars)
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		v := vars[k]
		switch {
		case !isName(k):
			return invalid("--set %s: a placeholder name is upper case letters, digits and '_', starting with a letter", k)
		case isBuiltin(k):
			return invalid("--set %s: %s is a built-in placeholder and cannot be redefined", k, k)
		case len(v) > MaxVarSize:
			return invalid("--set %s: the value is %d bytes; at most %d are allowed", k, len(v), MaxVarSize)
		case !utf8.ValidString(v):
			return invalid("--set %s: the value is not valid UTF-8", k)
		}
	}
	return nil
}

// isName says whether s matches [A-Z][A-Z0-9_]*.
func isName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool { return c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' }

// scan calls fn for every placeholder of s with the text before it (since
// the previous one) and its name, then with the rest of s and "". It stops
// when fn returns false.
func scan(s string, fn func(text, name string) bool) {
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '{' || i+2 >= len(s) || s[i+1] < 'A' || s[i+1] > 'Z' {
			continue
		}
		j := i + 2
		for j < len(s) && isNameByte(s[j]) {
			j++
		}
		if j == len(s) || s[j] != '}' {
			continue
		}
		if !fn(s[start:i], s[i+1:j]) {
			return
		}
		start = j + 1
		i = j
	}
	fn(s[start:], "")
}

// eachName calls fn with every placeholder of s, in order, repeats included.
func eachName(s string, fn func(name string)) {
	scan(s, func(_, name string) bool {
		if name != "" {
			fn(name)
		}
		return true
	})
}

// Placeholders returns every placeholder t uses, in its files' contents and
// in its paths, sorted. It fails only if t's structure is invalid.
func Placeholders(t kin.Template) ([]string, error) {
	if err := checkFiles(t.Files, true); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	add := func(n string) { set[n] = true }
	for _, f := range t.Files {
		eachName(f.Path, add)
		eachName(f.Data, add)
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// Check validates a template received over the wire: its structure (see
// the package documentation), its --set values, and that every placeholder
// it uses is a built-in or a key of t.Vars. Its errors are *kin.Error with
// kin.ECodeInvalid.
func Check(t kin.Template) error {
	if err := checkFiles(t.Files, true); err != nil {
		return err
	}
	if err := checkVars(t.Vars); err != nil {
		return err
	}
	known := func(n string) bool {
		_, ok := t.Vars[n]
		return ok || isBuiltin(n)
	}
	// One message per unknown name, at its first use; at most
	// maxReported of them.
	const maxReported = 10
	var msgs []string
	reported := map[string]bool{}
	more := 0
	list := strings.Join(knownNames(t.Vars), ", ")
	for _, f := range t.Files {
		for _, w := range [...]struct{ where, s string }{{"the path " + f.Path, f.Path}, {f.Path, f.Data}} {
			eachName(w.s, func(n string) {
				if known(n) || reported[n] {
					return
				}
				reported[n] = true
				if len(msgs) == maxReported {
					more++
					return
				}
				msgs = append(msgs, fmt.Sprintf("%s uses {%s}, which is not a known placeholder (known: %s; add --set %s=...)",
					w.where, n, list, n))
			})
		}
	}
	if more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more unknown placeholders", more))
	}
	if len(msgs) > 0 {
		return invalid("%s", strings.Join(msgs, "\ntemplate: "))
	}
	return nil
}

// knownNames returns the built-ins, then the keys of vars sorted.
func knownNames(vars map[string]string) []string {
	return append(Builtins(), slices.Sorted(maps.Keys(vars))...)
}
