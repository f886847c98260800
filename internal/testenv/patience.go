package testenv

import (
	"testing"
	"time"
)

// patience is how long a test waits at most for something a real program
// does in its own time (a server to listen, spans to arrive, a process to
// appear or die). It is no timing assertion: on a loaded machine a start
// that takes 200 ms when quiet takes tens of seconds, and a test must not
// fail for that; the bound only turns a real hang into a failure that
// names what never came, before the test binary's -timeout kills every
// test of the package without saying.
const patience = 5 * time.Minute

// Patience returns the deadline of such a wait: five minutes from now, or
// earlier when the test binary's own deadline (its -timeout) is nearer,
// with a margin for the test to report.
func Patience(tb testing.TB) time.Time {
	d := time.Now().Add(patience)
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := t.Deadline(); ok {
			end = end.Add(-30 * time.Second)
			if end.Before(d) {
				d = end
			}
		}
	}
	return d
}
