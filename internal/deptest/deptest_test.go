package deptest

import (
	"slices"
	"testing"
)

// testGraph is a small module, example.com/m: a imports fmt and b; b
// imports os/exec and example.org/x, which imports example.org/y; c
// imports os.
func testGraph() *graph {
	g := &graph{module: "example.com/m", pkgs: map[string]*listedPackage{}}
	add := func(path string, standard, ours bool, imports ...string) {
		p := &listedPackage{ImportPath: path, Standard: standard, Imports: imports}
		if ours {
			p.Module = &struct {
				Path string
				Main bool
			}{"example.com/m", true}
		}
		g.pkgs[path] = p
	}
	add("os", true, false)
	add("fmt", true, false, "os")
	add("os/exec", true, false, "os")
	add("example.org/y", false, false)
	add("example.org/x", false, false, "example.org/y", "fmt")
	add("example.com/m/a", false, true, "example.com/m/b", "fmt")
	add("example.com/m/b", false, true, "example.org/x", "os/exec")
	add("example.com/m/c", false, true, "os")
	return g
}

// TestProblems shows that each kind of rule fails, with the message a
// reader needs: the package, the banned one, the chain and the reason.
func TestProblems(t *testing.T) {
	const a, b, c = "example.com/m/a", "example.com/m/b", "example.com/m/c"
	tests := []struct {
		name    string
		checker DepChecker
		want    []string
	}{{
		name:    "a banned package two imports away",
		checker: DepChecker{Package: a, BadDeps: map[string]string{"os/exec": "a starts no process"}},
		want:    []string{"a must not depend on os/exec: a starts no process\n\timport chain: a -> b -> os/exec"},
	}, {
		name:    "a banned prefix",
		checker: DepChecker{Package: a, BadDeps: map[string]string{"example.org/...": "no x"}},
		want: []string{
			"a must not depend on example.org/x (rule \"example.org/...\"): no x\n\timport chain: a -> b -> example.org/x",
			"a must not depend on example.org/y (rule \"example.org/...\"): no x\n\timport chain: a -> b -> example.org/x -> example.org/y",
		},
	}, {
		name: "what a skipped package brings is not checked",
		checker: DepChecker{Package: a, BadDeps: map[string]string{"os/exec": "a starts no process"},
			Skip: map[string]string{b: "b's business"}},
	}, {
		name:    "a skipped package is checked itself",
		checker: DepChecker{Package: a, BadDeps: map[string]string{b: "not b"}, Skip: map[string]string{b: "b's business"}},
		want:    []string{"a must not depend on b: not b\n\timport chain: a -> b"},
	}, {
		name:    "an import of the standard library's own is not a's",
		checker: DepChecker{Package: a, BadImports: map[string]string{"os": "a does no I/O"}},
	}, {
		name:    "a banned import",
		checker: DepChecker{Package: c, BadImports: map[string]string{"os": "c does no I/O"}},
		want:    []string{"c must not import os: c does no I/O\n\timport chain: c -> os"},
	}, {
		name:    "standard library only, reported where the walk leaves it",
		checker: DepChecker{Package: a, OnlyDeps: map[string]string{"std": "a is small"}},
		want:    []string{"a must not depend on b: it may depend only on std (a is small)\n\timport chain: a -> b"},
	}, {
		name:    "an allow-list without a third-party module",
		checker: DepChecker{Package: a, OnlyDeps: map[string]string{"std": "small", b: "b"}},
		want:    []string{"a must not depend on example.org/x: it may depend only on b (b), std (small)\n\timport chain: a -> b -> example.org/x"},
	}, {
		name:    "an allow-list that holds",
		checker: DepChecker{Package: a, OnlyDeps: map[string]string{"std": "small", b: "b", "example.org/...": "x"}},
	}, {
		name:    "a rule naming a package that is gone",
		checker: DepChecker{Package: a, BadDeps: map[string]string{"example.com/m/gone": "renamed"}},
		want:    []string{"a: rule \"gone\" names no package of example.com/m or the standard library; was it renamed?"},
	}, {
		name:    "a rule naming a standard package that does not exist",
		checker: DepChecker{Package: a, BadImports: map[string]string{"os/exce": "typo"}},
		want:    []string{"a: rule \"os/exce\" names no package of example.com/m or the standard library; was it renamed?"},
	}, {
		name:    "another module's package may be absent",
		checker: DepChecker{Package: a, BadDeps: map[string]string{"example.net/z": "not in the graph"}},
	}, {
		name:    "a package that is not the module's",
		checker: DepChecker{Package: "example.org/x"},
		want:    []string{"example.org/x is not a package of example.com/m"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.checker.problems(testGraph()); !slices.Equal(got, tt.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
