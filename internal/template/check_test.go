package template_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

func TestPlaceholderSyntax(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"a placeholder", "hi {AGENT_NAME}!", []string{"AGENT_NAME"}},
		{"digits and underscores", "{A_1} {B2_}", []string{"A_1", "B2_"}},
		{"repeats count once, sorted", "{ROLE} {AGENT_NAME} {ROLE}", []string{"AGENT_NAME", "ROLE"}},
		{"JSON braces are text", `{"a": {"b": 1}, "c": [{}]}`, nil},
		{"lower case is text", "{lower} {Agent}", nil},
		{"empty braces are text", "{}", nil},
		{"a leading digit or underscore is text", "{1A} {_A}", nil},
		{"other characters are text", "{A-B} {A B} {A.B}", nil},
		{"unclosed is text", "{AGENT_NAME", nil},
		{"doubled braces hold one", "{{AGENT_NAME}}", []string{"AGENT_NAME"}},
		{"adjacent", "{A}{B}", []string{"A", "B"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := template.Placeholders(tmpl(file("f.md", tc.data)))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Placeholders(%q) = %q, want %q", tc.data, got, tc.want)
			}
		})
	}
}

func TestPlaceholdersInPaths(t *testing.T) {
	got, err := template.Placeholders(tmpl(dir("{AGENT_NAME}"), file("{AGENT_NAME}/{ROLE}.md", "{X}")))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"AGENT_NAME", "ROLE", "X"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	big := strings.Repeat("x", template.MaxFileSize)
	many := make([]kin.TemplateFile, template.MaxFiles+1)
	for i := range many {
		many[i] = file("f"+strconv.Itoa(i), "")
	}
	withMode := func(f kin.TemplateFile, m uint32) kin.TemplateFile { f.Mode = m; return f }
	tests := []struct {
		name    string
		t       kin.Template
		wantErr string
	}{
		{"a valid template", tmpl(file("SOUL.md", "{AGENT_NAME} of {PARENT}"), dir("memory"), file("memory/a.md", "{ROLE}")), ""},
		{"an empty template", kin.Template{}, ""},
		{"../ is refused", tmpl(file("../evil.md", "x")), `"../evil.md" holds a ".." component`},
		{"a .. inside is refused", tmpl(dir("a"), file("a/../../evil.md", "x")), `".." component`},
		{"a trailing .. is refused", tmpl(dir("a"), dir("a/..")), `".." component`},
		{"an absolute path is refused", tmpl(file("/etc/passwd", "x")), `"/etc/passwd" is absolute`},
		{"an unclean path is refused", tmpl(dir("a"), file("a//b", "x")), "not a clean relative path"},
		{"./ is refused", tmpl(file("./a", "x")), "not a clean relative path"},
		{". is refused", tmpl(dir(".")), "not a clean relative path"},
		{"a trailing / is refused", tmpl(dir("a/")), "not a clean relative path"},
		{"an empty path is refused", tmpl(file("", "x")), "is empty"},
		{"a NUL is refused", tmpl(file("a\x00b", "x")), "control character"},
		{"a duplicate is refused", tmpl(file("a.md", "x"), file("a.md", "y")), "a.md is listed twice"},
		{"a file and a directory of one name are refused", tmpl(dir("a"), file("a", "y")), "a is listed twice"},
		{"a file before its directory is refused", tmpl(file("memory/a.md", "x"), dir("memory")), "memory/a.md comes before its directory memory"},
		{"a file under a file is refused", tmpl(file("a", "x"), file("a/b", "y")), "a/b lies under a, which is a file"},
		{"setuid is refused", tmpl(withMode(file("a", "x"), 0o4755)), "only permission bits"},
		{"permission bits are allowed", tmpl(withMode(file("a", "x"), 0o777), withMode(dir("d"), 0o700)), ""},
		{"a directory with data is refused", tmpl(kin.TemplateFile{Path: "d", Dir: true, Data: "x"}), "d is a directory with data"},
		{"a file of 1 MiB is allowed", tmpl(file("big", big)), ""},
		{"a file over 1 MiB is refused", tmpl(file("big", big+"x")), "big is 1048577 bytes"},
		{"over 8 MiB in all are refused", tmpl(file("1", big), file("2", big), file("3", big), file("4", big), file("5", big), file("6", big), file("7", big), file("8", big), file("9", "x")), "in all"},
		{"over 1000 entries are refused", tmpl(many...), "1001 files and directories; at most 1000"},
		{"binary data is refused", tmpl(file("a.png", "\xff\xfe")), "a.png is not UTF-8 text"},
		{"an unknown placeholder is refused", tmpl(file("SOUL.md", "{NAME_OF_CAT}")), "SOUL.md uses {NAME_OF_CAT}"},
		{"an unknown placeholder in a path is refused", tmpl(file("{CAT}.md", "x")), "the path {CAT}.md uses {CAT}"},
		{"a --set placeholder is known", kin.Template{Files: []kin.TemplateFile{file("{CAT}.md", "{CAT}")}, Vars: map[string]string{"CAT": "tom"}}, ""},
		{"--set may not redefine a built-in", kin.Template{Vars: map[string]string{"ROLE": "x"}}, "--set ROLE: ROLE is a built-in"},
		{"--set keys are upper case", kin.Template{Vars: map[string]string{"cat": "x"}}, "--set cat: a placeholder name"},
		{"--set values are bounded", kin.Template{Vars: map[string]string{"CAT": strings.Repeat("x", template.MaxVarSize+1)}}, "--set CAT: the value is 4097 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := template.Check(tc.t)
			wantErr(t, err, tc.wantErr)
			if err != nil && kin.ErrorCodeOf(err) != kin.ECodeInvalid {
				t.Errorf("error code %q, want %q", kin.ErrorCodeOf(err), kin.ECodeInvalid)
			}
		})
	}
}

func TestCheckNamesUnknownPlaceholderAndFile(t *testing.T) {
	err := template.Check(kin.Template{
		Files: []kin.TemplateFile{file("AGENTS.md", "{AGENT_NAME} {CAT}"), file("SOUL.md", "{NAME_OF_CAT} {CAT}")},
		Vars:  map[string]string{"CAT": "tom"},
	})
	want := "template: SOUL.md uses {NAME_OF_CAT}, which is not a known placeholder " +
		"(known: AGENT_NAME, PARENT, PARENT_A, RESPONSIBLE, ROLE, CAT; add --set NAME_OF_CAT=...)"
	if got := kin.ErrorMessageOf(err); got != want {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}
}

func TestCheckBoundsItsMessage(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		b.WriteString("{X" + strconv.Itoa(i) + "} ")
	}
	err := template.Check(tmpl(file("a.md", b.String())))
	if err == nil || strings.Count(err.Error(), "\n") != 10 || !strings.Contains(err.Error(), "and 4990 more unknown placeholders") {
		t.Errorf("error %q", err)
	}
}
