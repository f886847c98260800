package server

import (
	"testing"

	"github.com/keel-run/keel/internal/view"
)

// The web UI's timeline and conversation say how they show every event
// type (a new one fails here until they do).
func TestEveryEventTypeRendered(t *testing.T) {
	if err := view.Check(timelineRows); err != nil {
		t.Errorf("timelineRows: %v", err)
	}
	if err := view.Check(convRows); err != nil {
		t.Errorf("convRows: %v", err)
	}
}
