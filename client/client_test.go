package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// chain returns n sealed events of run r.
func chain(t *testing.T, r string, n int) []journal.Event {
	t.Helper()
	var out []journal.Event
	prev := journal.GenesisHash
	for i := 1; i <= n; i++ {
		e := journal.Event{RunID: r, Seq: int64(i), Type: "test.event", Time: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC), Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if err := journal.Seal(prev, &e); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		out = append(out, e)
	}
	return out
}

func sse(w http.ResponseWriter, events []journal.Event, end string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, ": keep-alive\n\n")
	for _, e := range events {
		b, _ := json.Marshal(e)
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
	}
	if end != "" {
		fmt.Fprintf(w, "event: end\ndata: {\"reason\":%q}\n\n", end)
	}
}

func TestEvents(t *testing.T) {
	good := chain(t, "r1", 4)
	tampered := chain(t, "r1", 4)
	tampered[2].Payload = json.RawMessage(`{"i":99}`)
	for _, tt := range []struct {
		name    string
		serve   func(w http.ResponseWriter, r *http.Request)
		want    []int64
		wantErr func(error) bool
	}{
		{
			name:  "replay then end",
			serve: func(w http.ResponseWriter, r *http.Request) { sse(w, good, "replayed") },
			want:  []int64{1, 2, 3, 4},
		},
		{
			name:    "a changed event breaks the chain",
			serve:   func(w http.ResponseWriter, r *http.Request) { sse(w, tampered, "replayed") },
			want:    []int64{1, 2},
			wantErr: func(err error) bool { var ce *journal.CorruptError; return errors.As(err, &ce) && ce.Seq == 3 },
		},
		{
			name: "the server ends with an error",
			serve: func(w http.ResponseWriter, r *http.Request) {
				sse(w, good[:1], "error: journal: run r1 is corrupt at event 2: boom")
			},
			want: []int64{1},
			wantErr: func(err error) bool {
				return client.IsCode(err, api.CodeInternal) && strings.Contains(err.Error(), "boom")
			},
		},
		{
			name: "an unknown run",
			serve: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeNotFound, Message: "no such run r1", Status: 404}})
			},
			wantErr: func(err error) bool { return client.IsCode(err, api.CodeNotFound) },
		},
		{
			// The first connection breaks after two events; the client
			// reconnects with Last-Event-ID 2 and gets the rest once.
			name: "reconnect after a broken connection",
			serve: func() func(w http.ResponseWriter, r *http.Request) {
				calls := 0
				return func(w http.ResponseWriter, r *http.Request) {
					calls++
					if calls == 1 {
						sse(w, good[:2], "")
						return // the connection ends without "end"
					}
					if got := r.Header.Get("Last-Event-ID"); got != "2" {
						http.Error(w, "Last-Event-ID "+got, http.StatusBadRequest)
						return
					}
					sse(w, good[1:], "replayed") // event 2 again: skipped
				}
			}(),
			want: []int64{1, 2, 3, 4},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tt.serve))
			defer srv.Close()
			c, err := client.New(srv.URL, &client.Options{Token: "keel_x_y", Retry: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			var gotErr error
			for e, err := range c.Events(t.Context(), "r1", nil) {
				if err != nil {
					gotErr = err
					break
				}
				got = append(got, e.Seq)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantErr == nil && gotErr != nil:
				t.Errorf("error %v, want none", gotErr)
			case tt.wantErr != nil && !tt.wantErr(gotErr):
				t.Errorf("error %v is not the one expected", gotErr)
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8420", "ftp://host", "http://"} {
		if _, err := client.New(u, nil); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
	if _, err := client.New("http://127.0.0.1:8420/", nil); err != nil {
		t.Errorf("New(http://127.0.0.1:8420/) = %v", err)
	}
}

// Path values (run and call ids) are escaped once, as one segment each:
// the server sees the id the caller gave, whatever it holds.
func TestPathSegmentsEscapedOnce(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL+"/base/", &client.Options{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, id := range []string{"q?x=1#frag", "sp ace%2F", "B/../A"} {
		if _, err := c.Approve(ctx, "r 1", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Artifact(ctx, "r1", ".keel/artifacts/r1/c?1.out"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/base/v1/runs/r%201/approvals/q%3Fx=1%23frag/approve",
		"/base/v1/runs/r%201/approvals/sp%20ace%252F/approve",
		"/base/v1/runs/r%201/approvals/B%2F..%2FA/approve",
		"/base/v1/runs/r1/artifacts/.keel/artifacts/r1/c%3F1.out",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paths on the wire (-want +got):\n%s", diff)
	}
}

// A server that goes away: the client says so once, keeps reconnecting,
// and gives up with the connection error after EventsParams.GiveUp.
func TestEventsGiveUpOnAGoneServer(t *testing.T) {
	good := chain(t, "r1", 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sse(w, good, "") // then the connection ends without "end"
	}))
	c, err := client.New(srv.URL, &client.Options{Token: "keel_x_y", Retry: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	var gotErr error
	var disconnects []error
	p := &client.EventsParams{GiveUp: 20 * time.Millisecond, OnDisconnect: func(err error) { disconnects = append(disconnects, err) }}
	for e, err := range c.Events(t.Context(), "r1", p) {
		if err != nil {
			gotErr = err
			break
		}
		got = append(got, e.Seq)
		if e.Seq == 2 {
			srv.Close() // the server dies after the second event
		}
	}
	if diff := cmp.Diff([]int64{1, 2}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if gotErr == nil || !strings.Contains(gotErr.Error(), "the server has not answered for") {
		t.Errorf("error %v, want the give-up", gotErr)
	}
	if len(disconnects) == 0 || disconnects[0] == nil {
		t.Errorf("OnDisconnect calls %v, want the first with the error", disconnects)
	}
}
