package schedule

import (
	"fmt"
	"time"

	"github.com/keel-run/keel/policy"
)

// CheckUnattended refuses the runs of a schedule or trigger that could
// stop to ask a person with nobody to answer: when the policy p can ask
// (an @ask policy), the setup must name notification sinks (someone is
// told, and answers from the inbox or the link) or an approval timeout
// with its default decision (timeout > 0). what names the setup in the
// error ("schedule nightly").
func CheckUnattended(what string, p *policy.Engine, timeout time.Duration, sinks []string) error {
	if p == nil || !p.CanAsk() || timeout > 0 || len(sinks) > 0 {
		return nil
	}
	return fmt.Errorf("%w: the runs of %s could stop to ask for approval (policy %s asks) with nobody to answer: name a notification sink (--notify NAME) or give approvals a timeout and a default decision ([approval] in the policy file)", ErrInvalid, what, p.Name())
}

// Grant is what [CredentialWarnings] needs of a credential of the
// schedule's agent and user (Keel's wiring converts the vault's grants).
type Grant struct {
	Provider string
	// Status is "active", "expired" (a person must authorize again) or
	// "revoked".
	Status string
	// Expiry is when the access token expires (zero: never, or unknown);
	// Refreshable says whether Keel can renew it without a person (a
	// refresh token, or client credentials).
	Expiry      time.Time
	Refreshable bool
}

// CredentialWarnings reports the credentials the runs of a schedule will
// miss: for each provider its runs use, none granted, one a person must
// authorize again, or one that expires before the next fire (next) and
// cannot be renewed without a person. Creation shows them, and so does
// the schedule list; a run that meets one waits in auth.required (and
// its sinks are told).
func CredentialWarnings(providers []string, grants []Grant, agent string, next time.Time) []string {
	var out []string
	for _, p := range providers {
		var best *Grant
		for i := range grants {
			g := &grants[i]
			if g.Provider != p {
				continue
			}
			if best == nil || g.Status == "active" && best.Status != "active" {
				best = g
			}
		}
		switch {
		case best == nil:
			out = append(out, fmt.Sprintf("no credential of %s for agent %s: connect one before the next fire (keel auth connect %s --agent %s)", p, agent, p, agent))
		case best.Status != "active":
			out = append(out, fmt.Sprintf("the credential of %s for agent %s is %s: authorize it again (keel auth connect %s --agent %s)", p, agent, best.Status, p, agent))
		case !best.Refreshable && !best.Expiry.IsZero() && !next.IsZero() && best.Expiry.Before(next):
			out = append(out, fmt.Sprintf("the credential of %s for agent %s expires at %s, before the next fire at %s, and cannot be renewed without a person", p, agent, best.Expiry.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339)))
		}
	}
	return out
}
