// Package leanshim holds the lean sandbox shim (./kin-shim) built for each
// target and embedded, and installs it where agents may execute it.
//
// Every agent starts through the sandbox shim (package sandbox): it applies
// the agent's Landlock rules and limits, then execs the agent's command. The
// kin binary itself can be that shim (`kin sandbox-exec`), but starting it
// costs about 10 ms of CPU, most of it the initialisation of the packages a
// daemon, a CLI and a dashboard need, and page faults in a 40 MB binary.
// The lean shim links internal/sandbox alone and starts in about 1.8 ms, so
// a burst of spawns is not bounded by the shims' own start.
//
// The binaries are generated (go generate ./internal/leanshim: gen.go) and
// committed, so that `go run ./cmd/kin` and `go install` give one binary
// with the shim inside. Each is stamped with the hash of the source it was
// built from (shimsrc.Hash); the tests fail when an embedded binary does
// not carry the hash of the source in the tree, and, where the toolchain is
// the one that built it, when rebuilding does not give the same bytes.
package leanshim

//go:generate go run gen.go

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

//go:embed kin-shim-linux-*
var binaries embed.FS

// Binary is the embedded shim for goarch; false where none is embedded.
func Binary(goarch string) ([]byte, bool) {
	b, err := binaries.ReadFile("kin-shim-linux-" + goarch)
	return b, err == nil
}

// Name is the file Install writes in its directory.
const Name = ".sandbox-shim"

// Install writes the shim for this machine into dir as Name (mode 0755),
// unless the file there already holds it, and returns its path. It writes
// a temporary file and renames it into place, so that a shim being
// executed is never changed. It returns an error wrapping
// errors.ErrUnsupported where no shim is embedded for this architecture.
func Install(dir string) (string, error) {
	bin, ok := Binary(runtime.GOARCH)
	if !ok {
		return "", fmt.Errorf("leanshim: no shim embedded for %s: %w", runtime.GOARCH, errors.ErrUnsupported)
	}
	dst := filepath.Join(dir, Name)
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, bin) {
		// Kept only where nobody else may rewrite it in place later:
		// the daemon's own file, with no other name.
		if st, err := os.Lstat(dst); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o755 && ownedAlone(st) {
			return dst, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("leanshim: %w", err)
	}
	tmp, err := os.CreateTemp(dir, Name+".*.new")
	if err != nil {
		return "", fmt.Errorf("leanshim: %w", err)
	}
	_, err = tmp.Write(bin)
	if err == nil {
		err = tmp.Chmod(0o755) // whatever the umask is
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("leanshim: install %s: %w", dst, err)
	}
	return dst, nil
}

// ownedAlone reports whether st is a file of this process's user with one
// link: no other user, and no other name, can change what it holds.
func ownedAlone(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid() && sys.Nlink == 1
}
