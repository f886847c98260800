package idle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/idle"
)

// The idle timeouts below are short so that the abandonment path runs
// quickly; the tests assert what happens, never how long it took. Tests in
// which every attempt stalls use shortIdle; tests that also need a healthy
// exchange to finish under the watchdog use the roomier healthyIdle.
const (
	shortIdle   = 50 * time.Millisecond
	healthyIdle = time.Second
)

// recorder is an httptest handler that records request bodies and answers
// each attempt with the next behaviour.
type recorder struct {
	mu      sync.Mutex
	bodies  []string
	answers []func(w http.ResponseWriter, r *http.Request)
	release chan struct{}
}

func newRecorder(t *testing.T, answers ...func(w http.ResponseWriter, r *http.Request)) (*recorder, *httptest.Server) {
	rec := &recorder{answers: answers, release: make(chan struct{})}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() {
		close(rec.release)
		srv.Close()
	})
	return rec, srv
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	n := len(rec.bodies)
	rec.bodies = append(rec.bodies, string(b))
	answer := rec.answers[min(n, len(rec.answers)-1)]
	rec.mu.Unlock()
	answer(w, r)
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.bodies...)
}

// block waits until the client goes away or the test ends.
func (rec *recorder) block(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-rec.release:
	}
}

const fullBody = `{"id":"x","choices":[{"message":{"tool_calls":[{"id":"c1","function":{"name":"bash","arguments":"{}"}}]}}]}`

func halfBody(rec **recorder) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(fullBody)))
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, fullBody[:len(fullBody)/2])
		w.(http.Flusher).Flush()
		(*rec).block(r)
	}
}

func complete(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, fullBody)
}

func post(t *testing.T, tr http.RoundTripper, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return (&http.Client{Transport: tr}).Do(req)
}

func TestTransportStalls(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		answer  func(rec **recorder) func(w http.ResponseWriter, r *http.Request)
		retries int
		want    string
		tries   int
	}{
		{name: "half body then silence", answer: halfBody, retries: 2, want: "no bytes for 50ms on 3 attempts", tries: 3},
		{name: "no headers", answer: func(rec **recorder) func(w http.ResponseWriter, r *http.Request) {
			return func(w http.ResponseWriter, r *http.Request) { (*rec).block(r) }
		}, retries: 1, want: "no bytes for 50ms on 2 attempts", tries: 2},
		{name: "no repeat", answer: halfBody, retries: -1, want: "no bytes for 50ms on 1 attempt", tries: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var rec *recorder
			rec, srv := newRecorder(t, tt.answer(&rec))
			tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: shortIdle, StallRetries: tt.retries})
			res, err := post(t, tr, srv.URL, `{"q":1}`)
			if err == nil {
				res.Body.Close()
				t.Fatalf("RoundTrip = HTTP %d, nil; want a stall", res.StatusCode)
			}
			var me *model.Error
			if !errors.As(err, &me) || me.Kind != model.KindStalled {
				t.Fatalf("RoundTrip error = %v; want a *model.Error of kind stalled", err)
			}
			if me.Message != tt.want {
				t.Errorf("stall message = %q, want %q", me.Message, tt.want)
			}
			got := rec.requests()
			if len(got) != tt.tries {
				t.Errorf("server saw %d attempts, want %d", len(got), tt.tries)
			}
			for i, b := range got {
				if b != `{"q":1}` {
					t.Errorf("attempt %d sent body %q, want the original body again", i+1, b)
				}
			}
		})
	}
}

func TestTransportRecoversAfterStall(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, halfBody(&rec), complete)
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: healthyIdle})
	res, err := post(t, tr, srv.URL, "body")
	if err != nil {
		t.Fatalf("RoundTrip error = %v", err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil || string(got) != fullBody {
		t.Errorf("body = %q, %v; want the whole second answer", got, err)
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("server saw %d attempts, want 2", n)
	}
}

// TestIdleTransportTruncatedBody checks that a body cut short by a closed
// connection is an error of RoundTrip, never a half body for a parser.
func TestTransportTruncatedBody(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(fullBody)))
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, fullBody[:20])
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: time.Minute})
	res, err := post(t, tr, srv.URL, "x")
	if err == nil {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("RoundTrip = body %q, nil; want an error", b)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("RoundTrip error = %v; want one wrapping io.ErrUnexpectedEOF", err)
	}
	if model.KindOf(err) == model.KindStalled {
		t.Errorf("a truncated body was reported as a stall: %v", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d attempts, want 1 (a broken body is left to the caller's retry policy)", n)
	}
}

func TestTransportStreamingBody(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		rec.block(r)
	})
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: healthyIdle})
	res, err := post(t, tr, srv.URL, "x")
	if err != nil {
		t.Fatalf("RoundTrip error = %v", err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if string(got) != "data: one\n\n" {
		t.Errorf("streamed bytes = %q, want the first event", got)
	}
	if model.KindOf(err) != model.KindStalled {
		t.Errorf("read error = %v, want kind stalled", err)
	}
}

func TestTransportParentCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	var rec *recorder
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		rec.block(r)
	})
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-arrived
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	res, err := tr.RoundTrip(req)
	if err == nil {
		res.Body.Close()
		t.Fatal("RoundTrip succeeded after cancel")
	}
	if !errors.Is(err, context.Canceled) || model.KindOf(err) == model.KindStalled {
		t.Errorf("RoundTrip error = %v; want context.Canceled, not a stall", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d attempts, want 1", n)
	}
}

func TestTransportBodyLimit(t *testing.T) {
	t.Parallel()
	_, srv := newRecorder(t, complete)
	tr := idle.NewTransport(nil, &idle.Options{MaxResponseBytes: 10})
	res, err := post(t, tr, srv.URL, "x")
	if err == nil {
		res.Body.Close()
		t.Fatal("RoundTrip accepted a body over MaxResponseBytes")
	}
	if !strings.Contains(err.Error(), "exceeds 10 bytes") {
		t.Errorf("RoundTrip error = %v, want the limit named", err)
	}
}

// TestIdleTransportNoGetBody checks that a request whose body cannot be
// replayed stalls out after one attempt instead of sending an empty body.
func TestTransportNoGetBody(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, halfBody(&rec))
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: shortIdle})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, io.NopCloser(bytes.NewBufferString("x")))
	req.GetBody = nil
	_, err := tr.RoundTrip(req)
	if model.KindOf(err) != model.KindStalled || !strings.Contains(err.Error(), "on 1 attempt") {
		t.Errorf("RoundTrip error = %v, want a stall after 1 attempt", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d attempts, want 1", n)
	}
}

func TestTransportDefaults(t *testing.T) {
	t.Parallel()
	tr := idle.NewTransport(nil, nil)
	if tr.Timeout() != 2*time.Minute || tr.StallRetries() != 2 || tr.ResponseTimeout() != 10*time.Minute {
		t.Errorf("defaults = %v, %d; want 2m0s, 2", tr.Timeout(), tr.StallRetries())
	}
}

// trickle answers with headers and then one byte every few milliseconds,
// never finishing: a keepalive that never trips the idle timeout.
func trickle(rec **recorder, contentType string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-(*rec).release:
				return
			case <-tick.C:
				if _, err := io.WriteString(w, " "); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}
}

// A provider that keeps the connection alive with a byte every few
// milliseconds cannot hold a step forever: each attempt ends at the
// response deadline, is repeated, and then fails with a clear stall.
func TestTransportByteTrickle(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, trickle(&rec, "application/json"))
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: healthyIdle, ResponseTimeout: 100 * time.Millisecond, StallRetries: 1})
	res, err := post(t, tr, srv.URL, `{"q":1}`)
	if err == nil {
		res.Body.Close()
		t.Fatalf("RoundTrip = HTTP %d, nil; want a stall", res.StatusCode)
	}
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.KindStalled {
		t.Fatalf("RoundTrip error = %v; want a *model.Error of kind stalled", err)
	}
	if want := "no complete response within 100ms on 2 attempts (the provider kept the connection open without finishing)"; me.Message != want {
		t.Errorf("message = %q, want %q", me.Message, want)
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("server saw %d attempts, want 2", n)
	}
}

// After a trickling attempt, a healthy answer is used.
func TestTransportRecoversAfterTrickle(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, trickle(&rec, "application/json"), complete)
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: healthyIdle, ResponseTimeout: 200 * time.Millisecond})
	res, err := post(t, tr, srv.URL, "body")
	if err != nil {
		t.Fatalf("RoundTrip error = %v", err)
	}
	defer res.Body.Close()
	if got, err := io.ReadAll(res.Body); err != nil || string(got) != fullBody {
		t.Errorf("body = %q, %v; want the second answer", got, err)
	}
}

// A trickling stream ends at the deadline with a stall error.
func TestTransportStreamTrickle(t *testing.T) {
	t.Parallel()
	var rec *recorder
	rec, srv := newRecorder(t, trickle(&rec, "text/event-stream"))
	tr := idle.NewTransport(nil, &idle.Options{IdleTimeout: healthyIdle, ResponseTimeout: 100 * time.Millisecond})
	res, err := post(t, tr, srv.URL, "x")
	if err != nil {
		t.Fatalf("RoundTrip error = %v", err)
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	if model.KindOf(err) != model.KindStalled || !strings.Contains(err.Error(), "not complete within 100ms") {
		t.Errorf("read error = %v, want a stall at the deadline", err)
	}
}
