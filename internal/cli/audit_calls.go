package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

func (a *app) auditCallsCmd() *cobra.Command {
	var agentName, user, run string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "calls [--agent A] [--user U] [--run R]",
		Short: "Every external call made with a credential: agent, for whom, provider, scopes, the gate's decision",
		Long: `Joins the credential.used events of the vault's stream with the runs'
gate decisions: for every call that got a credential, which agent made it,
for which user, with which provider, grant and scopes, on which resource,
under which policy decision (and who approved it), and how it ended.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd.Context(), func(store journal.Store) error {
				calls, err := audit.ExternalCalls(cmd.Context(), store, &audit.CallsFilter{Agent: agentName, User: user, Run: run})
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					for _, c := range calls {
						if err := enc.Encode(c); err != nil {
							return err
						}
					}
					return nil
				}
				if len(calls) == 0 {
					fmt.Fprintln(a.stdout, "no external call used a credential")
					return nil
				}
				tw := tabwriter.NewWriter(tui.Esc(a.stdout), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TIME\tRUN\tCALL\tAGENT\tFOR\tPROVIDER\tREQUEST\tSCOPES\tDECISION\tRESULT")
				for _, c := range calls {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s %s\t%s\t%s\t%s\n", c.Time.Local().Format(time.DateTime), c.Run, c.Call, c.Agent,
						tui.OrDash(c.User), c.Provider, c.Method, c.Resource, strings.Join(c.Scopes, " "), c.Decision, tui.OrDash(c.Result))
				}
				return tw.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&agentName, "agent", "", "only this agent's calls")
	f.StringVar(&user, "user", "", "only calls on behalf of this user")
	f.StringVar(&run, "run", "", "only this run's calls")
	f.BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}
