package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// clientAgentsGrants lists an agent's standing approvals on the server,
// as `keel agents grants` does locally.
func (a *app) clientAgentsGrants(cmd *cobra.Command, args []string) error {
	asJSON, cl, err := a.jsonClient(cmd)
	if err != nil {
		return err
	}
	list, err := cl.Grants(cmd.Context(), args[0])
	if err != nil {
		return err
	}
	return a.printGrants(list.Agent, list.Grants, asJSON)
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
