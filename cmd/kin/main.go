// Command kin is the kin daemon (kin serve) and its command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kin-agents/kin/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
