package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

func (a *app) sandboxCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Short: "Inspect the sandbox on this machine"}
	cmd.AddCommand(&cobra.Command{
		Use:   "info",
		Short: "Create a throwaway sandbox and print which isolation mechanisms apply here",
		Long: `info creates a sandbox on an empty temporary workspace and reports what this
machine enforces: namespaces, the identity mapping, how each resource limit
is applied (cgroup v1, cgroup v2 or rlimit), seccomp, Landlock and the
network. Keel refuses to run tools if the sandbox cannot be created.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := linux.Available(); err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "keel-sandbox-info-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			sb, err := linux.New(&sandbox.Spec{Workspace: dir, Limits: sandbox.Limits{Memory: 1 << 30, Processes: 256}}, nil)
			if err != nil {
				return err
			}
			defer sb.Close()
			fmt.Fprintln(a.stdout, sb.Mechanisms().String())
			return nil
		},
	})
	return cmd
}

// sandboxKind validates --sandbox and applies the default.
func (a *app) sandboxKind(flag string) (string, error) {
	k, from := flag, ""
	if k == "" && a.cfg != nil {
		k, from = a.cfg.Sandbox, a.configFile()
	}
	if k == "" {
		k = "linux"
	}
	switch k {
	case "linux", "none":
		return k, nil
	}
	if from != "" {
		return "", usagef("sandbox = %q in %s: want linux or none", k, from)
	}
	return "", usagef("--sandbox %q: want linux or none", k)
}
