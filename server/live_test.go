package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/server/api"
)

// recordedStream returns the events of a streamed chat completion
// recorded from the live OpenAI API (model/openai/testdata, see its
// README), each "data: ..." without the blank line that ends it.
func recordedStream(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("../model/openai/testdata/stream_text.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Body string }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range strings.Split(rec.Body, "\n\n") {
		if strings.TrimSpace(ev) != "" {
			out = append(out, ev)
		}
	}
	return out
}

// gatedProvider is an OpenAI endpoint that answers every request with
// events in the SDK's streaming wire format: the first hold of them at
// once, the rest only after release is closed, so that a test knows the
// answer is incomplete while it waits.
type gatedProvider struct {
	events  []string
	hold    int
	release chan struct{}
}

func (p *gatedProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	for i, ev := range p.events {
		if i == p.hold {
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "%s\n\n", ev)
		w.(http.Flusher).Flush()
	}
}

// streamingRun starts a run on e whose model is the OpenAI adapter on
// provider p, and returns its id.
func streamingRun(t testing.TB, e *env, p http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	m, err := openai.New(&openai.Options{BaseURL: srv.URL, APIKey: "test-key", Model: "gpt-4o-2024-08-06", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.models.set("openai:gpt-4o-2024-08-06", m)
	run, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "say what you can do", Model: "openai:gpt-4o-2024-08-06", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// joined reassembles the text of one stream's deltas, failing on a gap
// or an overlap (a piece sent twice).
func joined(t *testing.T, ds []api.Delta) string {
	t.Helper()
	var b strings.Builder
	for _, d := range ds {
		if d.Offset != b.Len() {
			t.Errorf("delta at offset %d after %d bytes: %+v", d.Offset, b.Len(), ds)
		}
		b.WriteString(d.Text)
	}
	return b.String()
}

// The server streams the model's text to its event streams as the
// provider sends it (the recorded OpenAI wire format, through the real
// adapter): a client gets pieces while the provider still holds the rest
// of the answer back, a stream opened mid-answer starts with the text so
// far, the pieces add up to exactly the text that is then journaled, and
// nothing is sent again once the answer is in the journal.
func TestModelTextStreamsToClients(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	p := &gatedProvider{events: recordedStream(t), hold: 8, release: make(chan struct{})}
	id := streamingRun(t, e, p)

	// A second stream, opened once the first has a piece, must start
	// with the text so far at offset 0; only then is the provider let
	// go on.
	secondFirst := make(chan api.Delta, 1)
	secondAll := make(chan []api.Delta, 1)
	openSecond := func() {
		go func() {
			var got []api.Delta
			defer func() { secondAll <- got }()
			for ev, err := range e.admin.Events(ctx, id, &client.EventsParams{OnDelta: func(d api.Delta) {
				if len(got) == 0 {
					secondFirst <- d
				}
				got = append(got, d)
			}}) {
				if err != nil || ev.Type == journal.ModelResponded {
					return
				}
			}
		}()
	}
	var early []api.Delta
	var responded *agent.ModelResponded
	var last journal.Type
	for ev, err := range e.admin.Events(ctx, id, &client.EventsParams{OnDelta: func(d api.Delta) {
		if responded != nil {
			t.Errorf("a delta after model.responded: %+v", d)
			return
		}
		early = append(early, d)
		if len(early) == 1 {
			openSecond()
			select {
			case d2 := <-secondFirst:
				if d2.Offset != 0 || !strings.HasPrefix(d2.Text, d.Text) {
					t.Errorf("the second stream's first delta %+v, want the text so far from offset 0 (the first stream has %q)", d2, d.Text)
				}
			case <-ctx.Done():
			}
			close(p.release)
		}
	}}) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev.Type
		if ev.Type == journal.ModelResponded {
			v, err := agent.Decode(&ev)
			if err != nil {
				t.Fatal(err)
			}
			responded = v.(*agent.ModelResponded)
			if len(early) > 0 && early[0].After >= ev.Seq {
				t.Errorf("deltas name event %d as the one before the call, but the call's event is %d", early[0].After, ev.Seq)
			}
		}
	}
	if last != journal.RunCompleted || responded == nil {
		t.Fatalf("the stream ended at %s, want run.completed after model.responded", last)
	}
	want := responded.Message.Content
	if !strings.HasPrefix(want, "I'm unable to") {
		t.Fatalf("journaled text %q is not the recording's", want)
	}
	if got := joined(t, early); got != want {
		t.Errorf("the deltas add up to %q, want the journaled text %q", got, want)
	}
	if len(early) < 2 {
		t.Errorf("%d deltas: want the text in pieces", len(early))
	}
	if got := joined(t, <-secondAll); got != want {
		t.Errorf("the second stream's deltas add up to %q, want %q", got, want)
	}
	// Once journaled, the text is never sent as deltas again.
	var late []api.Delta
	for _, err := range e.admin.Events(ctx, id, &client.EventsParams{OnDelta: func(d api.Delta) { late = append(late, d) }}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(late) > 0 {
		t.Errorf("a stream of the completed run sent deltas: %+v", late)
	}
	// Without ?deltas=true the stream carries events only.
	code, body := e.raw(http.MethodGet, "/v1/runs/"+id+"/events?deltas=maybe", e.secret, "")
	if code != http.StatusBadRequest || !strings.Contains(body, "deltas") {
		t.Errorf("deltas=maybe: %d %s", code, body)
	}
}

// lockstepProvider streams n text pieces "tok0 ", "tok1 ", ..., each one
// only after the previous one reached the client (next), and records
// when each left.
type lockstepProvider struct {
	n    int
	next chan struct{}
	sent chan time.Time // buffered, n
}

func (p *lockstepProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-lockstep", "object": "chat.completion.chunk", "created": 1727346168, "model": "gpt-4o-2024-08-06",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for i := range p.n {
		p.sent <- time.Now()
		chunk(map[string]any{"content": fmt.Sprintf("tok%d ", i)}, nil)
		select {
		case <-p.next:
		case <-r.Context().Done():
			return
		}
	}
	chunk(map[string]any{}, "stop")
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-lockstep\",\"object\":\"chat.completion.chunk\",\"created\":1727346168,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":30,\"total_tokens\":44}}\n\ndata: [DONE]\n\n")
}

// BenchmarkDeltaLatency measures the time from a piece of text leaving
// the provider (an OpenAI stream, through the real adapter, the
// executing worker, the server's event stream and the Go client) to its
// arrival at the client, one piece at a time: ns/op is the mean, and
// p50-ms, p99-ms the percentiles.
func BenchmarkDeltaLatency(b *testing.B) {
	e := newEnv(b, nil)
	p := &lockstepProvider{n: b.N, next: make(chan struct{}), sent: make(chan time.Time, b.N)}
	var lat []time.Duration
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	b.ResetTimer()
	id := streamingRun(b, e, p)
	for ev, err := range e.admin.Events(ctx, id, &client.EventsParams{OnDelta: func(d api.Delta) {
		for range strings.Count(d.Text, "tok") {
			lat = append(lat, time.Since(<-p.sent))
			p.next <- struct{}{}
		}
	}}) {
		if err != nil {
			b.Fatal(err)
		}
		if ev.Type == journal.RunCompleted {
			break
		}
	}
	b.StopTimer()
	if len(lat) != b.N {
		b.Fatalf("%d pieces arrived, want %d", len(lat), b.N)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// In the browser: the run page shows the model's text growing while the
// provider still holds the rest of the answer back, and replaces it with
// the journaled message once the answer is complete.
func TestBrowserStreamsModelText(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	p := &gatedProvider{events: recordedStream(t), hold: 8, release: make(chan struct{})}
	id := streamingRun(t, e, p)
	code, err := e.h.LoginCode(t.Context(), e.secret)
	if err != nil {
		t.Fatal(err)
	}
	q := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+code),
		chromedp.Click(q(`#sign-in`)),
		chromedp.WaitVisible(q(`#start-demo`)),
		chromedp.Navigate(e.srv.URL+"/ui/runs/"+id),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="live-model"]//div[contains(@class,"text") and contains(., "real-time weather")]`)),
	)
	if err != nil {
		t.Fatalf("the partial answer is not on the run page: %v", err)
	}
	partial := text(t, ctx, `#live-model .text`)
	if !strings.HasPrefix(partial, "I'm unable to") || strings.Contains(partial, "weather app") {
		t.Errorf("the streaming text is %q, want the part the provider sent", partial)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#conversation .msg.assistant:not(.streaming)").length`)); err != nil || n != 0 {
		t.Errorf("%d journaled model messages before the answer is complete (%v)", n, err)
	}
	shot(t, ctx, "streaming")
	close(p.release)
	err = chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.Search(`//div[contains(@class,"msg") and contains(@class,"assistant") and not(contains(@class,"streaming")) and contains(., "weather app")]`)),
		chromedp.WaitNotPresent(q(`#live-model`)),
		chromedp.WaitVisible(q(`#run-status[data-status="completed"]`)),
	)
	if err != nil {
		t.Fatalf("the journaled answer does not replace the streamed one: %v", err)
	}
}

// fifoRun starts a run whose scripted model calls bash on a command that
// opens a FIFO in the workspace, prints a line, then blocks reading the
// FIFO until the test writes a line to it, then prints another line; it
// returns the run id and a function that lets the command finish.
func fifoRun(t *testing.T, e *env) (string, func()) {
	t.Helper()
	ws := t.TempDir()
	fifo := filepath.Join(ws, "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	e.models.set("test:fifo", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("", modeltest.Call("c1", "bash", map[string]string{"command": "exec 3<>gate; echo first-line; read -r x <&3; echo second-line"})),
		modeltest.Text("done"),
	}, nil))
	run, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "print slowly", Model: "test:fifo", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return run.ID, func() {
		once.Do(func() {
			// The command holds the FIFO open before it prints its first
			// line. Non-blocking: with no reader (the command is not
			// there) the open fails instead of waiting.
			f, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Errorf("let the command go on: %v", err)
				return
			}
			if _, err := f.WriteString("go\n"); err != nil {
				t.Errorf("let the command go on: %v", err)
			}
			f.Close()
		})
	}
}

// A running command's output reaches the event stream while the command
// still runs (it waits on a FIFO that the test opens only once the
// client has the first line), as a delta of its call, after the call's
// tool.started; the journaled result has all of it.
func TestCommandOutputStreamsToClients(t *testing.T) {
	e := newEnv(t, nil)
	id, release := fifoRun(t, e)
	defer release()
	var out strings.Builder
	var startedSeq int64
	var finished *agent.ToolFinished
	for ev, err := range e.admin.Events(t.Context(), id, &client.EventsParams{OnDelta: func(d api.Delta) {
		if d.CallID == "" {
			return
		}
		if d.CallID != "c1" || finished != nil || startedSeq == 0 || d.After < startedSeq || d.Offset != out.Len() {
			t.Errorf("delta %+v: want call c1's next piece after its tool.started (%d), before its result (%d bytes so far)", d, startedSeq, out.Len())
		}
		out.WriteString(d.Output)
		if strings.Contains(out.String(), "first-line\n") {
			release()
		}
	}}) {
		if err != nil {
			t.Fatal(err)
		}
		v, _ := agent.Decode(&ev)
		switch x := v.(type) {
		case *agent.ToolStarted:
			startedSeq = ev.Seq
		case *agent.ToolFinished:
			finished = x
		}
	}
	if finished == nil || !strings.Contains(finished.Content, "first-line\nsecond-line") {
		t.Fatalf("tool.finished %+v", finished)
	}
	if got := out.String(); !strings.HasPrefix(got, "first-line\n") || !strings.HasPrefix("first-line\nsecond-line\n", got) {
		t.Errorf("the output deltas are %q, want a prefix of the command's output that has its first line", got)
	}
}

// In the browser: a running call shows what its command printed so far,
// and its journaled result once it finishes.
func TestBrowserShowsCommandOutputLive(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	id, release := fifoRun(t, e)
	defer release()
	code, err := e.h.LoginCode(t.Context(), e.secret)
	if err != nil {
		t.Fatal(err)
	}
	q := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+code),
		chromedp.Click(q(`#sign-in`)),
		chromedp.WaitVisible(q(`#start-demo`)),
		chromedp.Navigate(e.srv.URL+"/ui/runs/"+id),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="call-c1"]//details[contains(@class,"running")]//pre[contains(@class,"live-output") and contains(., "first-line")]`)),
	)
	if err != nil {
		t.Fatalf("the running command's output is not on the run page: %v", err)
	}
	shot(t, ctx, "command-live")
	release()
	err = chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.Search(`//div[@id="call-c1"]//pre[contains(@class,"output") and not(contains(@class,"live-output")) and contains(., "second-line")]`)),
		chromedp.WaitNotPresent(q(`#call-c1 pre.live-output`)),
		chromedp.WaitVisible(q(`#run-status[data-status="completed"]`)),
	)
	if err != nil {
		t.Fatalf("the finished call does not show its result: %v", err)
	}
}
