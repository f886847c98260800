package service

import (
	"context"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
)

// What an execution in this process does before it is journaled: the
// text of the model call in progress, as the provider streams it, with
// the tool calls it starts writing and its retries. The executing
// worker publishes it here (liveHub.trace, the execution's Trace hook);
// event streams of the run on this server subscribe and send it as
// ephemeral "delta" messages (api.Delta), never stored.
//
// Semantics: lossless within one model call and coalescing. The hub
// keeps the call's whole text (up to maxLiveText); a subscriber keeps a
// cursor into it and, when woken, sends everything after its cursor as
// one delta, so a slow reader gets fewer, larger deltas and nothing
// blocks the model's goroutine. A new call replaces the old one; a
// subscriber that joins (or rejoins) mid-call starts at offset 0, and
// one that joins after the call's event was journaled gets nothing of
// it. Streams send what is left of a call before its event (LiveSub.Next
// before each event), so a stream's deltas add up to the journaled
// text; a delta is stale once its stream has sent an event after the
// call's After.

// maxLiveText bounds the text the hub keeps of one model call; beyond
// it, the call's text arrives with its journaled event only.
const maxLiveText = 1 << 20

// liveHub holds the model call in progress of each run this process
// executes. Its methods are safe for concurrent use.
type liveHub struct {
	mu   sync.Mutex
	runs map[string]*liveRun
	// clock orders subscriptions and the closing of calls: a stream that
	// subscribes after a call's event was journaled gets none of it.
	clock uint64
}

// liveRun is one run's entry: its call in progress, if any, and the
// channel closed at its next change. An entry lives while the run has a
// call or a subscriber.
type liveRun struct {
	turn *liveTurn
	// outs are the outputs of the run's tool calls in progress, in the
	// order they started (live_output.go).
	outs    []*liveOutput
	subs    int
	changed chan struct{}
}

// liveTurn is one model call as it streams.
type liveTurn struct {
	after int64
	call  int
	text  []byte
	notes []liveNote
	full  bool // text reached maxLiveText
	// closed is the hub's clock when the call's event was journaled (or
	// its execution ended); 0 while it streams. A closed call is kept
	// for the streams that were following it, to send what they have
	// not sent yet before the event.
	closed uint64
}

// liveNote is a tool call started or a retry, at a point of the text.
type liveNote struct {
	at    int
	tool  string
	retry string
}

func newLiveHub() *liveHub { return &liveHub{runs: map[string]*liveRun{}} }

// entryLocked returns run id's entry, making it; l.mu is held.
func (l *liveHub) entryLocked(id string) *liveRun {
	r := l.runs[id]
	if r == nil {
		r = &liveRun{changed: make(chan struct{})}
		l.runs[id] = r
	}
	return r
}

// changeLocked wakes run r's subscribers; l.mu is held.
func (r *liveRun) changeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// dropLocked forgets run id's entry when nothing uses it; l.mu is held.
func (l *liveHub) dropLocked(id string, r *liveRun) {
	if r.subs == 0 && (r.turn == nil || r.turn.closed != 0) && r.outsClosed() {
		delete(l.runs, id)
	}
}

// closeLocked marks run r's call journaled; l.mu is held.
func (l *liveHub) closeLocked(r *liveRun) {
	if r.turn != nil && r.turn.closed == 0 {
		l.clock++
		r.turn.closed = l.clock
		r.changeLocked()
	}
}

// trace is an execution's per-operation hook (agent.ExecParams.Trace): a
// model call reports its text, tool calls and retries to the hub (and to
// any observer ctx already carries), which makes the provider stream.
func (l *liveHub) trace(ctx context.Context, op agent.Operation) context.Context {
	if op.CallID != "" {
		return l.traceCall(ctx, op)
	}
	if op.ModelCall == 0 {
		return ctx
	}
	t := &liveTurn{after: op.Seq, call: op.ModelCall}
	l.mu.Lock()
	r := l.entryLocked(op.RunID)
	r.turn = t
	r.outs = r.outs[:0:0] // the calls of the turn before are journaled
	r.changeLocked()
	l.mu.Unlock()
	prev := model.ObserverOf(ctx)
	add := func(f func()) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if r := l.runs[op.RunID]; r != nil && r.turn == t && t.closed == 0 {
			f()
			r.changeLocked()
		}
	}
	return model.WithObserver(ctx, &model.Observer{
		Text: func(s string) {
			prev.OnText(s)
			add(func() {
				if t.full || len(t.text)+len(s) > maxLiveText {
					t.full = true
					return
				}
				t.text = append(t.text, s...)
			})
		},
		Call: func(name string) {
			prev.OnCall(name)
			add(func() { t.notes = append(t.notes, liveNote{at: len(t.text), tool: name}) })
		},
		Retry: func(rt model.Retry) {
			prev.OnRetry(rt)
			add(func() { t.notes = append(t.notes, liveNote{at: len(t.text), retry: rt.String()}) })
		},
	})
}

// journaled is an execution's OnEvent hook: an event after the call's
// After is the call's own (or a stop), which closes it.
func (l *liveHub) journaled(e journal.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.runs[e.RunID]
	if r == nil {
		return
	}
	if r.turn != nil && e.Seq > r.turn.after {
		l.closeLocked(r)
	}
	if e.Type == journal.ToolFinished {
		l.closeOutputLocked(r, e.Payload)
	}
	l.dropLocked(e.RunID, r)
}

// end closes run id's call in progress: its execution ended.
func (l *liveHub) end(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.runs[id]; r != nil {
		l.closeLocked(r)
		l.closeOutputsLocked(r)
		l.dropLocked(id, r)
	}
}

// LiveSub is one event stream's cursor into a run's call in progress.
// It is used by one goroutine.
type LiveSub struct {
	l     *liveHub
	id    string
	since uint64 // the hub's clock at subscription
	turn  *liveTurn
	text  int // bytes of turn.text sent
	notes int // notes of turn sent
	// outs are the bytes of each call's output sent (live_output.go).
	outs map[*liveOutput]int64
}

// subscribe returns a cursor on run id; close it when the stream ends.
func (l *liveHub) subscribe(id string) *LiveSub {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entryLocked(id).subs++
	l.clock++
	return &LiveSub{l: l, id: id, since: l.clock}
}

func (s *LiveSub) Close() {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if r := s.l.runs[s.id]; r != nil {
		r.subs--
		s.l.dropLocked(s.id, r)
	}
}

// wait returns a channel closed at the run's next change. Ask it before
// next, so that no change in between is missed.
func (s *LiveSub) Wait() <-chan struct{} {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.l.entryLocked(s.id).changed
}

// next returns the deltas of the call in progress after the cursor, and
// moves it, for a stream whose newest event sent is seen: a call that
// started after an event the stream has not sent yet is held back (the
// stream sends that event first), and a call older than seen is stale
// and skipped.
func (s *LiveSub) Next(seen int64) []api.Delta {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	r := s.l.runs[s.id]
	if r == nil {
		return nil
	}
	out := s.outputsLocked(r, seen)
	if r.turn == nil {
		return out
	}
	t := r.turn
	if t != s.turn {
		s.turn, s.text, s.notes = t, 0, 0
		if t.closed != 0 && t.closed < s.since {
			// Journaled before this stream began: its event has it all.
			s.text, s.notes = len(t.text), len(t.notes)
			return out
		}
	}
	if t.after > seen {
		return out
	}
	if t.after < seen {
		s.text, s.notes = len(t.text), len(t.notes)
		return out
	}
	piece := func(end int) {
		if end > s.text {
			out = append(out, api.Delta{RunID: s.id, After: t.after, ModelCall: t.call, Offset: s.text, End: end, Text: string(t.text[s.text:end])})
			s.text = end
		}
	}
	for ; s.notes < len(t.notes); s.notes++ {
		n := t.notes[s.notes]
		piece(n.at)
		out = append(out, api.Delta{RunID: s.id, After: t.after, ModelCall: t.call, Offset: s.text, Tool: n.tool, Retry: n.retry})
	}
	piece(len(t.text))
	return out
}
