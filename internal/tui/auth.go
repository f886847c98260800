package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/connect"
	"github.com/keel-run/keel/server/api"
)

// Providers prints keel auth providers list: a table of the registered
// authorization servers.
func Providers(w io.Writer, ps []credential.Provider) error {
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tISSUER\tCLIENT\tSCOPES\tRESOURCES")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Issuer, p.ClientID, strings.Join(p.Scopes, " "), strings.Join(p.Resources, " "))
	}
	return tw.Flush()
}

// OAuthGrants prints keel auth list: a table of the vault's grants
// (never a token), or a sentence when there are none.
func OAuthGrants(w io.Writer, gs []credential.Grant) error {
	if len(gs) == 0 {
		fmt.Fprintln(w, "no grants (keel auth connect PROVIDER makes one)")
		return nil
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tAGENT\tUSER\tPROVIDER\tSTATUS\tSCOPES\tEXPIRES\tREFRESHES")
	for _, g := range gs {
		exp := "-"
		if !g.Expiry.IsZero() {
			exp = g.Expiry.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%d rotated)\n", g.ID, g.Agent, OrDash(g.User), g.Provider, g.Status, strings.Join(g.Scopes, " "), exp, g.Refreshes, g.Rotations)
	}
	return tw.Flush()
}

// Revoked prints the grants keel auth revoke revoked.
func Revoked(w io.Writer, gs []credential.Grant) {
	for _, g := range gs {
		fmt.Fprintf(w, "revoked %s (%s, %s for %s)\n", g.ID, g.Provider, g.Agent, OrDash(g.User))
	}
	if len(gs) == 0 {
		fmt.Fprintln(w, "no active grant matched")
	}
}

// Connected prints what keel auth connect did.
func Connected(w io.Writer, c *connect.Connected) {
	g := c.Grant
	fmt.Fprintf(w, "connected: grant %s of %s for %s, scopes %s\n", g.ID, g.Provider, connect.WhoFor(g.Agent, g.User), strings.Join(g.Scopes, " "))
	Resumable(w, c.Resumed)
}

// Resumable says how many waiting calls may now run, if any.
func Resumable(w io.Writer, n int) {
	if n > 0 {
		fmt.Fprintf(w, "%d waiting call(s) may now run (keel runs resume RUN)\n", n)
	}
}

// AuthWaits prints keel auth waits: each call of the local journal that
// waits for an authorization, and the command that ends its wait.
func AuthWaits(w io.Writer, waits []agent.PendingAuth) {
	if len(waits) == 0 {
		fmt.Fprintln(w, "no call waits for an authorization")
		return
	}
	for _, aw := range waits {
		hint := "keel auth connect --run " + aw.RunID
		if aw.Issuer == "" && aw.Hint != "" {
			hint = aw.Hint // not an OAuth grant: a secret a person stores
		}
		fmt.Fprintf(Esc(w), "run %s call %s: %s\n  run: %s\n", aw.RunID, aw.CallID, aw.Error(), hint)
	}
}

// ServerAuthWaits prints keel --server URL auth waits.
func ServerAuthWaits(w io.Writer, waits []api.AuthWait, server string) {
	if len(waits) == 0 {
		fmt.Fprintln(w, "no call waits for an authorization")
		return
	}
	for _, aw := range waits {
		fmt.Fprintf(Esc(w), "run %s call %s: authorization required (%s): %s needs a grant of provider %s with scopes %s\n  run: keel --server %s auth connect --run %s (or Connect in the web UI's inbox)\n",
			aw.RunID, aw.CallID, aw.Reason, connect.WhoFor(aw.Agent, aw.User), aw.Provider, strings.Join(aw.Scopes, " "), server, aw.RunID)
	}
}

// AuthStarted prints the URL a person opens to authorize what a run on
// a team server waits for (keel --server URL auth connect).
func AuthStarted(w io.Writer, st *api.AuthStarted, server string) {
	fmt.Fprintf(Esc(w), "open this URL in a browser to authorize %s at %s:\n\n  %s\n\nthe server completes it at %s (until %s) and continues run %s: keel --server %s runs show %s\n",
		connect.WhoFor(st.Agent, st.User), st.Provider, st.URL, st.RedirectURL, st.Expires.Local().Format(time.Kitchen), st.RunID, server, st.RunID)
}

// Secrets prints keel auth secret list (never a value).
func Secrets(w io.Writer, ss []credential.Secret) error {
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGENT\tUSER\tSTORED\tBY")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Agent, s.User, s.Time.Format("2006-01-02 15:04"), s.By)
	}
	return tw.Flush()
}
