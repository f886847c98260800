package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// sseMsg is one Server-Sent Events message.
type sseMsg struct{ id, event, data string }

// readSSE calls each with every message of r until it returns false or r
// ends; it returns the messages read.
func readSSE(r io.Reader, each func(sseMsg) bool) []sseMsg {
	var out []sseMsg
	var m sseMsg
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if m.event == "" && m.data == "" {
				continue
			}
			out = append(out, m)
			if !each(m) {
				return out
			}
			m = sseMsg{}
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if m.data != "" {
				m.data += "\n"
			}
			m.data += strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// openStream GETs path on e with the API token secret (as a bearer
// token, or as the web UI's cookie) and returns the response, whose body
// is read within a minute.
func (e *env) openStream(ctx context.Context, path, secret string, cookie bool) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if cookie {
		req.AddCookie(e.cookie(secret))
	} else {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		e.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return resp
}

// A token revoked while one of its event streams is open stops receiving
// events: the stream (API or web UI) ends at once when the revocation is
// made through this server, and within a tick when another process
// sharing the journal makes it. The run here waits for a person, so no
// event would end the stream otherwise.
func TestRevokedTokenEndsItsStreams(t *testing.T) {
	for _, tt := range []struct {
		name          string
		ui, elsewhere bool
	}{
		{"API stream, revoked through the server", false, false},
		{"API stream, revoked by another process", false, true},
		{"web UI stream, revoked through the server", true, false},
		{"web UI stream, revoked by another process", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, &envOptions{server: func(o *server.Options) { o.TokenCheck = 10 * time.Millisecond }})
			id := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "true"}))
			tok, err := e.admin.CreateToken(t.Context(), &api.CreateToken{Name: "eve", Scopes: []string{api.ScopeRunsRead}})
			if err != nil {
				t.Fatal(err)
			}
			revoke := func() {
				if !tt.elsewhere {
					if _, err := e.admin.RevokeToken(t.Context(), tok.ID); err != nil {
						t.Fatal(err)
					}
					return
				}
				other, err := sqlite.Open(e.db, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				if err := token.New(other, nil).Revoke(t.Context(), tok.ID, "ada"); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if !tt.ui {
				var got []journal.Event
				var end error
				for ev, err := range e.client(tok.Secret).Events(ctx, id, nil) {
					if err != nil {
						end = err
						break
					}
					if got = append(got, ev); len(got) == 1 {
						revoke()
					}
				}
				if ctx.Err() != nil || !client.IsCode(end, api.CodeUnauthenticated) {
					t.Fatalf("after the revocation the stream went on (%v) and ended with %v, want an unauthenticated error", ctx.Err(), end)
				}
				return
			}
			resp := e.openStream(ctx, "/ui/runs/"+id+"/stream?from=1", tok.Secret, true)
			defer resp.Body.Close()
			revoked := false
			msgs := readSSE(resp.Body, func(m sseMsg) bool {
				if m.event == "row" && !revoked {
					revoked = true
					revoke()
				}
				return m.event != "end"
			})
			if ctx.Err() != nil || len(msgs) == 0 || msgs[len(msgs)-1] != (sseMsg{event: "end", data: "unauthenticated"}) {
				t.Fatalf("after the revocation the UI stream went on (%v); its last message %+v, want end: unauthenticated", ctx.Err(), msgs[len(msgs)-1:])
			}
		})
	}
}

// The live run page's summary stops saying "executing" once the run's
// execution ends, though no event follows run.completed: the feed sends
// the summary again when the run leaves its worker.
func TestUIStreamSummaryAfterTheRunEnds(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp := e.openStream(sctx, "/ui/runs/"+run.ID+"/stream?from="+itoa(asked.Seq+1), e.secret, true)
	defer resp.Body.Close()
	if _, err := e.admin.Approve(ctx, run.ID, "demo_4", nil); err != nil {
		t.Fatal(err)
	}
	var last string
	readSSE(resp.Body, func(m sseMsg) bool {
		if m.event != "summary" {
			return true
		}
		last = m.data
		return !strings.Contains(m.data, `data-status="completed"`) || strings.Contains(m.data, "status executing") || strings.Contains(m.data, "status queued")
	})
	if !strings.Contains(last, `data-status="completed"`) || strings.Contains(last, "status executing") || strings.Contains(last, "status queued") {
		t.Errorf("the feed's last summary (%v):\n%s\nwant completed, neither executing nor queued", sctx.Err(), last)
	}
	if errors.Is(sctx.Err(), context.DeadlineExceeded) {
		t.Errorf("no summary without executing within a minute")
	}
}
