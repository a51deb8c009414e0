package leanshim_test

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/leanshim"
	"github.com/kin-agents/kin/internal/leanshim/shimsrc"
	"github.com/kin-agents/kin/internal/sandbox"
)

const regenerate = "the embedded shim is stale: run `go generate ./internal/leanshim` and commit the binaries"

// TestEmbeddedShimsAreBuiltFromThisSource: every embedded binary carries
// the hash of the shim's source as it is in the tree (its Go files, the
// versions of the modules it links).
func TestEmbeddedShimsAreBuiltFromThisSource(t *testing.T) {
	want, err := shimsrc.Hash(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range shimsrc.Targets {
		bin, ok := leanshim.Binary(arch)
		if !ok {
			t.Errorf("no shim embedded for %s: %s", arch, regenerate)
			continue
		}
		if !bytes.Contains(bin, []byte(want)) {
			t.Errorf("the shim for %s was not built from this source (want stamp %s): %s", arch, want, regenerate)
		}
	}
}

// TestEmbeddedShimIsReproducible rebuilds the shim for this machine with
// the generator's flags and compares the bytes, where this toolchain is
// the one that built the embedded binary (another one builds other bytes
// from the same source; the hash test above still holds the source).
func TestEmbeddedShimIsReproducible(t *testing.T) {
	bin, ok := leanshim.Binary(runtime.GOARCH)
	if !ok {
		t.Fatalf("no shim embedded for %s", runtime.GOARCH)
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	if info.GoVersion != runtime.Version() {
		t.Logf("the embedded shim was built by %s, this is %s: bytes not compared", info.GoVersion, runtime.Version())
		return
	}
	hash, err := shimsrc.Hash(".")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "shim")
	cmd := exec.Command("go", shimsrc.BuildArgs(out, hash)...)
	cmd.Env = shimsrc.BuildEnv(runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bin) {
		t.Fatalf("rebuilding the shim gives %d bytes that differ from the embedded %d: %s", len(got), len(bin), regenerate)
	}
}

// TestInstall writes the shim once, leaves a right one alone, replaces a
// wrong one, and the installed shim runs an agent's command restricted.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	p, err := leanshim.Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o755 || filepath.Base(p) != leanshim.Name {
		t.Fatalf("installed %s: %v, %v", p, st, err)
	}
	before := st.ModTime()
	if _, err := leanshim.Install(dir); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(p); !st2.ModTime().Equal(before) {
		t.Errorf("a second Install rewrote a right shim")
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho tampered\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := leanshim.Install(dir); err != nil {
		t.Fatal(err)
	}
	bin, _ := leanshim.Binary(runtime.GOARCH)
	if got, _ := os.ReadFile(p); !bytes.Equal(got, bin) {
		t.Fatalf("Install left a wrong shim in place")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.new"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// It is the shim: a command it runs cannot write outside its grants.
	if sandbox.ABI() == 0 {
		t.Fatalf("Landlock is not available on this kernel: the shim cannot be checked")
	}
	work := t.TempDir()
	outside := t.TempDir()
	args, err := sandbox.Args(sandbox.Spec{Restrict: true, RW: []string{work}, RO: sandbox.DefaultSystemRO(),
		Argv: []string{"/bin/sh", "-c", "echo in > " + work + "/ok; echo out > " + outside + "/no"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, append([]string{sandbox.Subcommand}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the restricted write outside should fail the command: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(work, "ok")); err != nil {
		t.Errorf("the granted write did not happen: %v (%s)", err, out)
	}
	if _, err := os.Stat(filepath.Join(outside, "no")); err == nil {
		t.Errorf("the shim let the command write outside its grants")
	}
	if !strings.Contains(string(out), "ermission denied") {
		t.Errorf("want the shell's permission error, got %q", out)
	}
}

// TestShimRefusesBadInvocation: without the subcommand it says what it is
// and exits 126, changing nothing.
func TestShimRefusesBadInvocation(t *testing.T) {
	p, err := leanshim.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "--spec", "{}").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != sandbox.ExitCannotRun || !strings.Contains(string(out), "usage: kin-shim") {
		t.Fatalf("want exit %d and the usage, got %v: %s", sandbox.ExitCannotRun, err, out)
	}
	out, err = exec.Command(p, sandbox.Subcommand, "--spec", "{not json").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != sandbox.ExitCannotRun || !strings.Contains(string(out), "kin sandbox:") {
		t.Fatalf("want exit %d and the shim's error, got %v: %s", sandbox.ExitCannotRun, err, out)
	}
}
