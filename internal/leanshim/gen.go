//go:build ignore

// gen builds the lean shim for every target into this directory:
// go generate ./internal/leanshim
package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/kin-agents/kin/internal/leanshim/shimsrc"
)

func main() {
	hash, err := shimsrc.Hash(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, arch := range shimsrc.Targets {
		cmd := exec.Command("go", shimsrc.BuildArgs(shimsrc.FileName(arch), hash)...)
		cmd.Env = shimsrc.BuildEnv(arch)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build the shim for %s: %v\n", arch, err)
			os.Exit(1)
		}
		fmt.Println(shimsrc.FileName(arch), hash)
	}
}
