package template_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

func TestRender(t *testing.T) {
	builtins := map[string]string{
		template.AgentName: "nova", template.Parent: "mano", template.ParentA: "mano",
		template.Responsible: "alice", template.Role: "student",
	}
	withVars := func(tm kin.Template, vars map[string]string) kin.Template { tm.Vars = vars; return tm }
	tests := []struct {
		name     string
		t        kin.Template
		builtins map[string]string
		want     []kin.TemplateFile
		wantErr  string
	}{
		{name: "built-ins are replaced",
			t:    tmpl(file("SOUL.md", "{AGENT_NAME}, child of {PARENT_A} ({PARENT}), for {RESPONSIBLE} as {ROLE}")),
			want: []kin.TemplateFile{file("SOUL.md", "nova, child of mano (mano), for alice as student")}},
		{name: "--set values are replaced",
			t:    withVars(tmpl(file("a.md", "{NAME_OF_CAT} meows")), map[string]string{"NAME_OF_CAT": "Tom"}),
			want: []kin.TemplateFile{file("a.md", "Tom meows")}},
		{name: "JSON braces are untouched",
			t:    tmpl(file("c.json", `{"name": "{AGENT_NAME}", "x": {}, "y": {"lower": 1}}`)),
			want: []kin.TemplateFile{file("c.json", `{"name": "nova", "x": {}, "y": {"lower": 1}}`)}},
		{name: "values are not expanded again",
			t:    withVars(tmpl(file("a.md", "{X}")), map[string]string{"X": "{ROLE}{X}"}),
			want: []kin.TemplateFile{file("a.md", "{ROLE}{X}")}},
		{name: "a value may hold a slash in a file",
			t:    withVars(tmpl(file("a.md", "{X}")), map[string]string{"X": "../../etc"}),
			want: []kin.TemplateFile{file("a.md", "../../etc")}},
		{name: "a missing built-in is empty",
			t: tmpl(file("a.md", "[{PARENT}]")), builtins: map[string]string{template.AgentName: "root"},
			want: []kin.TemplateFile{file("a.md", "[]")}},
		{name: "placeholders in paths are replaced",
			t:    tmpl(dir("{AGENT_NAME}"), file("{AGENT_NAME}/{ROLE}-notes.md", "x")),
			want: []kin.TemplateFile{dir("nova"), file("nova/student-notes.md", "x")}},
		{name: "a slash in a path value is refused",
			t: tmpl(file("{AGENT_NAME}.md", "x")), builtins: map[string]string{template.AgentName: "../etc/passwd"},
			wantErr: `the path {AGENT_NAME}.md uses {AGENT_NAME}, whose value "../etc/passwd" holds a '/'`},
		{name: "a .. path value is refused",
			t: tmpl(dir("{PARENT}"), file("{PARENT}/x", "x")), builtins: map[string]string{template.Parent: ".."},
			wantErr: `whose value ".." is ..`},
		{name: "a . path value is refused",
			t: tmpl(file("{PARENT}", "x")), builtins: map[string]string{template.Parent: "."},
			wantErr: `whose value "." is .`},
		{name: "an empty path value that empties a component is refused",
			t: tmpl(dir("a"), file("a/{PARENT}", "x")), builtins: map[string]string{template.Parent: ""},
			wantErr: `the path a/{PARENT} renders to "a/", which is not a clean relative path`},
		{name: "an empty path value leaving an absolute path is refused",
			t: tmpl(dir("{PARENT}"), file("{PARENT}/x", "x")), builtins: map[string]string{template.Parent: ""},
			wantErr: `the path {PARENT} renders to "", which is empty`},
		{name: "a control character in a path value is refused",
			t: tmpl(file("{PARENT}.md", "x")), builtins: map[string]string{template.Parent: "a\nb"},
			wantErr: "control character"},
		{name: "two paths rendering alike are refused",
			t:       tmpl(file("{AGENT_NAME}.md", "a"), file("nova.md", "b")),
			wantErr: "nova.md is listed twice"},
		{name: "an unknown placeholder is refused",
			t:       tmpl(file("SOUL.md", "{NAME_OF_CAT}")),
			wantErr: "SOUL.md uses {NAME_OF_CAT}"},
		{name: "a builtins key that is not a built-in is refused",
			t: tmpl(file("a.md", "x")), builtins: map[string]string{"CAT": "tom"},
			wantErr: "CAT is not a built-in placeholder"},
		{name: "a file rendering over 1 MiB is refused",
			t:       withVars(tmpl(file("big.md", strings.Repeat("{X}", 300))), map[string]string{"X": strings.Repeat("x", template.MaxVarSize)}),
			wantErr: "big.md renders to more than 1048576 bytes"},
		{name: "files rendering over 8 MiB in all are refused",
			t: withVars(tmpl(file("1", strings.Repeat("{X}", 250)), file("2", strings.Repeat("{X}", 250)), file("3", strings.Repeat("{X}", 250)),
				file("4", strings.Repeat("{X}", 250)), file("5", strings.Repeat("{X}", 250)), file("6", strings.Repeat("{X}", 250)),
				file("7", strings.Repeat("{X}", 250)), file("8", strings.Repeat("{X}", 250)), file("9", strings.Repeat("{X}", 250))),
				map[string]string{"X": strings.Repeat("x", template.MaxVarSize)}),
			wantErr: "the rendered files are more than 8388608 bytes in all"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.builtins
			if b == nil {
				b = builtins
			}
			got, err := template.Render(tc.t, b)
			wantErr(t, err, tc.wantErr)
			if err != nil {
				if kin.ErrorCodeOf(err) != kin.ECodeInvalid {
					t.Errorf("error code %q", kin.ErrorCodeOf(err))
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRenderKeepsModes(t *testing.T) {
	got, err := template.Render(tmpl(kin.TemplateFile{Path: "d", Dir: true, Mode: 0o700}, kin.TemplateFile{Path: "d/run.sh", Mode: 0o755, Data: "#!/bin/sh"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Mode != 0o700 || !got[0].Dir || got[1].Mode != 0o755 {
		t.Errorf("got %+v", got)
	}
}
