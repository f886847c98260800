package server_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

func seqs(evs []journal.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

// The stream replays the journal byte for byte (hashes included), ends
// where asked, and a follower sees the run to its end across an approval.
func TestEventStream(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	// Following until stopped ends at the approval request.
	var live []journal.Event
	for ev, err := range e.admin.Events(ctx, run.ID, &client.EventsParams{UntilStopped: true}) {
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, ev)
	}
	if n := len(live); n == 0 || live[n-1].Type != journal.ApprovalRequested {
		t.Fatalf("until stopped: %d events, last %v", n, live)
	}
	if diff := cmp.Diff(e.events(run.ID), live); diff != "" {
		t.Errorf("streamed events differ from the journal (-journal +stream):\n%s", diff)
	}
	// A replay without following ends after the stored events.
	var replay []journal.Event
	for ev, err := range e.admin.Events(ctx, run.ID, &client.EventsParams{From: 3, NoFollow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		replay = append(replay, ev)
	}
	if diff := cmp.Diff(seqs(live[2:]), seqs(replay)); diff != "" {
		t.Errorf("replay from 3 (-want +got):\n%s", diff)
	}
	// Approve and follow from after the stop to the end.
	pending, err := e.admin.Approvals(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatalf("Approvals() = %v, %v", pending, err)
	}
	if _, err := e.admin.Approve(ctx, run.ID, pending[0].CallID, nil); err != nil {
		t.Fatal(err)
	}
	var rest []journal.Event
	for ev, err := range e.admin.Events(ctx, run.ID, &client.EventsParams{From: int64(len(live)) + 1, UntilStopped: true}) {
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, ev)
	}
	if n := len(rest); n == 0 || rest[n-1].Type != journal.RunCompleted {
		t.Fatalf("after approval: %v", seqs(rest))
	}
}

// A follower whose connection breaks reconnects with Last-Event-ID and
// gets every event once, in order.
func TestEventStreamReconnects(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	var got []journal.Event
	for ev, err := range e.admin.Events(ctx, run.ID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
		if ev.Seq == asked.Seq {
			// Break every connection, then let the run go on.
			e.srv.CloseClientConnections()
			if _, err := e.admin.Approve(ctx, run.ID, approvalOf(t, e, run.ID), nil); err != nil {
				t.Fatal(err)
			}
		}
		if ev.Type == journal.RunCompleted {
			break
		}
	}
	if diff := cmp.Diff(e.events(run.ID), got); diff != "" {
		t.Errorf("events across the reconnect (-journal +stream):\n%s", diff)
	}
}

func approvalOf(t *testing.T, e *env, runID string) string {
	t.Helper()
	r, err := e.admin.Run(t.Context(), runID)
	if err != nil || len(r.Pending) != 1 {
		t.Fatalf("Run(%s) = %+v, %v; want one pending approval", runID, r, err)
	}
	return r.Pending[0].CallID
}

// The raw stream: Last-Event-ID wins over ?from, each message has an id,
// an event type and the event as JSON, and a finite stream says "end".
func TestEventStreamWireFormat(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/v1/runs/"+run.ID+"/events?from=1&follow=false", nil)
	req.Header.Set("Authorization", "Bearer "+e.secret)
	req.Header.Set("Last-Event-ID", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var ids, types []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, v)
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, v)
		}
	}
	if len(ids) == 0 || ids[0] != "3" || ids[len(ids)-1] != itoa(asked.Seq) {
		t.Errorf("ids %v, want 3..%d", ids, asked.Seq)
	}
	if len(types) == 0 || types[len(types)-1] != "end" || len(types) != len(ids)+1 {
		t.Errorf("event types %v: want one per id, then end", types)
	}
}
