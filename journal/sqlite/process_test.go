package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
	"github.com/keel-run/keel/journal/sqlite"
)

// helperEnv makes the test binary act as a second process writing to a
// shared journal (see helperMain) instead of running tests.
const helperEnv = "KEEL_SQLITE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain is a writer process. It opens the journal at $PATH_DB, prints
// "ready", and then, for each line read from stdin, appends one event to
// run $RUN: mode "race" tries the slot after the number on the line and
// prints "won", "conflict" or "error: ..."; mode "append" appends after
// the run's newest event and prints "ok". It exits at the end of stdin.
func helperMain(mode string) int {
	s, err := sqlite.Open(os.Getenv("PATH_DB"), nil)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer s.Close()
	run, writer := os.Getenv("RUN"), os.Getenv("WRITER")
	ctx := context.Background()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		after, err := strconv.ParseInt(in.Text(), 10, 64)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		d := journal.Draft{Type: journal.ToolFinished, Time: time.Now(), Payload: []byte(fmt.Sprintf(`{"writer":%q}`, writer))}
		_, err = s.Append(ctx, run, after, d)
		switch {
		case err == nil && mode == "append":
			fmt.Println("ok")
		case err == nil:
			fmt.Println("won")
		case errors.Is(err, journal.ErrConflict):
			fmt.Println("conflict")
		default:
			fmt.Println("error:", err)
		}
	}
	return 0
}

// helper is a running writer process.
type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(t *testing.T, mode, path, run, writer string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "PATH_DB="+path, "RUN="+run, "WRITER="+writer)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		h.in.Close()
		h.cmd.Wait()
	})
	if got := h.line(t); got != "ready" {
		t.Fatalf("helper %s said %q, want ready", writer, got)
	}
	return h
}

func (h *helper) line(t *testing.T) string {
	if !h.out.Scan() {
		t.Errorf("helper ended early: %v", h.out.Err())
		return ""
	}
	return h.out.Text()
}

func (h *helper) send(t *testing.T, after int64) string {
	fmt.Fprintln(h.in, after)
	return h.line(t)
}

// Two processes and two in-process Store handles race for the slots of
// one run, released at once for each slot; each slot must be won exactly
// once, and the losers must see ErrConflict, never a lock error or a
// duplicate.
func TestProcessesRaceForOneRun(t *testing.T) {
	const slots = 25
	path := filepath.Join(t.TempDir(), "shared.db")
	type writer struct {
		name string
		try  func(slot int) string // "won", "conflict" or "error: ..."
	}
	var writers []writer
	for i := range 2 {
		name := fmt.Sprintf("proc-%d", i)
		h := startHelper(t, "race", path, "r", name)
		writers = append(writers, writer{name, func(slot int) string { return h.send(t, int64(slot)) }})
	}
	for i := range 2 {
		name := fmt.Sprintf("handle-%d", i)
		s, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		writers = append(writers, writer{name, func(slot int) string {
			d := journal.Draft{Type: journal.ToolFinished, Time: time.Now(), Payload: []byte(fmt.Sprintf(`{"writer":%q}`, name))}
			_, err := s.Append(context.Background(), "r", int64(slot), d)
			switch {
			case err == nil:
				return "won"
			case errors.Is(err, journal.ErrConflict):
				return "conflict"
			}
			return "error: " + err.Error()
		}})
	}

	winner := make([]string, slots)
	for slot := range slots {
		// In-process handles reach the lock sooner than processes fed
		// through a pipe, so every other slot is raced by the two
		// processes alone.
		racers := writers
		if slot%2 == 1 {
			racers = writers[:2]
		}
		outs := make([]string, len(racers))
		var wg sync.WaitGroup
		for i, w := range racers {
			wg.Go(func() { outs[i] = w.try(slot) })
		}
		wg.Wait()
		for i, out := range outs {
			switch out {
			case "won":
				if winner[slot] != "" {
					t.Errorf("slot after %d won by both %s and %s", slot, winner[slot], writers[i].name)
				}
				winner[slot] = writers[i].name
			case "conflict":
			default:
				t.Errorf("%s, slot after %d: %s", writers[i].name, slot, out)
			}
		}
		if winner[slot] == "" {
			t.Fatalf("nobody won the slot after %d", slot)
		}
	}

	s, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := journal.ReadVerified(t.Context(), s, "r")
	if err != nil {
		t.Fatalf("ReadVerified after the race = %v", err)
	}
	if len(events) != slots {
		t.Fatalf("run has %d events, want %d", len(events), slots)
	}
	wins := map[string]int{}
	for i, e := range events {
		var p struct{ Writer string }
		if err := json.Unmarshal(e.Payload, &p); err != nil || p.Writer != winner[i] {
			t.Errorf("event %d was written by %q, but %q won its slot", e.Seq, p.Writer, winner[i])
		}
		wins[p.Writer]++
	}
	t.Logf("slots won per writer: %v", wins)
}

// A follower sees events appended by another process, by polling.
func TestFollowAnotherProcess(t *testing.T) {
	s, path := openTemp(t, nil)
	h := startHelper(t, "append", path, "r", "proc")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a guard against hanging, not a timing assertion
	defer cancel()
	ch := followInto(ctx, s, "r", 1, time.Millisecond)
	for i := range int64(5) {
		if got := h.send(t, i); got != "ok" {
			t.Fatalf("helper append %d: %s", i, got)
		}
		got, ok := <-ch
		if !ok || got.err != nil || got.e.Seq != i+1 {
			t.Fatalf("Follow yielded %+v (open %t), want event %d written by the other process", got, ok, i+1)
		}
	}
}

type followed struct {
	e   journal.Event
	err error
}

func followInto(ctx context.Context, s journal.Store, run string, from int64, poll time.Duration) <-chan followed {
	out := make(chan followed)
	go func() {
		defer close(out)
		for e, err := range journal.Follow(ctx, s, run, from, poll) {
			select {
			case out <- followed{e, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Two handles on one file: a follower on one sees appends through the
// other by polling, and appends through its own handle by notification
// (its poll interval is far longer than the test).
func TestFollowAcrossHandles(t *testing.T) {
	a, path := openTemp(t, nil)
	b, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a guard against hanging, not a timing assertion
	defer cancel()

	polled := followInto(ctx, a, "r", 1, time.Millisecond)
	notified := followInto(ctx, a, "r", 1, time.Hour)
	var seq int64
	for range 3 {
		// One event through the other handle, which wakes nobody, then
		// one through a, which wakes the notified follower: it then reads
		// both.
		var want []journal.Event
		for _, w := range []*sqlite.Store{b, a} {
			evs, err := w.Append(ctx, "r", seq, journal.Draft{Type: journal.ModelResponded, Time: t0, Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, evs...)
			seq++
		}
		for name, ch := range map[string]<-chan followed{"polling": polled, "notified": notified} {
			for _, e := range want {
				if got, ok := <-ch; !ok || got.err != nil || got.e.Hash != e.Hash {
					t.Fatalf("%s follower yielded %+v, %v (open %t), want event %d", name, got.e, got.err, ok, e.Seq)
				}
			}
		}
	}
}

// rotating spreads a store's calls over several handles on one file, so
// that the conformance suite's concurrency properties exercise SQLite's
// locking between connections rather than Go's within one handle.
type rotating struct {
	handles []*sqlite.Store
	next    atomic.Uint64
}

func (r *rotating) pick() *sqlite.Store {
	return r.handles[r.next.Add(1)%uint64(len(r.handles))]
}

func (r *rotating) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return r.pick().Append(ctx, runID, after, drafts...)
}

func (r *rotating) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	return r.pick().Read(ctx, runID, from)
}

func (r *rotating) Runs(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	return r.pick().Runs(ctx, p)
}

func (r *rotating) Close() error {
	var errs []error
	for _, h := range r.handles {
		errs = append(errs, h.Close())
	}
	return errors.Join(errs...)
}

func TestConformanceThreeHandles(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store {
		path := filepath.Join(t.TempDir(), "journal.db")
		r := &rotating{}
		for range 3 {
			s, err := sqlite.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.handles = append(r.handles, s)
		}
		return r
	})
}
