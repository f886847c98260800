package tui

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// childWatch follows, for [Follow] without waiting (NoWait), the child
// runs of a team's lead on the server: a server's lead waits in its team
// call while a child waits for a person, so the lead's own stream says
// nothing of it; each child's events are read until it first stops, and
// a child that stops waiting for a person's approval ends the follow as
// keel run ends when its child does (exit 3, naming the child's call
// and how to decide it: [ChildWaits]).
type childWatch struct {
	srv    Server
	ctx    context.Context
	cancel context.CancelFunc
	// stopLead ends the lead's stream when a child waits.
	stopLead context.CancelFunc

	mu      sync.Mutex
	seen    map[string]bool
	waiting []*agent.State
}

func newChildWatch(ctx context.Context, srv Server, stopLead context.CancelFunc) *childWatch {
	w := &childWatch{srv: srv, stopLead: stopLead, seen: map[string]bool{}}
	w.ctx, w.cancel = context.WithCancel(ctx)
	return w
}

// children watches the children of lead st not delivered yet (those
// watched already are not watched again).
func (w *childWatch) children(st *agent.State) {
	if w == nil {
		return
	}
	for _, c := range st.Children {
		w.mu.Lock()
		seen := w.seen[c.ID]
		w.seen[c.ID] = true
		w.mu.Unlock()
		if !seen && c.Delivered == nil {
			go w.watch(c.ID)
		}
	}
}

// watch reads child id's events: its history, then on until each stop,
// until it waits for a person's approval (then the lead's stream is
// ended), ends, or the watch stops.
func (w *childWatch) watch(id string) {
	st := &agent.State{RunID: id}
	history, missing := true, false
	for w.ctx.Err() == nil {
		for e, err := range w.srv.Events(w.ctx, id, &EventsParams{From: st.LastSeq + 1, NoFollow: history, UntilStopped: !history, GiveUp: followGiveUp}) {
			if err != nil && st.LastSeq == 0 && isNotFound(err) {
				// The lead journals child.spawned before the child's
				// run.created: look again shortly.
				missing = true
				break
			}
			if err != nil || st.Apply(&e) != nil {
				return
			}
		}
		if missing {
			missing = false
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(childPoll):
			}
			continue
		}
		history = false
		switch {
		case w.ctx.Err() != nil, st.Status.Terminal():
			return
		case st.Status == journal.StatusPaused && len(st.Pending()) > 0:
			w.mu.Lock()
			w.waiting = append(w.waiting, st)
			w.mu.Unlock()
			w.stopLead()
			return
		}
	}
}

// childPoll is how often a child's journal is looked for until its
// run.created is there (the lead journals child.spawned first).
const childPoll = 200 * time.Millisecond

// isNotFound says err is a server's "no such run".
func isNotFound(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == api.CodeNotFound
}

// waits returns the children that wait for a person (nil: none, the
// lead's stream ended for its own reasons).
func (w *childWatch) waits() []*agent.State {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// stop ends every watch.
func (w *childWatch) stop() {
	if w != nil {
		w.cancel()
	}
}
