package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
)

// ExternalCall is one external call made with a credential (a line of
// keel audit calls): the credential given to the call, with the gate's
// decision on that call and how the call ended.
type ExternalCall struct {
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

// CallsFilter selects external calls; an empty field selects all.
type CallsFilter struct {
	Agent, User, Run string
}

// ExternalCalls joins the credential.used events of the vault's stream
// with the runs' gate decisions: every call that got a credential, in the
// order of the stream, that f selects.
func ExternalCalls(ctx context.Context, store journal.Store, f *CallsFilter) ([]ExternalCall, error) {
	evs, err := journal.ReadVerified(ctx, store, credential.StreamID)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rt := agent.NewRuntime(store, nil)
	states := map[string]*agent.State{}
	var out []ExternalCall
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
		if (f.Agent != "" && u.Agent != f.Agent) || (f.User != "" && u.User != f.User) || (f.Run != "" && u.Run != f.Run) {
			continue
		}
		c := ExternalCall{Time: e.Time, Run: u.Run, Call: u.Call, Agent: u.Agent, User: u.User, Provider: u.Provider, Grant: u.Grant,
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
func describeCall(c *ExternalCall, st *agent.State) {
	for i := len(st.Turns) - 1; i >= 0; i-- {
		for _, call := range st.Turns[i].Calls {
			if call.ID != c.Call || call.Decision == nil {
				continue
			}
			c.Tool = call.Name
			c.Decision, c.Policies = string(call.Decision.Effect), call.Decision.Policies
			if call.Resolved != nil {
				c.Decision = fmt.Sprintf("ask → %s by %s", call.Resolved.Decision, by(call.Resolved.By))
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

func by(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
