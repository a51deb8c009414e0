package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// DepChecker checks what one package of the module depends on.
//
// Rules are keyed by pattern, as the go command writes them: an import path
// ("os/exec"), a path ending in "/..." for it and every package below it
// ("github.com/kin-agents/kin/internal/store/..."), or "std" for the
// standard library. Each maps to the reason the rule exists, which the
// failure prints.
type DepChecker struct {
	// Package is the import path of the package checked.
	Package string

	// BadDeps are banned anywhere among Package's dependencies.
	BadDeps map[string]string

	// BadImports are banned among Package's own imports only: for the
	// standard packages the standard library itself uses (fmt imports os),
	// which no ban on every dependency could pass.
	BadImports map[string]string

	// OnlyDeps, when not nil, is the allow-list: every dependency must
	// match one of its patterns.
	OnlyDeps map[string]string

	// Skip names packages whose own dependencies are not Package's
	// concern: the walk stops at them, though they are checked themselves
	// (internal/cli imports internal/daemon only to run it as kin serve).
	Skip map[string]string
}

// Check fails t once for every rule c.Package breaks.
func (c DepChecker) Check(t *testing.T) {
	t.Helper()
	g, err := loadModule()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.problems(g) {
		t.Error(p)
	}
}

// Packages returns the import paths of every package of the module, as
// `go list ./...` run at its root does, sorted.
func Packages(t *testing.T) []string {
	t.Helper()
	g, err := loadModule()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, pkg := range g.pkgs {
		if g.isOurs(pkg) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// listedPackage is the part of `go list -json`'s output the checks read.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Module     *struct {
		Path string
		Main bool
	}
}

// graph is the module's packages and everything they import.
type graph struct {
	module string // the main module's path
	pkgs   map[string]*listedPackage
}

func (g *graph) isOurs(p *listedPackage) bool { return p.Module != nil && p.Module.Main }

// short drops the module's path from ours, so chains read as the package
// map does ("internal/policy -> kin").
func (g *graph) short(path string) string {
	if rest, ok := strings.CutPrefix(path, g.module+"/"); ok {
		return rest
	}
	return path
}

func (g *graph) matches(pattern, path string) bool {
	if pattern == "std" {
		p := g.pkgs[path]
		return p != nil && p.Standard
	}
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return path == pattern
}

func (g *graph) matchesAnyPackage(pattern string) bool {
	for p := range g.pkgs {
		if g.matches(pattern, p) {
			return true
		}
	}
	return false
}

func (g *graph) matchesAny(patterns map[string]string, path string) bool {
	for pat := range patterns {
		if g.matches(pat, path) {
			return true
		}
	}
	return false
}

// loadModule lists the module's import graph once per test binary: every
// check reads the same graph, and `go list` is the slow part.
var loadModule = sync.OnceValues(func() (*graph, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	// go test puts the go command that runs it first on PATH (since Go
	// 1.19), so this is that go, with the test's GOFLAGS and CGO_ENABLED.
	// std is listed too, so that a rule naming a standard package can be
	// told from a typo.
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Imports,Module", "./...", "std")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps ./... std in %s: %v\n%s", root, err, stderr.Bytes())
	}
	return parseList(out)
})

// parseList reads `go list -json`'s stream of objects into a graph.
func parseList(out []byte) (*graph, error) {
	g := &graph{pkgs: map[string]*listedPackage{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %v", err)
		}
		g.pkgs[p.ImportPath] = p
		if g.isOurs(p) {
			g.module = p.Module.Path
		}
	}
	if g.module == "" {
		return nil, errors.New("go list found no package of the main module")
	}
	return g, nil
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// problems returns one message for each rule c.Package breaks in g.
func (c DepChecker) problems(g *graph) []string {
	root := g.pkgs[c.Package]
	if root == nil || !g.isOurs(root) {
		return []string{fmt.Sprintf("%s is not a package of %s", c.Package, g.module)}
	}
	name := g.short(c.Package)
	var out []string

	// A rule naming a package that does not exist would pass forever: a
	// rename or a typo must fail. Other modules' packages are in the
	// graph only while something imports them, so those go unchecked.
	for _, rules := range []map[string]string{c.BadDeps, c.BadImports, c.OnlyDeps, c.Skip} {
		for _, pat := range sortedKeys(rules) {
			ours := pat == g.module || strings.HasPrefix(pat, g.module+"/")
			first, _, _ := strings.Cut(pat, "/")
			standard := !strings.Contains(first, ".")
			if pat != "std" && (ours || standard) && !g.matchesAnyPackage(pat) {
				out = append(out, fmt.Sprintf("%s: rule %q names no package of %s or the standard library; was it renamed?", name, g.short(pat), g.module))
			}
		}
	}

	// Breadth first, so the chain each dependency is reported with is a
	// shortest one.
	from := map[string]string{c.Package: ""}
	walked := []string{c.Package}
	var deps []string
	for i := 0; i < len(walked); i++ {
		p := walked[i]
		if p != c.Package {
			deps = append(deps, p)
			if _, skip := c.Skip[p]; skip {
				continue
			}
		}
		pkg := g.pkgs[p]
		if pkg == nil {
			continue
		}
		for _, imp := range pkg.Imports {
			if _, seen := from[imp]; !seen {
				from[imp] = p
				walked = append(walked, imp)
			}
		}
	}
	chain := func(p string) string {
		var names []string
		for ; p != ""; p = from[p] {
			names = append(names, g.short(p))
		}
		slices.Reverse(names)
		return strings.Join(names, " -> ")
	}
	rule := func(pat, dep string) string {
		if pat == dep {
			return ""
		}
		return fmt.Sprintf(" (rule %q)", g.short(pat))
	}

	for _, dep := range deps {
		for _, pat := range sortedKeys(c.BadDeps) {
			if g.matches(pat, dep) {
				out = append(out, fmt.Sprintf("%s must not depend on %s%s: %s\n\timport chain: %s",
					name, g.short(dep), rule(pat, dep), c.BadDeps[pat], chain(dep)))
			}
		}
	}

	for _, imp := range root.Imports {
		for _, pat := range sortedKeys(c.BadImports) {
			if g.matches(pat, imp) {
				out = append(out, fmt.Sprintf("%s must not import %s%s: %s\n\timport chain: %s -> %s",
					name, g.short(imp), rule(pat, imp), c.BadImports[pat], name, g.short(imp)))
			}
		}
	}

	if c.OnlyDeps != nil {
		// Report where the walk first leaves the allow-list, not every
		// package a new module brings in behind it.
		var allowed []string
		for _, pat := range sortedKeys(c.OnlyDeps) {
			allowed = append(allowed, fmt.Sprintf("%s (%s)", g.short(pat), c.OnlyDeps[pat]))
		}
		reported := map[string]bool{}
		for _, p := range walked {
			_, skip := c.Skip[p]
			if p != c.Package && (skip || !g.matchesAny(c.OnlyDeps, p)) {
				continue
			}
			for _, imp := range g.pkgs[p].Imports {
				if reported[imp] || g.matchesAny(c.OnlyDeps, imp) {
					continue
				}
				reported[imp] = true
				out = append(out, fmt.Sprintf("%s must not depend on %s: it may depend only on %s\n\timport chain: %s -> %s",
					name, g.short(imp), strings.Join(allowed, ", "), chain(p), g.short(imp)))
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
