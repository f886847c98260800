package service

import (
	"context"
	"encoding/json"
	"unicode/utf8"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// The output of a run's tool calls as their commands print it (the
// tool's output stream, tool.WithLive), for the run page's running calls
// and API streams with ?deltas=true. Lossy by design, unlike a model
// call's text: the hub keeps the last maxLiveOutput bytes of each call
// (up to twice that between cuts),
// and a stream that falls further behind gets the tail, its offset past
// what it had (the page marks the gap). The journaled tool.finished,
// whose output is bounded and stored whole as an artifact, is the record.

// maxLiveOutput is how much of a running call's output the hub keeps.
const maxLiveOutput = 16 << 10

// liveOutput is one running call's output.
type liveOutput struct {
	id    string // the call
	after int64  // the run's newest event when the call started
	buf   []byte // the last bytes written, at most 2*maxLiveOutput
	total int64  // bytes written
	// closed is the hub's clock when the call's result was journaled (or
	// its execution ended); 0 while it runs.
	closed uint64
}

// traceCall gives a tool call's output to the hub (and to any live
// function ctx already has).
func (l *liveHub) traceCall(ctx context.Context, op agent.Operation) context.Context {
	o := &liveOutput{id: op.CallID, after: op.Seq}
	l.mu.Lock()
	r := l.entryLocked(op.RunID)
	r.outs = append(r.outs, o)
	l.mu.Unlock()
	prev := tool.LiveOf(ctx)
	return tool.WithLive(ctx, func(p []byte) {
		if prev != nil {
			prev(p)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if o.closed != 0 {
			return
		}
		o.total += int64(len(p))
		if len(p) >= maxLiveOutput {
			o.buf = append(o.buf[:0], p[len(p)-maxLiveOutput:]...)
		} else {
			o.buf = append(o.buf, p...)
			if len(o.buf) > 2*maxLiveOutput {
				o.buf = append(o.buf[:0], o.buf[len(o.buf)-maxLiveOutput:]...)
			}
		}
		if r := l.runs[op.RunID]; r != nil {
			r.changeLocked()
		}
	})
}

// closeOutputLocked closes the call whose tool.finished payload is p;
// l.mu is held.
func (l *liveHub) closeOutputLocked(r *liveRun, p json.RawMessage) {
	var f struct {
		CallID string `json:"call_id"`
	}
	if json.Unmarshal(p, &f) != nil {
		return
	}
	for _, o := range r.outs {
		if o.id == f.CallID && o.closed == 0 {
			l.clock++
			o.closed = l.clock
			r.changeLocked()
		}
	}
}

// closeOutputsLocked closes every call of r; l.mu is held.
func (l *liveHub) closeOutputsLocked(r *liveRun) {
	for _, o := range r.outs {
		if o.closed == 0 {
			l.clock++
			o.closed = l.clock
		}
	}
	r.changeLocked()
}

// outsClosed reports whether every call of r is closed.
func (r *liveRun) outsClosed() bool {
	for _, o := range r.outs {
		if o.closed == 0 {
			return false
		}
	}
	return true
}

// outputsLocked returns the output deltas of r's calls after the
// cursor, for a stream whose newest event is seen, and moves the cursor;
// s.l.mu is held. A call that started after an event the stream has not
// sent is held back; one whose result was journaled before the stream
// began is skipped. Pieces end at a rune boundary (a running call's last
// incomplete rune waits for its next write).
func (s *LiveSub) outputsLocked(r *liveRun, seen int64) []api.Delta {
	if s.outs == nil || len(s.outs) > 2*len(r.outs)+8 {
		keep := make(map[*liveOutput]int64, len(r.outs))
		for _, o := range r.outs {
			if n, ok := s.outs[o]; ok {
				keep[o] = n
			}
		}
		s.outs = keep
	}
	var out []api.Delta
	for _, o := range r.outs {
		if o.after > seen {
			continue
		}
		sent, known := s.outs[o]
		if !known && o.closed != 0 && o.closed < s.since {
			s.outs[o] = o.total
			continue
		}
		start := o.total - int64(len(o.buf))
		from := max(sent, start)
		if from >= o.total {
			continue
		}
		p := o.buf[from-start:]
		if from > sent {
			// Cut in the middle of the output: start at a rune.
			for i := 0; i < 3 && len(p) > 0 && !utf8.RuneStart(p[0]); i++ {
				p, from = p[1:], from+1
			}
		}
		if o.closed == 0 {
			p = p[:wholeRunes(p)]
		}
		if len(p) == 0 {
			continue
		}
		out = append(out, api.Delta{RunID: s.id, After: o.after, CallID: o.id, Offset: int(from), End: int(from) + len(p), Output: string(p)})
		s.outs[o] = from + int64(len(p))
	}
	return out
}

// wholeRunes returns the length of p without an incomplete rune at its
// end (at most three bytes held back).
func wholeRunes(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return len(p)
}
