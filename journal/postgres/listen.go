package postgres

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notify implements [journal.Notifier]: the channel receives after each
// append to runID, by this Store (before that Append returns) or by any
// other process on the database (when its NOTIFY arrives). The first call
// starts the Store's listener connection and waits (up to 10 s) until it
// listens, so that no append after Notify returns goes unseen.
func (s *Store) Notify(runID string) (<-chan struct{}, func()) {
	ch, stop := s.broker.Notify(runID)
	s.listenOnce.Do(s.startListener)
	return ch, stop
}

// Listening implements [journal.SharedNotifier]: it reports whether the
// Store's listener connection listens now (after the first Notify), so
// that readers woken by Notify need not poll for other processes'
// appends.
func (s *Store) Listening() bool { return s.listening.Load() }

// startListener runs LISTEN keel_events on a dedicated connection until
// Close, reconnecting with backoff when the connection fails.
func (s *Store) startListener() {
	ctx, cancel := context.WithCancel(context.Background())
	s.listenCancel, s.listenDone = cancel, make(chan struct{})
	cfg := connConfig(s.pool.Config().ConnConfig, "keel listener pid "+pidHost())
	ready := make(chan struct{})
	markReady := sync.OnceFunc(func() { close(ready) })
	go func() {
		defer close(s.listenDone)
		wait := 50 * time.Millisecond
		first := true
		for ctx.Err() == nil {
			if s.listenOnce1(ctx, cfg, first, markReady) {
				wait = 50 * time.Millisecond
			}
			first = false
			markReady() // a failed first connection does not hold Notify up
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
	}
}

// listenOnce1 connects, listens and delivers notifications until the
// connection fails or ctx ends. It reports whether it got as far as
// listening. On the first connection it closes ready once listening
// instead of waking every reader.
func (s *Store) listenOnce1(ctx context.Context, cfg *pgx.ConnConfig, first bool, markReady func()) bool {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false
	}
	s.listening.Store(true)
	defer s.listening.Store(false)
	if first {
		markReady()
	} else {
		// Appends by others while we reconnected sent no notification
		// we will see: wake every reader once to read again.
		s.broker.PublishAll()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		origin, run, ok := strings.Cut(n.Payload, " ")
		if !ok || origin == s.id {
			continue // our own appends woke our readers already
		}
		s.broker.Publish(run)
	}
}

func pidHost() string {
	host, _ := os.Hostname()
	return itoa(os.Getpid()) + " on " + host
}
