package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionString is Version, followed, when the binary was built from a
// git checkout, by the commit it was built from (and "modified" when the
// tree had uncommitted changes), and the Go version: what a bug report
// needs to name the build.
func versionString() string {
	s := Version
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return s + " (" + runtime.Version() + ")"
	}
	var rev, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return fmt.Sprintf("%s (commit %s%s, %s)", s, rev, modified, info.GoVersion)
	}
	return fmt.Sprintf("%s (%s)", s, info.GoVersion)
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print keel's version, the commit it was built from and its Go version",
		Args:  cobra.NoArgs,
		// Needs no journal and no configuration.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(a.stdout, "keel version "+versionString())
			return err
		},
	}
}
