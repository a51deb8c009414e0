package template_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

func TestWriteFilesModesAndParents(t *testing.T) {
	old := syscall.Umask(0o077) // Write's modes must not depend on it
	defer syscall.Umask(old)
	ws := t.TempDir()
	files := []kin.TemplateFile{
		{Path: "SOUL.md", Data: "# nova\n"},
		{Path: "run.sh", Mode: 0o755, Data: "#!/bin/sh\n"},
		{Path: "shared.md", Mode: 0o666, Data: "x"},
		{Path: "memory", Dir: true},
		{Path: "memory/notes.md", Data: "n"},
		{Path: "private", Dir: true, Mode: 0o777},
		{Path: "deep/er/file.md", Data: "d"}, // parents not listed: created 0755
		{Path: "empty", Dir: true, Mode: 0o700},
		{Path: "empty.md"},
	}
	if err := template.Write(ws, files, -1, -1); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		"SOUL.md": 0o644, "run.sh": 0o755, "shared.md": 0o666, "memory": fs.ModeDir | 0o755,
		"memory/notes.md": 0o644, "private": fs.ModeDir | 0o777, "deep": fs.ModeDir | 0o755,
		"deep/er": fs.ModeDir | 0o755, "deep/er/file.md": 0o644, "empty": fs.ModeDir | 0o700, "empty.md": 0o644,
	}
	got := map[string]fs.FileMode{}
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if p != ws {
			fi, _ := os.Lstat(p)
			rel, _ := filepath.Rel(ws, p)
			got[filepath.ToSlash(rel)] = fi.Mode()
		}
		return err
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("modes\n%v\nwant\n%v", got, want)
	}
	tree := listTree(t, ws)
	for _, f := range files {
		if !f.Dir && tree[f.Path] != f.Data {
			t.Errorf("%s = %q, want %q", f.Path, tree[f.Path], f.Data)
		}
	}
}

func TestWriteOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	tests := []struct {
		name             string
		uid, gid         int
		wantUID, wantGID uint32
	}{
		{"owned by the agent", 12345, 23456, 12345, 23456},
		{"uid < 0 skips chown", -1, 23456, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			files := []kin.TemplateFile{dir("memory"), file("memory/notes.md", "n"), file("made/parent.md", "p")}
			if err := template.Write(ws, files, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"memory", "memory/notes.md", "made", "made/parent.md"} {
				fi, err := os.Lstat(filepath.Join(ws, p))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != tc.wantUID || st.Gid != tc.wantGID {
					t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, tc.wantUID, tc.wantGID)
				}
			}
			if fi, _ := os.Lstat(ws); fi.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("the workspace itself was chowned")
			}
		})
	}
}

func TestWriteRefusesToEscapeThroughPlantedSymlinks(t *testing.T) {
	tests := []struct {
		name    string
		links   map[string]string // in the workspace: name -> target ("OUT" is replaced by the outside directory)
		files   []kin.TemplateFile
		wantErr string
	}{
		{"an absolute directory link", map[string]string{"memory": "OUT"},
			[]kin.TemplateFile{file("SOUL.md", "s"), dir("memory"), file("memory/notes.md", "n")}, "memory already exists in the workspace and is not a directory (a symbolic link)"},
		{"a relative directory link", map[string]string{"memory": "../out"},
			[]kin.TemplateFile{file("SOUL.md", "s"), file("memory/notes.md", "n")}, "memory already exists"},
		{"a deep directory link", map[string]string{"a/b": "../../out"},
			[]kin.TemplateFile{dir("a"), file("a/x.md", "x"), dir("a/b"), file("a/b/c.md", "c")}, "a/b already exists"},
		{"a file link", map[string]string{"SOUL.md": "OUT/SOUL.md"},
			[]kin.TemplateFile{file("AGENTS.md", "a"), file("SOUL.md", "s")}, "SOUL.md already exists in the workspace (a symbolic link)"},
		{"a dangling file link", map[string]string{"USER.md": "../out/new.md"},
			[]kin.TemplateFile{file("USER.md", "u")}, "USER.md already exists"},
		{"a link to a directory inside", map[string]string{"memory": "inner"},
			[]kin.TemplateFile{dir("inner"), dir("memory"), file("memory/notes.md", "n")}, "memory already exists"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ws, out := filepath.Join(base, "ws"), filepath.Join(base, "out")
			writeTree(t, base, map[string]string{"ws/": "", "out/keep.md": "keep"})
			for name, target := range tc.links {
				target = strings.Replace(target, "OUT", out, 1)
				p := filepath.Join(ws, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
			}
			before := listTree(t, ws)
			err := template.Write(ws, tc.files, -1, -1)
			wantErr(t, err, tc.wantErr)
			if !errors.Is(err, fs.ErrExist) {
				t.Errorf("error %v is not fs.ErrExist", err)
			}
			if got := listTree(t, out); !reflect.DeepEqual(got, map[string]string{"keep.md": "keep"}) {
				t.Errorf("written outside the workspace: %v", got)
			}
			if got := listTree(t, ws); !reflect.DeepEqual(got, before) {
				t.Errorf("the workspace changed on error:\n%v\nwas\n%v", got, before)
			}
		})
	}
}

func TestWriteNeverOverwritesAndCleansUp(t *testing.T) {
	tests := []struct {
		name     string
		existing map[string]string
		files    []kin.TemplateFile
		wantErr  string
	}{
		{"an existing file is not replaced", map[string]string{"USER.md": "mine"},
			[]kin.TemplateFile{file("SOUL.md", "s"), dir("memory"), file("memory/a.md", "a"), file("USER.md", "theirs")}, "USER.md already exists in the workspace (a file)"},
		{"an existing file where a directory goes", map[string]string{"memory": "mine"},
			[]kin.TemplateFile{file("SOUL.md", "s"), dir("memory")}, "memory already exists in the workspace and is not a directory (a file)"},
		{"an existing file above a file", map[string]string{"a": "mine"},
			[]kin.TemplateFile{file("x.md", "x"), file("a/b.md", "b")}, "a already exists"},
		{"an existing directory where a file goes", map[string]string{"SOUL.md/": ""},
			[]kin.TemplateFile{dir("new"), file("new/x.md", "x"), file("SOUL.md", "s")}, "SOUL.md already exists in the workspace (a directory)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			writeTree(t, ws, tc.existing)
			before := listTree(t, ws)
			err := template.Write(ws, tc.files, -1, -1)
			wantErr(t, err, tc.wantErr)
			if !errors.Is(err, fs.ErrExist) {
				t.Errorf("error %v is not fs.ErrExist", err)
			}
			if got := listTree(t, ws); !reflect.DeepEqual(got, before) {
				t.Errorf("the workspace changed on error (partial files or temporaries left):\n%v\nwas\n%v", got, before)
			}
		})
	}
}

func TestWriteKeepsAnExistingDirectory(t *testing.T) {
	ws := t.TempDir()
	writeTree(t, ws, map[string]string{"memory/old.md": "old"})
	if err := os.Chmod(filepath.Join(ws, "memory"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := template.Write(ws, []kin.TemplateFile{{Path: "memory", Dir: true, Mode: 0o755}, file("memory/new.md", "new")}, -1, -1); err != nil {
		t.Fatal(err)
	}
	if got, want := listTree(t, ws), map[string]string{"memory/": "", "memory/old.md": "old", "memory/new.md": "new"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "memory")); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing directory's mode changed to %o", fi.Mode().Perm())
	}
}

func TestWriteRefusesInvalidFiles(t *testing.T) {
	tests := []struct {
		name    string
		files   []kin.TemplateFile
		wantErr string
	}{
		{"../ is refused", []kin.TemplateFile{file("../escape.md", "x")}, `".." component`},
		{"an absolute path is refused", []kin.TemplateFile{file("/tmp/escape.md", "x")}, "absolute"},
		{"setuid is refused", []kin.TemplateFile{{Path: "a", Mode: 0o4755}}, "only permission bits"},
		{"a duplicate is refused", []kin.TemplateFile{file("a", "x"), file("a", "y")}, "listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ws := filepath.Join(base, "ws")
			writeTree(t, base, map[string]string{"ws/": ""})
			wantErr(t, template.Write(ws, tc.files, -1, -1), tc.wantErr)
			if got := listTree(t, base); !reflect.DeepEqual(got, map[string]string{"ws/": ""}) {
				t.Errorf("written: %v", got)
			}
		})
	}
}

func TestWriteNeedsAnExistingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if err := template.Write(missing, []kin.TemplateFile{file("a", "x")}, -1, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write into a missing directory: %v", err)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write created the workspace")
	}
}
