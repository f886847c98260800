package tui_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// fakeServer serves a run's recorded events as a team server would,
// with the status a Run call reports; it records what was canceled.
type fakeServer struct {
	events   []journal.Event
	status   string
	pending  []api.Approval
	canceled []string
	// stopAfter, when positive, ends the stream after that many events
	// and cancels ctx (a Ctrl-C while the run goes on).
	stopAfter int
	cancel    context.CancelFunc
	// streams counts the calls of Events.
	streams int
}

func (f *fakeServer) Events(_ context.Context, _ string, p *tui.EventsParams) iter.Seq2[journal.Event, error] {
	return func(yield func(journal.Event, error) bool) {
		f.streams++
		n := 0
		for _, e := range f.events {
			if e.Seq < max(p.From, 1) {
				continue
			}
			if f.stopAfter > 0 && n == f.stopAfter {
				f.cancel()
				return
			}
			n++
			if !yield(e, nil) {
				return
			}
			if p.NoFollow && e.Seq == int64(len(f.events)) {
				return
			}
			if p.UntilStopped && journal.Stops(e.Type) {
				return // as the server's ?until=stopped ends
			}
		}
	}
}

func (f *fakeServer) Run(_ context.Context, id string) (*api.Run, error) {
	return &api.Run{ID: id, Status: f.status, Pending: f.pending}, nil
}

func (f *fakeServer) Cancel(_ context.Context, id string) error {
	f.canceled = append(f.canceled, id)
	return nil
}

// Decide and ProposedEdit are not used: these runs are followed with no
// person at a terminal.
func (f *fakeServer) Decide(context.Context, string, string, *agent.ApprovalResolved) error {
	return errors.New("no decisions here")
}

func (f *fakeServer) ProposedEdit(context.Context, string, string) (*api.ProposedEdit, error) {
	return nil, errors.New("no edits here")
}

func recorded(t *testing.T, name string) []journal.Event {
	t.Helper()
	fh, err := os.Open(filepath.Join("..", "..", "testdata", "journals", name))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	events, torn, err := journal.ReadJSONL(fh)
	if err != nil || torn != nil {
		t.Fatalf("read %s: %v, torn %v", name, err, torn)
	}
	return events
}

// Following a run on a server prints it as keel run prints it and exits
// as keel run does: 0 for a completed run; with Ctrl-C, a paused run
// stays paused (3) and an executing one is canceled on the server (130).
func TestFollow(t *testing.T) {
	events := recorded(t, "v0.1-demo.jsonl")
	id := events[0].RunID
	for _, tt := range []struct {
		name         string
		from         int64
		json         bool
		stopAfter    int
		status       string
		pending      []api.Approval
		wantCode     int
		wantCanceled bool
		wantErr      string
	}{
		{name: "completed", from: 1, wantCode: 0, wantErr: "word_count"},
		{name: "resumed from its history", from: 5, wantCode: 0},
		{name: "json", from: 1, json: true, wantCode: 0},
		{name: "ctrl-c while paused", from: 1, stopAfter: 3, status: "paused", wantCode: 3,
			wantErr: "stays paused on the server\nkeel: resume with: keel --server http://keel.example runs resume " + id},
		// Ctrl-C at the approval question (keel --server URL demo): how
		// to decide, with --server URL, and where in the web UI.
		{name: "ctrl-c while waiting", from: 1, stopAfter: 3, status: "paused", pending: []api.Approval{{RunID: id, CallID: "demo_4"}}, wantCode: 3,
			wantErr: "stays paused on the server\nkeel: decide with: keel --server http://keel.example approve " + id + " demo_4   or   keel --server http://keel.example deny " + id +
				" demo_4 --reason TEXT\nkeel: or in the web UI: http://keel.example/ui/approvals\n"},
		{name: "ctrl-c while executing", from: 1, stopAfter: 3, status: "running", wantCode: 130, wantCanceled: true, wantErr: "canceled run " + id + " on the server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			srv := &fakeServer{events: events, status: tt.status, pending: tt.pending, stopAfter: tt.stopAfter, cancel: cancel}
			var out, errOut bytes.Buffer
			code, err := tui.Follow(ctx, srv, id, &tui.FollowParams{Stdout: &out, Stderr: &errOut, URL: "http://keel.example", From: tt.from, JSON: tt.json})
			if err != nil || code != tt.wantCode {
				t.Fatalf("Follow = %d, %v, want %d\nstderr:\n%s", code, err, tt.wantCode, errOut.String())
			}
			if (len(srv.canceled) > 0) != tt.wantCanceled {
				t.Errorf("canceled %v, want %v", srv.canceled, tt.wantCanceled)
			}
			if tt.wantErr != "" && !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantErr, errOut.String())
			}
			if tt.json && strings.Count(out.String(), "\n") != len(events) {
				t.Errorf("--json printed %d lines for %d events:\n%s", strings.Count(out.String(), "\n"), len(events), out.String())
			}
		})
	}
}

// A stream whose first new event does not link to the history before it
// is a corrupt journal, never printed as the run.
func TestFollowBrokenLink(t *testing.T) {
	events := recorded(t, "v0.1-demo.jsonl")
	events[4].PrevHash = strings.Repeat("0", 64)
	srv := &fakeServer{events: events}
	var out, errOut bytes.Buffer
	_, err := tui.Follow(t.Context(), srv, events[0].RunID, &tui.FollowParams{Stdout: &out, Stderr: &errOut, From: 5})
	var ce *journal.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Follow = %v, want a corrupt journal", err)
	}
}

// A run that a server's shutdown paused is resumed by the server when it
// starts again: following it (with or without a person to ask) goes on
// through the pause, as the restarted server resumes it, and ends as
// the run ends, not with a "resume with" for what the server does
// itself.
func TestFollowAcrossServerRestart(t *testing.T) {
	demo := recorded(t, "v0.1-demo.jsonl")
	id := demo[0].RunID
	// The demo, paused by a shutdown after its first tool call and
	// resumed by the restarted server.
	var events []journal.Event
	prev := journal.GenesisHash
	add := func(e journal.Event) {
		e.Seq = int64(len(events) + 1)
		if err := journal.Seal(prev, &e); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		events = append(events, e)
	}
	for i, e := range demo {
		if i == 5 {
			at := demo[4].Time
			add(journal.Event{RunID: id, Type: journal.RunPaused, Time: at, Payload: []byte(`{"reason":"shutdown","message":"the runtime shut down; resume the run to continue"}`)})
			add(journal.Event{RunID: id, Type: journal.RunResumed, Time: at, Payload: []byte(`{}`)})
		}
		add(e)
	}
	for _, noWait := range []bool{true, false} {
		t.Run(fmt.Sprintf("no-wait=%v", noWait), func(t *testing.T) {
			srv := &fakeServer{events: events, status: "completed"}
			var out, errOut bytes.Buffer
			code, err := tui.Follow(t.Context(), srv, id, &tui.FollowParams{Stdout: &out, Stderr: &errOut, URL: "http://keel.example", From: 1, NoWait: noWait})
			if err != nil || code != 0 {
				t.Fatalf("Follow = %d, %v, want 0 (the run completed)\nstderr:\n%s", code, err, errOut.String())
			}
			for _, want := range []string{"the server shut down; run " + id + " goes on when it starts again", "completed"} {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
				}
			}
			if strings.Contains(errOut.String(), "resume with") {
				t.Errorf("stderr tells to resume a run the server resumes itself:\n%s", errOut.String())
			}
		})
	}
}
