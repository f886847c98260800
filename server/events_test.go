package server_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
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

// heldModel answers once release is closed (or its request is canceled).
type heldModel struct{ release chan struct{} }

func (m heldModel) Name() string { return "held" }

func (m heldModel) Generate(ctx context.Context, _ *model.Request) (*model.Response, error) {
	select {
	case <-m.release:
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "held answer"}}, nil
	case <-ctx.Done():
		return nil, &model.Error{Kind: model.KindUnknown, Provider: "held", Message: "canceled", Err: ctx.Err()}
	}
}

// A follow-up of a completed run answers before its execution journals
// anything (here it waits for the one worker): a stream opened then from
// the next event follows it to its end (fresh-user trial 3: `keel
// --server URL runs resume RUN --message` said "the event stream ended
// early"), and a stream from 1 goes on past the first completion.
func TestEventStreamFollowUp(t *testing.T) {
	e := newEnv(t, &envOptions{workers: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e.models.set("test:twice", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("first"), modeltest.Text("second")}, nil))
	held := heldModel{release: make(chan struct{})}
	e.models.set("test:held", held)
	ws := t.TempDir()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:twice", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	first := e.waitType(run.ID, journal.RunCompleted)
	// The one worker is busy with another run: the follow-up queues.
	busy, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:held", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.waitType(busy.ID, journal.RunCreated)
	for r, err := e.admin.Run(ctx, busy.ID); !r.Executing; r, err = e.admin.Run(ctx, busy.ID) {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polls the server's state; no ordering rests on it
	}
	if _, err := e.admin.Resume(ctx, run.ID, &api.ResumeRun{Message: "and then?"}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		types []journal.Type
		err   error
	}
	follow := func(from int64) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var r result
			for ev, err := range e.admin.Events(ctx, run.ID, &client.EventsParams{From: from}) {
				if err != nil {
					r.err = err
					break
				}
				r.types = append(r.types, ev.Type)
			}
			ch <- r
		}()
		return ch
	}
	next, all := follow(first.Seq+1), follow(1)
	close(held.release)
	for name, ch := range map[string]<-chan result{"from the next event": next, "from 1": all} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		if n := len(r.types); n == 0 || r.types[n-1] != journal.RunCompleted || !slices.Contains(r.types, journal.UserMessage) {
			t.Errorf("%s: the stream ended with %v, want the follow-up through its run.completed", name, r.types)
		}
	}
}
