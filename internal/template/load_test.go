package template_test

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

func TestLoadChildAgentAndRender(t *testing.T) {
	tm, cfg, err := template.Load("testdata/child-agent")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range tm.Files {
		paths = append(paths, f.Path)
	}
	wantPaths := []string{"AGENTS.md", "SOUL.md", "USER.md", "memory", "memory/notes.md"}
	if !reflect.DeepEqual(paths, wantPaths) {
		t.Fatalf("paths %q, want %q (the config fragment is not a file)", paths, wantPaths)
	}
	if !tm.Files[3].Dir || tm.Files[3].Data != "" {
		t.Errorf("memory is %+v, want a directory", tm.Files[3])
	}
	if cfg.Role != "student" || cfg.Stage != "restricted" || cfg.Policy == nil || cfg.Policy.Tools == nil ||
		!reflect.DeepEqual(cfg.Policy.Tools.Deny, []string{"exec", "write", "edit"}) ||
		cfg.Policy.Budget == nil || *cfg.Policy.Budget.MaxTokens != 100000 {
		t.Errorf("config %+v", cfg)
	}
	names, err := template.Placeholders(tm)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"AGENT_NAME", "PARENT_A", "RESPONSIBLE", "ROLE"}; !reflect.DeepEqual(names, want) {
		t.Errorf("placeholders %q, want %q", names, want)
	}
	if err := template.Check(tm); err != nil {
		t.Fatal(err)
	}
	out, err := template.Render(tm, map[string]string{
		template.AgentName: "nova", template.Parent: "mano", template.ParentA: "mano",
		template.Responsible: "alice", template.Role: cfg.Role,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range out {
		got[f.Path] = f.Data
	}
	for p, want := range map[string]string{
		"SOUL.md":         "You are nova, created by mano.",
		"USER.md":         "alice is responsible for you.",
		"memory/notes.md": "Born as a student.",
		"AGENTS.md":       `{"stage": "restricted"}; braces like {this} or {}`,
	} {
		if !strings.Contains(got[p], want) {
			t.Errorf("%s = %q, want it to hold %q", p, got[p], want)
		}
	}
	ws := t.TempDir()
	if err := template.Write(ws, out, -1, -1); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "SOUL.md")); !strings.HasPrefix(string(b), "# nova\n") {
		t.Errorf("written SOUL.md = %q", b)
	}
}

func TestLoadConfigFragment(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    template.Config
		wantErr string
	}{
		{name: "no config is the zero config", files: map[string]string{"a.md": "x"}},
		{name: "json", files: map[string]string{".kin.json": `{"role": "r", "stage": "s"}`}, want: template.Config{Role: "r", Stage: "s"}},
		{name: "yaml", files: map[string]string{".kin.yaml": "role: r\nstage: s\n"}, want: template.Config{Role: "r", Stage: "s"}},
		{name: "yml", files: map[string]string{".kin.yml": "stage: s\n"}, want: template.Config{Stage: "s"}},
		{name: "empty yaml", files: map[string]string{".kin.yaml": ""}},
		{name: "yaml policy", files: map[string]string{".kin.yml": "policy:\n  tools:\n    allow: [read]\n"},
			want: template.Config{Policy: &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read"}}}}},
		{name: "two fragments are refused", files: map[string]string{".kin.json": `{}`, ".kin.yaml": ""}, wantErr: "both .kin.json and .kin.yaml"},
		{name: "unknown json key is refused", files: map[string]string{".kin.json": `{"rol": "r"}`}, wantErr: ".kin.json|rol"},
		{name: "unknown policy key is refused", files: map[string]string{".kin.json": `{"policy": {"tool": {}}}`}, wantErr: ".kin.json|tool"},
		{name: "unknown yaml key is refused", files: map[string]string{".kin.yaml": "policy:\n  tools:\n    alow: [read]\n"}, wantErr: ".kin.yaml|alow"},
		{name: "json trailing data is refused", files: map[string]string{".kin.json": `{} {}`}, wantErr: "data after"},
		{name: "bad json is refused", files: map[string]string{".kin.json": `{"role":`}, wantErr: ".kin.json"},
		{name: "config as a directory is refused", files: map[string]string{".kin.json/": ""}, wantErr: "must be a file"},
		{name: "config below the top is an ordinary file", files: map[string]string{"memory/.kin.json": `{"x": 1}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			writeTree(t, d, tc.files)
			tm, cfg, err := template.Load(d)
			wantErr(t, err, tc.wantErr)
			if err != nil {
				return
			}
			if !reflect.DeepEqual(cfg, tc.want) {
				t.Errorf("config %+v, want %+v", cfg, tc.want)
			}
			for _, f := range tm.Files {
				if f.Path == ".kin.json" || f.Path == ".kin.yaml" || f.Path == ".kin.yml" {
					t.Errorf("the config fragment %s is among the files", f.Path)
				}
			}
		})
	}
}

func TestLoadRefusesSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret": "s3cret"})
	tests := []struct {
		name, link, target string
	}{
		{"absolute link out of the template", "SOUL.md", filepath.Join(outside, "secret")},
		{"relative link out of the template", "memory/notes.md", "../../" + filepath.Base(outside) + "/secret"},
		{"link to a file inside the template", "USER.md", "AGENTS.md"},
		{"link to a directory inside the template", "mem", "memory"},
		{"link to a directory outside", "out", outside},
		{"dangling link", "gone.md", "nowhere"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			d := filepath.Join(base, "tmpl")
			writeTree(t, d, map[string]string{"AGENTS.md": "a", "memory/": ""})
			if err := os.Symlink(tc.target, filepath.Join(d, tc.link)); err != nil {
				t.Fatal(err)
			}
			tm, _, err := template.Load(d)
			wantErr(t, err, tc.link+" is a symbolic link")
			if len(tm.Files) != 0 {
				t.Errorf("Load returned files with its error: %+v", tm.Files)
			}
		})
	}
}

func TestLoadRefusesSpecialFiles(t *testing.T) {
	tests := []struct {
		name, want string
		make       func(p string) error
	}{
		{"fifo", "FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"socket", "socket", func(p string) error {
			l, err := net.Listen("unix", p)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}},
		{"device", "character device", func(p string) error {
			return syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|3) // like /dev/null
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			writeTree(t, d, map[string]string{"a.md": "x"})
			if err := tc.make(filepath.Join(d, "special")); err != nil {
				t.Skipf("cannot make a %s here: %v", tc.name, err)
			}
			_, _, err := template.Load(d)
			wantErr(t, err, "special is a "+tc.want)
		})
	}
}

func TestLoadKeepsPermissionBits(t *testing.T) {
	d := t.TempDir()
	writeTree(t, d, map[string]string{"run.sh": "#!/bin/sh\n", "secret.md": "x", "suid": "x", "private/": ""})
	for p, mode := range map[string]os.FileMode{
		"run.sh": 0o755, "secret.md": 0o600, "suid": 0o755 | os.ModeSetuid | os.ModeSetgid, "private": 0o700 | os.ModeSticky,
	} {
		if err := os.Chmod(filepath.Join(d, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	tm, _, err := template.Load(d)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, f := range tm.Files {
		got[f.Path] = f.Mode
	}
	want := map[string]uint32{"run.sh": 0o755, "secret.md": 0o600, "suid": 0o755, "private": 0o700}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("modes %v, want %v (setuid, setgid and sticky dropped)", got, want)
	}
}

func TestLoadLimits(t *testing.T) {
	big := strings.Repeat("x", template.MaxFileSize)
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["d/f"+strconv.Itoa(i)] = ""
		}
		m["d/"] = ""
		return m
	}
	tests := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{"1000 entries are allowed", many(999), ""},
		{"1001 entries are refused", many(1000), "at most 1000"},
		{"a file of 1 MiB is allowed", map[string]string{"big": big}, ""},
		{"a file over 1 MiB is refused", map[string]string{"big": big + "x"}, "big is 1048577 bytes"},
		{"8 MiB in all are allowed", map[string]string{"1": big, "2": big, "3": big, "4": big, "5": big, "6": big, "7": big, "8": big}, ""},
		{"over 8 MiB in all are refused", map[string]string{"1": big, "2": big, "3": big, "4": big, "5": big, "6": big, "7": big, "8": big, "9": "x"}, "8388608 bytes in all"},
		{"binary content is refused", map[string]string{"logo.png": "\x89PNG\xff\xfe"}, "logo.png is not UTF-8 text"},
		{"a control character in a name is refused", map[string]string{"a\nb.md": "x"}, "control character"},
		{"an overlong name is refused", map[string]string{strings.Repeat("n", 200) + "/" + strings.Repeat("m", 200) + "/" + strings.Repeat("o", 200) + "/" + strings.Repeat("p", 200) + "/" + strings.Repeat("q", 200) + "/" + strings.Repeat("r", 200) + "/x": "x"}, "bytes long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			writeTree(t, d, tc.files)
			_, _, err := template.Load(d)
			wantErr(t, err, tc.wantErr)
		})
	}
}

func TestLoadRefusesAMissingOrFileDir(t *testing.T) {
	d := t.TempDir()
	writeTree(t, d, map[string]string{"f": "x"})
	for _, p := range []string{filepath.Join(d, "missing"), filepath.Join(d, "f")} {
		if _, _, err := template.Load(p); err == nil {
			t.Errorf("Load(%s) succeeded", p)
		}
	}
}
