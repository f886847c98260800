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
	return fmt.Errorf("%w: the runs of %s could stop to ask for approval (policy %s asks) with nobody to answer: name a notification sink (--notify NAME) or give approvals a timeout and a default decision (--approval-timeout 1h --approval-default deny, or [approval] in the policy file)", ErrInvalid, what, p.Name())
}
