package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/postgres"
)

// helperEnv makes the test binary act as another Keel process on the
// database (see helperMain) instead of running tests.
const helperEnv = "KEEL_POSTGRES_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain, mode "lease": opens $DSN, takes the lease of $RUN, prints
// "locked" and waits to be killed.
func helperMain(mode string) int {
	ctx := context.Background()
	s, err := postgres.Open(ctx, os.Getenv("DSN"))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	switch mode {
	case "lease":
		if _, err := s.Lock(ctx, os.Getenv("RUN")); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("locked")
		select {}
	}
	fmt.Println("error: unknown mode", mode)
	return 1
}

// A lease held by a process that is killed with SIGKILL frees itself: the
// server ends the dead session and its advisory locks with it.
func TestLeaseOfKilledProcessFrees(t *testing.T) {
	s, dsn := openTemp(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=lease", "DSN="+dsn, "RUN=r1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper said %q", line)
	}
	_, err = s.Lock(t.Context(), "r1")
	if !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("Lock of a run another process holds = %v, want ErrLocked", err)
	}
	wantHolder := fmt.Sprintf("keel lease pid %d on ", cmd.Process.Pid)
	if !strings.Contains(err.Error(), wantHolder) {
		t.Errorf("error %q does not name the holder %q", err, wantHolder)
	}
	if h, err := s.Holder(t.Context(), "r1"); err != nil || !strings.HasPrefix(h, wantHolder) {
		t.Errorf("Holder = %q, %v; want %q...", h, err, wantHolder)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The server ends the dead session asynchronously: wait for the lock
	// with a blocking pg_advisory_lock (bounded), then take the lease.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	key := postgres.LeaseKey("r1")
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatalf("the killed holder's lease did not free itself: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	unlock, err := s.Lock(t.Context(), "r1")
	if err != nil {
		t.Fatalf("Lock after the holder was killed = %v", err)
	}
	unlock()
}

// Leases between two Stores (two processes' views) and within one.
func TestLease(t *testing.T) {
	a, dsn := openTemp(t)
	b, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	unlock, err := a.Lock(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lock(ctx, "r"); !errors.Is(err, journal.ErrLocked) {
		t.Errorf("second Lock in one Store = %v, want ErrLocked", err)
	}
	if _, err := b.Lock(ctx, "r"); !errors.Is(err, journal.ErrLocked) {
		t.Errorf("Lock from another Store = %v, want ErrLocked", err)
	}
	if h, _ := b.Holder(ctx, "other"); h != "" {
		t.Errorf("Holder of an unleased run = %q", h)
	}
	u2, err := b.Lock(ctx, "other")
	if err != nil {
		t.Fatalf("Lock of another run = %v", err)
	}
	u2()
	unlock()
	unlock() // idempotent
	if h, _ := b.Holder(ctx, "r"); h != "" {
		t.Errorf("Holder after unlock = %q", h)
	}
	ub, err := b.Lock(ctx, "r")
	if err != nil {
		t.Fatalf("Lock after unlock = %v", err)
	}
	// Close releases the Store's leases.
	b.Close()
	ua, err := a.Lock(ctx, "r")
	if err != nil {
		t.Fatalf("Lock after the holder's Close = %v", err)
	}
	ub() // a no-op on a closed store
	ua()
}

// An append through one Store wakes a Follow through another at once
// (LISTEN/NOTIFY), not at its next poll.
func TestFollowAcrossStores(t *testing.T) {
	w, dsn := openTemp(t)
	r, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got := make(chan journal.Event)
	go func() {
		// An hour's poll: only a notification can deliver in time.
		for e, err := range journal.Follow(ctx, r, "f", 1, time.Hour) {
			if err != nil {
				t.Error(err)
				return
			}
			got <- e
		}
	}()
	var after int64
	for i := range 5 {
		d := journal.Draft{Type: journal.ModelResponded, Time: time.Unix(int64(i+1), 0), Payload: []byte(`{}`)}
		if i == 0 {
			d.Type = journal.RunCreated
		}
		if _, err := w.Append(ctx, "f", after, d); err != nil {
			t.Fatal(err)
		}
		after++
		select {
		case e := <-got:
			if e.Seq != after {
				t.Fatalf("followed event %d, want %d", e.Seq, after)
			}
			if !r.Listening() {
				t.Error("a Store that delivered another's append does not report Listening: Follow would poll it often")
			}
		case <-ctx.Done():
			t.Fatalf("event %d never reached the follower", after)
		}
	}
}

// The system streams live in the same tables: two processes' identity
// directories writing at once keep one valid chain.
func TestIdentityStream(t *testing.T) {
	_, dsn := openTemp(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for w := range 2 {
		s, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		d := identity.NewDirectory(s, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if _, err := d.Create(t.Context(), &identity.CreateParams{Name: string(rune('a'+w)) + string(rune('a'+i))}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s, _ := postgres.Open(t.Context(), dsn)
	defer s.Close()
	evs, err := journal.ReadVerified(t.Context(), s, identity.StreamID)
	if err != nil || len(evs) != 20 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	if list, _ := identity.NewDirectory(s, nil).List(t.Context()); len(list) != 22 {
		t.Errorf("%d agents, want 20 and the 2 built-in", len(list))
	}
}
