// Command keel is the Keel agent runtime's command-line interface: run an
// agent on a workspace, inspect and resume runs, serve the team API.
// See README.md, or run `keel help`.
package main

import (
	"context"
	"os"

	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/sandbox/linux"
)

func main() {
	// When this process was re-executed as a sandbox's init, Init runs the
	// sandbox side and never returns.
	linux.Init()
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
