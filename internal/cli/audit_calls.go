package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// externalCall is one line of keel audit calls: a credential given to a
// call, with the gate's decision on that call.
type externalCall struct {
	Time     time.Time `json:"time"`
	Run      string    `json:"run"`
	Call     string    `json:"call"`
	Tool     string    `json:"tool,omitempty"`
	Agent    string    `json:"agent"`
	User     string    `json:"user,omitempty"`
	Provider string    `json:"provider"`
	Grant    string    `json:"grant"`
	Method   string    `json:"method,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Scopes   []string  `json:"scopes"`
	// Decision is the gate's (allow, or ask and who approved).
	Decision string   `json:"decision"`
	Policies []string `json:"policies,omitempty"`
	// Result says whether the call's result was an error.
	Result    string `json:"result,omitempty"`
	TokenHash string `json:"token_hash"`
}

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
				calls, err := externalCalls(cmd.Context(), store, agentName, user, run)
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
						orDash(c.User), c.Provider, c.Method, c.Resource, strings.Join(c.Scopes, " "), c.Decision, orDash(c.Result))
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

func externalCalls(ctx context.Context, store journal.Store, agentName, user, run string) ([]externalCall, error) {
	evs, err := journal.ReadVerified(ctx, store, credential.StreamID)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rt := agent.NewRuntime(store, nil)
	states := map[string]*agent.State{}
	var out []externalCall
	for _, e := range evs {
		if e.Type != credential.EventUsed {
			continue
		}
		var u struct {
			Grant, Provider, Agent, User, Run, Call, Method, Resource string
			Scopes                                                    []string
			TokenHash                                                 string `json:"token_hash"`
		}
		if err := json.Unmarshal(e.Payload, &u); err != nil {
			return nil, fmt.Errorf("credential.used at %d: %w", e.Seq, err)
		}
		if (agentName != "" && u.Agent != agentName) || (user != "" && u.User != user) || (run != "" && u.Run != run) {
			continue
		}
		c := externalCall{Time: e.Time, Run: u.Run, Call: u.Call, Agent: u.Agent, User: u.User, Provider: u.Provider, Grant: u.Grant,
			Method: u.Method, Resource: u.Resource, Scopes: u.Scopes, TokenHash: u.TokenHash, Decision: "(run not found)"}
		st, ok := states[u.Run]
		if !ok {
			st, _, err = rt.Load(ctx, u.Run)
			if err != nil {
				st = nil
			}
			states[u.Run] = st
		}
		if st != nil {
			describeCall(&c, st)
		}
		out = append(out, c)
	}
	return out, nil
}

// describeCall fills in the gate's decision and the outcome of c's call.
func describeCall(c *externalCall, st *agent.State) {
	for i := len(st.Turns) - 1; i >= 0; i-- {
		for _, call := range st.Turns[i].Calls {
			if call.ID != c.Call || call.Decision == nil {
				continue
			}
			c.Tool = call.Name
			c.Decision, c.Policies = string(call.Decision.Effect), call.Decision.Policies
			if call.Resolved != nil {
				c.Decision = fmt.Sprintf("ask → %s by %s", call.Resolved.Decision, orDash(call.Resolved.By))
			}
			if call.Finished != nil {
				c.Result = "ok"
				if call.Finished.IsError {
					c.Result = "error"
				}
			}
			return
		}
	}
}
