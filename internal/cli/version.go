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
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return describeBuild(Version, info)
}

// describeBuild is versionString for given build information (nil when
// the binary carries none). A binary installed with `go install
// module@version` names that version; one built without version control
// stamping says so, since "dev" alone names no build.
func describeBuild(version string, info *debug.BuildInfo) string {
	if info == nil {
		return version + " (" + runtime.Version() + ")"
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
		return fmt.Sprintf("%s (commit %s%s, %s)", version, rev, modified, info.GoVersion)
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return fmt.Sprintf("%s (module %s, %s)", version, v, info.GoVersion)
	}
	return fmt.Sprintf("%s (commit unknown: built without version control stamping, as with -buildvcs=false or outside a git checkout; %s)", version, info.GoVersion)
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
