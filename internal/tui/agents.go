package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// Agents prints keel agents list to w: JSON lines, or a table.
func Agents(w io.Writer, agents []identity.Agent, asJSON bool) error {
	if asJSON {
		return JSONLines(w, agents)
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tKIND\tSTATUS\tCREATED\tGRANTS\tDESCRIPTION")
	for _, ag := range agents {
		status, created := "active", "built in"
		if ag.Revoked {
			status = "revoked " + ag.RevokedAt.Local().Format("2006-01-02 15:04")
		}
		switch {
		case !ag.Builtin && ag.Created.IsZero():
			created = "with its parent" // a child agent's identity
		case !ag.Builtin:
			created = ag.Created.Local().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", ag.Name, ag.Kind, status, created, len(ag.Grants), Cell(agent.Clip(agent.OneLine(ag.Description), 50)))
	}
	return tw.Flush()
}

// Agent prints keel agents show to out.
func Agent(out io.Writer, ag *identity.Agent) {
	w := Esc(out)
	fmt.Fprintf(w, "agent %s (%s)\n", ag.Name, ag.Kind)
	if ag.Description != "" {
		fmt.Fprintf(w, "  %s\n", ag.Description)
	}
	if ag.Revoked {
		fmt.Fprintf(w, "REVOKED %s by %s: %s\n", ag.RevokedAt.Local().Format("2006-01-02 15:04"), ag.RevokedBy, ag.RevokeReason)
	} else if !ag.RestoredAt.IsZero() {
		fmt.Fprintf(w, "restored %s by %s after a revocation\n", ag.RestoredAt.Local().Format("2006-01-02 15:04"), ag.RestoredBy)
	}
	if c := ag.Connectors; c != nil {
		if len(c.MCP)+len(c.SQL)+len(c.OpenAPI) == 0 {
			fmt.Fprintf(w, "connectors: none\n")
		}
		for _, l := range []struct {
			kind    string
			entries []string
		}{{"mcp", c.MCP}, {"sql", c.SQL}, {"openapi", c.OpenAPI}} {
			for _, e := range l.entries {
				fmt.Fprintf(w, "%s: %s\n", l.kind, e)
			}
		}
	}
	fmt.Fprintf(w, "standing approvals: %d\n", len(ag.Grants))
	for _, g := range ag.Grants {
		fmt.Fprintf(w, "  %s\n", grantLine(g))
	}
	if len(ag.Grants) > 0 {
		fmt.Fprintf(w, "remove one with: keel agents ungrant %s GRANT\n", ag.Name)
	}
}

// grantLine describes a standing approval on one line.
func grantLine(g policy.Grant) string {
	what := "exactly " + agent.OneLine(g.Exact)
	if len(g.Prefix) > 0 {
		what = "commands starting " + strings.Join(g.Prefix, " ")
	}
	return fmt.Sprintf("%s %s: %s (approved by %s in run %s)", g.ID, g.Tool, what, g.By, g.Run)
}

// Grants prints an agent's standing approvals to w: JSON lines, or a
// table (or a sentence when there are none). Local and --server output
// are the same.
func Grants(w io.Writer, agentName string, grants []policy.Grant, asJSON bool) error {
	if asJSON {
		return JSONLines(w, grants)
	}
	if len(grants) == 0 {
		fmt.Fprintf(w, "agent %s has no standing approvals\n", agentName)
		return nil
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tTOOL\tMATCHES\tBY\tRUN")
	for _, g := range grants {
		what := "exactly: " + g.Exact
		if len(g.Prefix) > 0 {
			what = "starting: " + strings.Join(g.Prefix, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.ID, g.Tool, Cell(agent.Clip(what, 70)), Cell(g.By), g.Run)
	}
	return tw.Flush()
}

// AgentOf is the API's agent as the directory has it, with its standing
// approvals grants (the API's agent only counts them).
func AgentOf(ag api.Agent, grants []policy.Grant) identity.Agent {
	out := identity.Agent{Name: ag.Name, Kind: identity.Kind(ag.Kind), Description: ag.Description, Created: ag.Created, CreatedBy: ag.CreatedBy,
		Builtin: ag.Builtin, Revoked: ag.Revoked, RevokedBy: ag.RevokedBy, RevokeReason: ag.RevokeReason, RestoredBy: ag.RestoredBy, Grants: grants}
	if ag.RevokedAt != nil {
		out.RevokedAt = *ag.RevokedAt
	}
	if ag.RestoredAt != nil {
		out.RestoredAt = *ag.RestoredAt
	}
	if c := ag.Connectors; c != nil {
		out.Connectors = &identity.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	return out
}
