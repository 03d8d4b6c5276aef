// Command storybus is the single storybus binary: the operator, the bus and
// the producer tools, as subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// The image that `make image` builds from scratch holds no CA bundle.
	// This package gives crypto/x509 Mozilla's root certificates, compiled
	// into the binary, for when the system has none, so that the bus still
	// verifies an external NATS over tls://. Where the system has roots (a
	// CA bundle, or SSL_CERT_FILE or SSL_CERT_DIR set), those are used.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/storybus/storybus/cmd/storybus/cli"
)

func main() {
	// SIGHUP too: closing the terminal of `storybus dev` ends it gracefully,
	// so that it removes its temporary folders (a TLS key among them).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
