package template_test

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// writeTree creates files under dir: a path ending in "/" is a directory,
// anything else a file with that content.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// listTree returns every path under dir (slash-separated, "/" after a
// directory, "@" after a symbolic link) with a file's content.
func listTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel+"@"] = target
		case d.IsDir():
			out[rel+"/"] = ""
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantErr fails unless err is nil when want is "", or holds every
// "|"-separated part of want.
func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error; want one with %q", want)
	}
	for _, part := range strings.Split(want, "|") {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("error %q does not contain %q", err, part)
		}
	}
}

func file(p, data string) kin.TemplateFile { return kin.TemplateFile{Path: p, Data: data} }
func dir(p string) kin.TemplateFile        { return kin.TemplateFile{Path: p, Dir: true} }

func tmpl(files ...kin.TemplateFile) kin.Template { return kin.Template{Files: files} }
