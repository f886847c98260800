package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// clientGrantsMode gives `keel agents grants` and `keel agents ungrant`
// their server forms (GET /v1/agents/{id}/grants and POST
// /v1/agents/{id}/grants/{grant}/revoke), with the output of their local
// forms. It runs after clientMode, which refuses with --server every
// command it has no server form for, and takes precedence over that.
func (a *app) clientGrantsMode(root *cobra.Command) {
	forms := map[string]func(*cobra.Command, []string) error{
		"keel agents grants":  a.clientAgentsGrants,
		"keel agents ungrant": a.clientAgentsUngrant,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f, ok := forms[c.CommandPath()]; ok && c.RunE != nil {
			local := c.RunE
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if a.serverURL() == "" {
					return local(cmd, args)
				}
				return f(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// clientAgentsGrants lists an agent's standing approvals on the server,
// as `keel agents grants` does locally.
func (a *app) clientAgentsGrants(cmd *cobra.Command, args []string) error {
	fv := &flagValues{fs: cmd.Flags()}
	asJSON := fv.boolean("json")
	if fv.err != nil {
		return fv.err
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	list, err := cl.Grants(cmd.Context(), args[0])
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, g := range list.Grants {
			if err := enc.Encode(g); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list.Grants) == 0 {
		fmt.Fprintf(a.stdout, "agent %s has no standing approvals\n", list.Agent)
		return nil
	}
	tw := tabwriter.NewWriter(escWriter{a.stdout}, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tTOOL\tMATCHES\tBY\tRUN")
	for _, g := range list.Grants {
		what := "exactly: " + g.Exact
		if len(g.Prefix) > 0 {
			what = "starting: " + strings.Join(g.Prefix, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.ID, g.Tool, cell(clip(what, 70)), cell(g.By), g.Run)
	}
	return tw.Flush()
}

// clientAgentsUngrant removes a standing approval on the server, as `keel
// agents ungrant` does locally; the server records the token's person as
// who removed it (so --by is refused).
func (a *app) clientAgentsUngrant(cmd *cobra.Command, args []string) error {
	if err := only(cmd, "reason"); err != nil {
		return err
	}
	fv := &flagValues{fs: cmd.Flags()}
	reason := fv.str("reason")
	if fv.err != nil {
		return fv.err
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	if _, err := cl.Ungrant(cmd.Context(), args[0], args[1], reason); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "removed standing approval %s of agent %s\n", args[1], args[0])
	return nil
}
