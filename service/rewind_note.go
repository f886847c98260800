package service

import (
	"fmt"

	"github.com/keel-run/keel/journal"
)

// RewindNote says what a rewind did to a run of status status beside
// its files, in the words of every front end (keel runs rewind in both
// forms, the API's Rewound.Note, the web UI's rewind card): a rewind
// puts back files only; the run keeps its status and its conversation
// (report 15, P10: "files restored to the checkpoint of event 2" on a
// completed run read as if the run had gone back to event 2).
func RewindNote(status string) string {
	if status == string(journal.StatusCompleted) {
		return "the run stays completed: only its files went back, not its conversation; a follow-up message continues it from its newest event on these files, and a fork at an earlier event runs it again from there"
	}
	return fmt.Sprintf("the run stays %s: only its files went back, not its conversation; resumed, it continues from its newest event on these files", status)
}
