// Command storybus is the single storybus binary: the operator, the bus and
// the producer tools, as subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/storybus/storybus/cmd/storybus/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
