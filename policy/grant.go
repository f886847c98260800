package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-run/keel/policy/bash"
)

// Grant scopes.
const (
	// ScopeRun grants apply to later calls of the same run.
	ScopeRun = "run"
	// ScopeAgent grants apply to every later call of the principal, in
	// any run.
	ScopeAgent = "agent"
)

// Grant is a remembered approval: a person approved a call and asked that
// matching parts be allowed from then on instead of asked about. Grants
// are narrow by construction: a grant names one tool and either the exact
// text of one part or a word prefix the person stated; it is never
// inferred from a compound command, it only turns an ask into an allow
// (never a deny), it never matches a bash part whose words are not all
// literals, and a prefix never matches a part that sets environment
// variables for its program, redirects a file or takes its arguments from
// a pipe or find, nor one whose words after the prefix make it write
// files, send a file's content, or run code Keel cannot read
// ([bash.RunsBeyond]: git push origin --receive-pack=./x.sh). A part's text includes the redirections
// around it, the pipeline that feeds it its arguments or script, and the
// find command around -exec ([Part].Text), so an exact grant covers no
// redirection, no pipe and no other find than the one approved.
type Grant struct {
	// ID identifies the grant (recorded in the decisions it makes).
	ID string `json:"id"`
	// Scope is [ScopeRun] or [ScopeAgent].
	Scope string `json:"scope"`
	// Tool is the tool the grant applies to.
	Tool string `json:"tool"`
	// Exact, when non-empty, matches a part whose Text is exactly this.
	Exact string `json:"exact,omitempty"`
	// Prefix, when non-empty, matches a bash part whose literal words
	// (Part.Words) start with these words.
	Prefix []string `json:"prefix,omitempty"`
	// By is who approved; Run and Call the approval it came from.
	By   string `json:"by,omitempty"`
	Run  string `json:"run,omitempty"`
	Call string `json:"call,omitempty"`
}

// ErrBadPrefix is wrapped by [GrantsFor]'s error when a stated prefix does
// not fit every part that asked.
var ErrBadPrefix = errors.New("policy: the prefix does not match the command")

// ErrNotRememberable is wrapped by [GrantsFor]'s error when a part cannot
// be remembered: it is not fully literal (what runs is only known at run
// time), or the decision has no parts.
var ErrNotRememberable = errors.New("policy: this call cannot be remembered")

// Matches reports whether g allows part p of a call of tool.
func (g *Grant) Matches(tool string, p *Part) bool {
	if g.Tool != tool {
		return false
	}
	literal := p.Words != nil || tool != "bash"
	switch {
	case g.Exact != "":
		return literal && p.Text == g.Exact
	case len(g.Prefix) > 0:
		return p.Words != nil && len(p.Assigns) == 0 && len(p.Redirects) == 0 && !p.Input &&
			len(p.Words) >= len(g.Prefix) && slices.Equal(p.Words[:len(g.Prefix)], g.Prefix) &&
			!bash.WritesBeyond(p.Command, p.Words, len(g.Prefix)) && !bash.SendsBeyond(p.Command, p.Words, len(g.Prefix)) &&
			!bash.RunsBeyond(p.Words, len(g.Prefix))
	}
	return false
}

// GrantsFor returns the grants that remember an approval of a call of tool
// decided d: one per part that asked (the exact part, or, when prefix is
// non-empty, that word prefix once). The grants get ids idBase#0,
// idBase#1.... It returns an error wrapping [ErrBadPrefix] when prefix is
// not a word prefix of every asking part, and [ErrNotRememberable] when an
// asking part is not fully literal or d has no parts.
func GrantsFor(idBase, scope, tool string, d *Decision, prefix []string) ([]Grant, error) {
	if scope != ScopeRun && scope != ScopeAgent {
		return nil, fmt.Errorf("policy: remember %q: want %q or %q", scope, ScopeRun, ScopeAgent)
	}
	if len(d.Parts) == 0 {
		return nil, fmt.Errorf("%w: the decision lists no parts", ErrNotRememberable)
	}
	if d.PartsOmitted > 0 {
		return nil, fmt.Errorf("%w: the call has more parts than Keel decides (%d not looked at)", ErrNotRememberable, d.PartsOmitted)
	}
	var out []Grant
	for i := range d.Parts {
		p := &d.Parts[i]
		if p.Effect != Ask {
			continue
		}
		if tool == "bash" && p.Words == nil {
			return nil, fmt.Errorf("%w: part %d (%s) is only known at run time", ErrNotRememberable, p.Index+1, clip(p.Text))
		}
		if p.Clipped {
			return nil, fmt.Errorf("%w: part %d (%s) is too long to remember", ErrNotRememberable, p.Index+1, clip(p.Text))
		}
		if len(prefix) > 0 {
			if len(p.Assigns) > 0 {
				return nil, fmt.Errorf("%w: part %d (%s) sets environment variables (%s); approve it without --prefix", ErrNotRememberable, p.Index+1, clip(p.Text), strings.Join(p.Assigns, ", "))
			}
			if len(p.Redirects) > 0 || p.Input {
				return nil, fmt.Errorf("%w: part %d (%s) redirects files or takes its arguments from a pipe or find; approve it without --prefix", ErrNotRememberable, p.Index+1, clip(p.Text))
			}
			if p.Words == nil || len(p.Words) < len(prefix) || !slices.Equal(p.Words[:len(prefix)], prefix) {
				return nil, fmt.Errorf("%w: %q is not a prefix of part %d (%s)", ErrBadPrefix, strings.Join(prefix, " "), p.Index+1, clip(p.Text))
			}
			continue
		}
		out = append(out, Grant{Scope: scope, Tool: tool, Exact: p.Text})
	}
	if len(prefix) > 0 {
		out = []Grant{{Scope: scope, Tool: tool, Prefix: slices.Clone(prefix)}}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no part of the call asked for approval", ErrNotRememberable)
	}
	for i := range out {
		out[i].ID = fmt.Sprintf("%s#%d", idBase, i)
	}
	return out, nil
}

func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
