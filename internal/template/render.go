package template

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kin-agents/kin/kin"
)

// Render checks t (see Check) and returns its files with every placeholder
// replaced: the built-ins by builtins (a built-in left out is empty; a key
// that is not a built-in is an error), the others by t.Vars. Values are
// substituted as they are, never expanded again. A value used in a path
// must not hold a '/' nor be "." or "..", and the rendered files must pass
// the same structural checks and limits as the template. Its errors are
// *kin.Error with kin.ECodeInvalid.
func Render(t kin.Template, builtins map[string]string) ([]kin.TemplateFile, error) {
	if err := Check(t); err != nil {
		return nil, err
	}
	vals := make(map[string]string, len(builtins)+len(t.Vars))
	for _, k := range slices.Sorted(maps.Keys(builtins)) {
		v := builtins[k]
		if !isBuiltin(k) {
			return nil, invalid("%s is not a built-in placeholder (built-ins: %s)", k, strings.Join(Builtins(), ", "))
		}
		if !utf8.ValidString(v) {
			return nil, invalid("the value of %s is not valid UTF-8", k)
		}
		vals[k] = v
	}
	for k, v := range t.Vars {
		vals[k] = v
	}
	out := make([]kin.TemplateFile, len(t.Files))
	total := 0
	for i, f := range t.Files {
		p, err := renderPath(f.Path, vals)
		if err != nil {
			return nil, err
		}
		data, ok := expand(f.Data, vals, min(MaxFileSize, MaxTotalSize-total))
		if !ok {
			if len(data) > MaxFileSize {
				return nil, invalid("%s renders to more than %d bytes", f.Path, MaxFileSize)
			}
			return nil, invalid("the rendered files are more than %d bytes in all", MaxTotalSize)
		}
		total += len(data)
		out[i] = kin.TemplateFile{Path: p, Dir: f.Dir, Mode: f.Mode, Data: data}
	}
	if err := checkFiles(out, true); err != nil {
		return nil, err
	}
	return out, nil
}

// renderPath replaces the placeholders of the path p, refusing values that
// would change its shape.
func renderPath(p string, vals map[string]string) (string, error) {
	var err error
	scan(p, func(_, name string) bool {
		if name == "" {
			return true
		}
		v := vals[name]
		var why string
		switch {
		case strings.Contains(v, "/"):
			why = "holds a '/'"
		case v == "." || v == "..":
			why = "is " + v
		}
		if why != "" {
			err = invalid("the path %s uses {%s}, whose value %q %s, which is not allowed in a path", p, name, v, why)
			return false
		}
		return true
	})
	if err != nil {
		return "", err
	}
	r, _ := expand(p, vals, MaxPathLen+1)
	if why := checkPath(r); why != "" {
		return "", invalid("the path %s renders to %q, which %s", p, truncate(r), why)
	}
	return r, nil
}

func truncate(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "..."
}

// expand replaces the placeholders of s by their values, once. It gives up
// and returns false once the result would be longer than limit; what it
// returns then is longer than limit, but not by more than one value.
func expand(s string, vals map[string]string, limit int) (string, bool) {
	var b strings.Builder
	ok := true
	scan(s, func(text, name string) bool {
		b.WriteString(text)
		if name != "" {
			b.WriteString(vals[name])
		}
		if b.Len() > limit {
			ok = false
			return false
		}
		return true
	})
	return b.String(), ok
}
