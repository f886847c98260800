package telemetry

import (
	"testing"

	"github.com/keel-run/keel/internal/view"
)

// The span derivation says what it derives from every event type (a new
// one fails here until it does).
func TestEveryEventTypeDerived(t *testing.T) {
	if err := view.Check(derivers); err != nil {
		t.Errorf("derivers: %v", err)
	}
}
