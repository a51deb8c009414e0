package daemon_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestArchitectureNamesEveryServiceMethod holds docs/ARCHITECTURE.md's
// table of where each kin.Service method lives to the code: every method of
// kin.Service has a row, and each row's file defines that method, so that a
// newcomer finds any method's code in one hop.
func TestArchitectureNamesEveryServiceMethod(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(\\w+Service)` \\| `(\\w+)` \\| `([^`]+\\.go)` \\|$")
	where := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		where[m[2]] = m[3]
	}
	svc := reflect.TypeFor[kin.Service]()
	for i := range svc.NumMethod() {
		name := svc.Method(i).Name
		file, ok := where[name]
		if !ok {
			t.Errorf("kin.Service's %s has no row in docs/ARCHITECTURE.md's table of where each method lives", name)
			continue
		}
		delete(where, name)
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: the table says %s: %v", name, file, err)
			continue
		}
		found := false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == name {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/ARCHITECTURE.md says %s is in %s, which defines no method of that name", name, file)
		}
	}
	for name, file := range where {
		t.Errorf("docs/ARCHITECTURE.md's table names %s (%s), which kin.Service does not have", name, file)
	}
}
