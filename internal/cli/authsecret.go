package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/connect"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// authSecretCmd is keel auth secret: static credentials in the vault,
// such as a user's own database connection string (sql:NAME).
func (a *app) authSecretCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Static credentials in the vault (a user's database connection string)"}
	var agentName, user, file string
	set := &cobra.Command{
		Use:   "set NAME [--agent A] [--user U] [--file F]",
		Short: "Store a secret for an agent acting for a user (read from --file or standard input)",
		Long: `Set seals a secret under the vault key for (agent, user), for the tool that
needs it: sql:DATABASE is the connection string a database with
as_user = true (or --sql-as-user) uses for the user's statements. The value
is read from --file or standard input, never from the command line, and is
never printed or journaled (events carry its hash). Calls waiting for it
(keel auth waits) may run afterwards: keel runs resume RUN.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = os.Stdin
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, 64<<10))
			if err != nil {
				return err
			}
			value := strings.TrimSpace(string(b))
			if value == "" {
				return usagef("no secret on %s", map[bool]string{true: file, false: "standard input"}[file != ""])
			}
			if agentName == "" {
				agentName = identity.LocalAgent
			}
			return a.withVault(cmd.Context(), func(store journal.Store, v *credential.Vault) error {
				s, n, err := connect.StoreSecret(cmd.Context(), agent.NewRuntime(store, nil), v, args[0], agentName, user, value, a.person(""))
				if s != nil {
					fmt.Fprintf(a.stdout, "stored: secret %s for %s (%s)\n", s.Name, connect.WhoFor(s.Agent, s.User), s.Hash)
				}
				tui.Resumable(a.stdout, n)
				return err
			})
		},
	}
	set.Flags().StringVar(&agentName, "agent", "", "the agent the secret is for (default: "+identity.LocalAgent+")")
	set.Flags().StringVar(&user, "user", "", "the user an assistant agent acts for")
	set.Flags().StringVar(&file, "file", "", "read the secret from this file (default: standard input)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the stored secrets (never their values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(store journal.Store) error {
				v, err := credential.New(store, nil)
				if err != nil {
					return err
				}
				ss, err := v.Secrets(cmd.Context())
				if err != nil {
					return err
				}
				return tui.Secrets(a.stdout, ss)
			})
		},
	}
	var delAgent, delUser string
	del := &cobra.Command{
		Use:   "delete NAME [--agent A] [--user U]",
		Short: "Delete a stored secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if delAgent == "" {
				delAgent = identity.LocalAgent
			}
			return a.withStore(cmd.Context(), func(store journal.Store) error {
				v, err := credential.New(store, nil)
				if err != nil {
					return err
				}
				if err := v.DeleteSecret(cmd.Context(), args[0], delAgent, delUser, a.person("")); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted: secret %s for %s\n", args[0], connect.WhoFor(delAgent, delUser))
				return nil
			})
		},
	}
	del.Flags().StringVar(&delAgent, "agent", "", "the agent (default: "+identity.LocalAgent+")")
	del.Flags().StringVar(&delUser, "user", "", "the user")
	cmd.AddCommand(set, list, del)
	return cmd
}
