package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/journal"
)

// Resumption is a person's resume of a run that another process will
// execute (keel serve --temporal hands runs to keel workers): what
// [ExecParams] carries to [Runtime.Execute] for a resume.
type Resumption struct {
	// Message, if set, is journaled with the resume (a completed run
	// needs one: a follow-up).
	Message string
	// By and Token name the person and their API token.
	By, Token string
	// Limits, Settings and ContextWindow replace the run's from now on
	// (nil or zero: unchanged).
	Limits        *Limits
	Settings      *Settings
	ContextWindow int
}

// JournalResume journals run.resumed with r's changes, and r's message
// in the same append, as Execute does when it starts a resume, without
// executing the run: the process that executes it next (a worker's
// Execute) continues from the journal, the changes folded into its
// state. It holds the run's lease for the append, so a run some process
// executes is refused with [ErrRunBusy]; a completed run without a
// message with [ErrRunCompleted].
func (rt *Runtime) JournalResume(ctx context.Context, runID string, r *Resumption) (*State, error) {
	if l, ok := rt.store.(journal.Locker); ok {
		unlock, err := l.Lock(ctx, runID)
		if err != nil {
			if errors.Is(err, journal.ErrLocked) {
				return nil, fmt.Errorf("agent: resume run %s: %w: %v", runID, ErrRunBusy, err)
			}
			return nil, fmt.Errorf("agent: resume run %s: %w", runID, err)
		}
		defer unlock()
	}
	st, _, err := rt.Load(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("agent: resume run %s: %w", runID, err)
	}
	followUp := st.Status == journal.StatusCompleted
	if followUp && r.Message == "" {
		return nil, fmt.Errorf("agent: resume run %s: %w", runID, ErrRunCompleted)
	}
	if err := childEnded(st); err != nil {
		return nil, fmt.Errorf("agent: resume run %s: %w", runID, err)
	}
	settings := r.Settings
	if settings != nil && *settings == st.Settings {
		settings = nil
	}
	resumed := &RunResumed{ContextWindow: r.ContextWindow, Limits: r.Limits, Settings: settings, FollowUp: followUp, By: r.By, Token: r.Token}
	drafts := []journal.Draft{{Type: journal.RunResumed, Time: rt.clock(), Payload: marshal(resumed)}}
	if r.Message != "" {
		drafts = append(drafts, journal.Draft{Type: journal.UserMessage, Time: rt.clock(), Payload: marshal(&UserMessage{Content: r.Message, By: r.By, Token: r.Token})})
	}
	evs, err := rt.append(context.WithoutCancel(ctx), runID, st.LastSeq, drafts...)
	if err != nil {
		if errors.Is(err, journal.ErrConflict) {
			return nil, fmt.Errorf("agent: resume run %s: %w (%v)", runID, ErrRunBusy, err)
		}
		return nil, fmt.Errorf("agent: resume run %s: %w", runID, err)
	}
	for i := range evs {
		if err := st.Apply(&evs[i]); err != nil {
			return nil, fmt.Errorf("agent: resume run %s: fold: %w", runID, err)
		}
	}
	return st, nil
}
