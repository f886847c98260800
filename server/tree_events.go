package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// treeEvents is the event stream of a run and its team
// (/v1/runs/{id}/events?tree=true): the run's own events from from, as
// runEvents sends them ("id: SEQ"), and every event of each of its
// children and their children from the first, without an id (their
// run_id names them; a stream resumed with Last-Event-ID sends them
// again: deduplicate by run_id and seq). A child is followed from the
// moment its child.spawned is read. A followed stream ends with the
// run's run.completed (its children were delivered before it), or when
// the client goes; ?follow=false ends after what is stored. Children the
// token may not read are left out. Events are checked against their hash
// chains as they are read.
func (h *Handler) treeEvents(ctx context.Context, out *sse, who *caller, id string, from int64, follow bool) error {
	hiders := map[string]func(journal.Event) journal.Event{} // by run (service.MemoryHider)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	guard := h.newTokenGuard(who)
	defer guard.stop()
	type item struct {
		e   journal.Event
		err error
	}
	ch := make(chan item, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	followed := map[string]bool{}
	// following holds the runs followed, true once their end was sent.
	following := map[string]bool{}
	allEnded := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ended := range following {
			if !ended {
				return false
			}
		}
		return true
	}
	rootDone := false
	var watch func(run string, from int64)
	watch = func(run string, from int64) {
		mu.Lock()
		seen := followed[run]
		followed[run] = true
		mu.Unlock()
		if seen {
			return
		}
		if run != id {
			if _, err := h.svc.Run(ctx, who, run); err != nil {
				return // a child this token may not read
			}
		}
		mu.Lock()
		following[run] = false
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			send := func(e journal.Event, err error) bool {
				select {
				case ch <- item{e, err}:
					return err == nil
				case <-ctx.Done():
					return false
				}
			}
			// Children spawned before from are in the run's earlier
			// events: find them first.
			if from > 1 {
				if evs, err := h.rt.Store().Read(ctx, run, 1); err == nil {
					for _, e := range evs[:min(int(from-1), len(evs))] {
						if c := spawnedChild(&e); c != "" {
							watch(c, 1)
						}
					}
				}
			}
			if !follow {
				evs, err := journal.ReadVerified(ctx, h.rt.Store(), run)
				if err != nil {
					send(journal.Event{}, err)
					return
				}
				for _, e := range evs {
					if e.Seq < from {
						continue
					}
					if c := spawnedChild(&e); c != "" {
						watch(c, 1)
					}
					if !send(e, nil) {
						return
					}
				}
				return
			}
			for e, err := range journal.Follow(ctx, h.rt.Store(), run, from, h.opts.Poll) {
				if err == nil {
					if c := spawnedChild(&e); c != "" {
						watch(c, 1)
					}
				}
				if !send(e, err) {
					return
				}
			}
		}()
	}
	watch(id, from)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	end := func(reason string) {
		_ = out.send("", "end", fmt.Appendf(nil, "{\"reason\":%q}", reason))
		out.flush()
	}
	beat := time.NewTicker(h.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			if len(ch) == 0 {
				end("replayed")
				return nil
			}
		case <-guard.tick.C:
			if !guard.valid(ctx) {
				fmt.Fprint(out.w, revokedEnd)
				out.flush()
				return nil
			}
		case <-beat.C:
			if _, err := fmt.Fprint(out.w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			out.flush()
		case it := <-ch:
			if it.err != nil {
				end("error: " + h.streamError(it.err))
				return nil
			}
			hide := hiders[it.e.RunID]
			if hide == nil {
				hide = h.svc.MemoryHider(ctx, who, it.e.RunID)
				hiders[it.e.RunID] = hide
			}
			shown := hide(it.e)
			b, err := json.Marshal(&shown)
			if err != nil {
				return err
			}
			sid := ""
			if it.e.RunID == id {
				sid = strconv.FormatInt(it.e.Seq, 10)
			}
			if err := out.send(sid, string(it.e.Type), b); err != nil {
				return nil
			}
			if len(ch) == 0 {
				out.flush()
			}
			if journal.StatusOf(it.e.Type).Terminal() {
				mu.Lock()
				following[it.e.RunID] = true
				mu.Unlock()
			}
			if follow && it.e.RunID == id && it.e.Type == journal.RunCompleted {
				rootDone = true
			}
			// The run completes after its children were delivered: the
			// stream ends once their ends were sent too.
			if rootDone && allEnded() {
				end(string(journal.StatusCompleted))
				return nil
			}
		}
	}
}

// spawnedChild returns the child a child.spawned event names ("" for
// any other event).
func spawnedChild(e *journal.Event) string {
	if e.Type != journal.ChildSpawned {
		return ""
	}
	var p agent.ChildSpawned
	if json.Unmarshal(e.Payload, &p) != nil {
		return ""
	}
	return p.Child
}
