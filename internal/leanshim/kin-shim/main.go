// Command kin-shim is the sandbox shim alone: what `kin sandbox-exec` does,
// in a binary that links nothing but internal/sandbox. The kin binary
// embeds it (package leanshim) and starts every agent through it, because
// starting the whole kin binary costs about 10 ms of CPU (its packages'
// initialisation and page faults) where this costs about 1.8 ms.
//
// It is built by `go generate ./internal/leanshim`; the built binaries are
// checked against this source by leanshim's tests.
package main

import (
	"os"

	"github.com/kin-agents/kin/internal/sandbox"
)

// sourceHash is stamped by the generator (-X): the hash of the source the
// binary was built from (leanshim.SourceHash), so that a test can tell a
// stale embedded binary from a fresh one.
var sourceHash = "unset"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--source-hash" {
		os.Stdout.WriteString(sourceHash + "\n")
		os.Exit(0)
	}
	if len(os.Args) < 2 || os.Args[1] != sandbox.Subcommand {
		os.Stderr.WriteString("kin-shim: the kin daemon starts agents through this; usage: kin-shim " + sandbox.Subcommand + " --spec JSON\n")
		os.Exit(sandbox.ExitCannotRun)
	}
	os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
}
