// Package shimsrc names the source the lean sandbox shim is built from and
// hashes it, for leanshim's generator (which stamps the hash into each
// binary) and its tests (which check that the embedded binaries carry the
// hash of the source in the tree).
package shimsrc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// Package is the shim's main package.
const Package = "github.com/kin-agents/kin/internal/leanshim/kin-shim"

// Targets are the platforms a shim is embedded for; elsewhere kin starts
// agents through its own binary.
var Targets = []string{"amd64", "arm64"}

// FileName is the embedded binary for goarch.
func FileName(goarch string) string { return "kin-shim-linux-" + goarch }

// Hash is the hash of everything the shim's behaviour depends on outside
// the Go toolchain: the Go files of every package of this module it links
// (its main package and internal/sandbox), and the version of every other
// module it links (golang.org/x/sys). dir is any directory of the module.
func Hash(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-json", Package)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %v: %s", Package, err, bytes.TrimSpace(stderr.Bytes()))
	}
	type module struct {
		Path, Version string
		Main          bool
	}
	type pkg struct {
		ImportPath string
		Dir        string
		Standard   bool
		GoFiles    []string
		Module     *module
	}
	var lines []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("go list: %v", err)
		}
		switch {
		case p.Standard:
		case p.Module == nil:
			return "", fmt.Errorf("go list: package %s has no module", p.ImportPath)
		case !p.Module.Main:
			lines = append(lines, "module "+p.Module.Path+"@"+p.Module.Version)
		default:
			for _, f := range p.GoFiles {
				b, err := os.ReadFile(filepath.Join(p.Dir, f))
				if err != nil {
					return "", err
				}
				sum := sha256.Sum256(b)
				lines = append(lines, "file "+p.ImportPath+"/"+f+" "+hex.EncodeToString(sum[:]))
			}
		}
	}
	sort.Strings(lines)
	lines = compact(lines)
	h := sha256.New()
	for _, l := range lines {
		io.WriteString(h, l+"\n")
	}
	return "kin-shim-src-" + hex.EncodeToString(h.Sum(nil))[:32], nil
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// BuildArgs are the go command's arguments that build the shim for goarch
// into out, stamped with hash: reproducible (no paths, no VCS stamp, no
// build id), so that the same toolchain builds the same bytes.
func BuildArgs(out, hash string) []string {
	return []string{"build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid= -X main.sourceHash=" + hash, "-o", out, Package}
}

// BuildEnv is the environment of that build for goarch.
func BuildEnv(goarch string) []string {
	return append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=")
}
