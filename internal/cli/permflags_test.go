package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// writeTemplate writes a workspace template with a config fragment and
// returns its directory.
func writeTemplate(t *testing.T, fragment string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"SOUL.md":         "# {AGENT_NAME}\nTopic: {TOPIC}\n",
		"memory/notes.md": "notes\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if fragment != "" {
		if err := os.WriteFile(filepath.Join(dir, ".kin.json"), []byte(fragment), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// templateFiles is what writeTemplate's template reads as.
func templateFiles() []kin.TemplateFile {
	return []kin.TemplateFile{
		{Path: "SOUL.md", Mode: 0o644, Data: "# {AGENT_NAME}\nTopic: {TOPIC}\n"},
		{Path: "memory", Dir: true, Mode: 0o755},
		{Path: "memory/notes.md", Mode: 0o644, Data: "notes\n"},
	}
}

const (
	// fragmentJSON is a template's config fragment.
	fragmentJSON = `{"role":"writer","stage":"dev","policy":{"tools":{"allow":["read","edit"],"deny":["exec"]},"mounts":{"/work":"ro"}}}`
	// policyYAML is a --policy file.
	policyYAML = "tools:\n  deny: [web_*]\nbudget:\n  max_tokens: 5000\n"
)

func TestParseSets(t *testing.T) {
	vars, err := parseSets([]string{"TOPIC=lineage", "A1_B=x=y", "EMPTY="})
	if err != nil || !reflect.DeepEqual(vars, map[string]string{"TOPIC": "lineage", "A1_B": "x=y", "EMPTY": ""}) {
		t.Errorf("parseSets = %v, %v", vars, err)
	}
	if vars, err := parseSets(nil); vars != nil || err != nil {
		t.Errorf("parseSets(nil) = %v, %v", vars, err)
	}
	for _, bad := range [][]string{{"TOPIC"}, {"topic=x"}, {"1A=x"}, {"_A=x"}, {"A-B=x"}, {"=x"}, {"A=1", "A=2"}} {
		if _, err := parseSets(bad); err == nil {
			t.Errorf("parseSets(%q) accepted it", bad)
		}
	}
}
