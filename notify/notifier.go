package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/keel-run/keel/journal"
)

// Source reports what needs a person: the waits of runs (approvals,
// credentials, inputs) and the runs that failed since a time. Keel's
// wiring implements it over the runtime and the schedules and triggers
// (which name each run's sinks).
type Source interface {
	Pending(ctx context.Context, since time.Time) ([]Item, error)
}

// DefaultBackoff is the wait before each retry of a failed delivery;
// after the last one the notification is given up (journaled).
var DefaultBackoff = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 3 * time.Hour}

// Options configures a [Notifier]. The zero value is valid but has no
// sinks.
type Options struct {
	// Sinks by name.
	Sinks map[string]Sink
	// Link returns the web UI address of an item ("" for none).
	Link func(it *Item) string
	// Clock gives event times and due times; nil means time.Now.
	Clock journal.Clock
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Interval is how often [Notifier.Run] scans and delivers when not
	// woken; 0 means 5 seconds.
	Interval time.Duration
	// Backoff replaces [DefaultBackoff].
	Backoff []time.Duration
	// Lease is how long an attempt holds a notification before another
	// process may try it (the first died mid-send); 0 means 2 minutes.
	Lease time.Duration
	// Timeout bounds one send; 0 means 30 seconds.
	Timeout time.Duration
	// Horizon is how far back a scan looks for failed runs; 0 means 24
	// hours.
	Horizon time.Duration
	// Holder names this process in the journal's attempts; "" means
	// "pid N on HOST".
	Holder string
}

// Notifier queues and delivers notifications; see the package comment.
// Several Notifiers (in several processes) may share a journal. It is
// safe for concurrent use.
type Notifier struct {
	source Source
	opts   Options
	clock  journal.Clock
	logger *slog.Logger
	s      *journal.Stream
	wake   chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	order   []string
}

type entry struct {
	Notification
	leaseHolder string
	leaseUntil  time.Time
}

// Notification is one notification and what became of it.
type Notification struct {
	Message  *Message  `json:"message"`
	Sink     string    `json:"sink"`
	Queued   time.Time `json:"queued"`
	Attempts int       `json:"attempts"`
	// State is queued, delivered or gave_up.
	State     string    `json:"state"`
	LastError string    `json:"last_error,omitempty"`
	Next      time.Time `json:"next,omitzero"`
	Delivered time.Time `json:"delivered,omitzero"`
}

// Payloads of the stream's events.
type (
	queued struct {
		Sink    string   `json:"sink"`
		Message *Message `json:"message"`
	}
	attempted struct {
		ID      string    `json:"id"`
		Attempt int       `json:"attempt"`
		Holder  string    `json:"holder"`
		Until   time.Time `json:"until"`
	}
	outcome struct {
		ID      string    `json:"id"`
		Attempt int       `json:"attempt"`
		Error   string    `json:"error,omitempty"`
		Next    time.Time `json:"next,omitzero"`
	}
)

// New returns a notifier journaling to store and asking source. It reads
// nothing until used.
func New(store journal.Store, source Source, opts *Options) *Notifier {
	n := &Notifier{source: source, entries: map[string]*entry{}, wake: make(chan struct{}, 1)}
	if opts != nil {
		n.opts = *opts
	}
	n.clock = n.opts.Clock
	if n.clock == nil {
		n.clock = time.Now
	}
	n.logger = n.opts.Logger
	if n.logger == nil {
		n.logger = slog.New(slog.DiscardHandler)
	}
	if n.opts.Interval <= 0 {
		n.opts.Interval = 5 * time.Second
	}
	if len(n.opts.Backoff) == 0 {
		n.opts.Backoff = DefaultBackoff
	}
	if n.opts.Lease <= 0 {
		n.opts.Lease = 2 * time.Minute
	}
	if n.opts.Timeout <= 0 {
		n.opts.Timeout = 30 * time.Second
	}
	if n.opts.Horizon <= 0 {
		n.opts.Horizon = 24 * time.Hour
	}
	if n.opts.Holder == "" {
		host, _ := os.Hostname()
		n.opts.Holder = fmt.Sprintf("pid %d on %s", os.Getpid(), host)
	}
	n.s = journal.NewStream(store, StreamID, n.clock, n.apply)
	return n
}

func (n *Notifier) apply(e *journal.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch e.Type {
	case Queued:
		var p queued
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		if p.Message == nil || n.entries[p.Message.ID] != nil {
			return fmt.Errorf("notification queued twice or without a message")
		}
		n.entries[p.Message.ID] = &entry{Notification: Notification{Message: p.Message, Sink: p.Sink, Queued: e.Time, State: "queued", Next: e.Time}}
		n.order = append(n.order, p.Message.ID)
		return nil
	case Attempted:
		var p attempted
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		en := n.entries[p.ID]
		if en == nil {
			return fmt.Errorf("attempt of unknown notification %s", p.ID)
		}
		en.Attempts, en.leaseHolder, en.leaseUntil = p.Attempt, p.Holder, p.Until
		return nil
	}
	var p outcome
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return err
	}
	en := n.entries[p.ID]
	if en == nil {
		return fmt.Errorf("outcome of unknown notification %s", p.ID)
	}
	en.leaseHolder, en.leaseUntil = "", time.Time{}
	switch e.Type {
	case Delivered:
		en.State, en.Delivered, en.Next = "delivered", e.Time, time.Time{}
	case Failed:
		en.LastError, en.Next = p.Error, p.Next
	case GaveUp:
		en.State, en.LastError, en.Next = "gave_up", p.Error, time.Time{}
	default:
		return fmt.Errorf("unknown event type %s", e.Type)
	}
	return nil
}

// Wake asks the loop of [Notifier.Run] to scan now (an approval was just
// requested in this process). It never blocks.
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run scans and delivers every [Options.Interval], and when woken, until
// ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	t := time.NewTicker(n.opts.Interval)
	defer t.Stop()
	for {
		if err := n.Tick(ctx); err != nil && ctx.Err() == nil {
			n.logger.Warn("notify: tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.wake:
		}
	}
}

// Tick queues what the source reports and is not queued yet, then
// delivers what is due.
func (n *Notifier) Tick(ctx context.Context) error {
	return errors.Join(n.Scan(ctx), n.Deliver(ctx))
}

// Scan queues a notification per item and sink that has none yet.
func (n *Notifier) Scan(ctx context.Context) error {
	items, err := n.source.Pending(ctx, n.clock().Add(-n.opts.Horizon))
	if err != nil {
		return fmt.Errorf("notify: pending items: %w", err)
	}
	if err := n.s.Sync(ctx); err != nil {
		return err
	}
	var todo []journal.Item
	var ids []string
	for i := range items {
		it := &items[i]
		for _, sink := range it.Sinks {
			link := ""
			if n.opts.Link != nil {
				link = n.opts.Link(it)
			}
			m := message(it, sink, link)
			n.mu.Lock()
			have := n.entries[m.ID] != nil
			n.mu.Unlock()
			if !have && !slices.Contains(ids, m.ID) {
				todo = append(todo, journal.Item{Type: Queued, Value: &queued{Sink: sink, Message: m}})
				ids = append(ids, m.ID)
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	_, err = n.s.AppendMany(ctx, todo, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, id := range ids {
			if n.entries[id] != nil {
				return errQueued
			}
		}
		return nil
	})
	if errors.Is(err, errQueued) {
		return n.Scan(ctx) // another process queued some meanwhile
	}
	return err
}

var errQueued = errors.New("notify: queued already")

// Deliver sends every queued notification that is due and not held by
// another process's attempt, at most four at a time, and journals each
// attempt and its outcome.
func (n *Notifier) Deliver(ctx context.Context) error {
	if err := n.s.Sync(ctx); err != nil {
		return err
	}
	now := n.clock()
	n.mu.Lock()
	var due []string
	for _, id := range n.order {
		if en := n.entries[id]; n.dueLocked(en, now) {
			due = append(due, id)
		}
	}
	n.mu.Unlock()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(due))
	for i, id := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = n.deliverOne(ctx, id)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (n *Notifier) dueLocked(en *entry, now time.Time) bool {
	return en.State == "queued" && !en.Next.After(now) && (en.leaseHolder == "" || en.leaseUntil.Before(now))
}

func (n *Notifier) deliverOne(ctx context.Context, id string) error {
	now := n.clock()
	n.mu.Lock()
	en := n.entries[id]
	attempt, m, sinkName := en.Attempts+1, en.Message, en.Sink
	n.mu.Unlock()
	_, err := n.s.Append(ctx, Attempted, &attempted{ID: id, Attempt: attempt, Holder: n.opts.Holder, Until: now.Add(n.opts.Lease)}, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if en := n.entries[id]; en.Attempts+1 != attempt || !n.dueLocked(en, n.clock()) {
			return errQueued
		}
		return nil
	})
	if errors.Is(err, errQueued) {
		return nil // another process took it, or it was delivered
	}
	if err != nil {
		return err
	}
	sink := n.opts.Sinks[sinkName]
	var sendErr error
	if sink == nil {
		sendErr = fmt.Errorf("no sink named %q is configured", sinkName)
	} else {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.Timeout)
		sendErr = sink.Send(sctx, m)
		cancel()
	}
	switch {
	case sendErr == nil:
		_, err = n.s.Append(ctx, Delivered, &outcome{ID: id, Attempt: attempt}, nil)
	case sink == nil || attempt > len(n.opts.Backoff):
		_, err = n.s.Append(ctx, GaveUp, &outcome{ID: id, Attempt: attempt, Error: sendErr.Error()}, nil)
	default:
		_, err = n.s.Append(ctx, Failed, &outcome{ID: id, Attempt: attempt, Error: sendErr.Error(), Next: n.clock().Add(n.opts.Backoff[attempt-1])}, nil)
	}
	if sendErr != nil {
		n.logger.Warn("notify: delivery failed", "sink", sinkName, "run_id", m.RunID, "attempt", attempt, "err", sendErr)
	}
	return err
}

// List returns the notifications journaled, oldest first (last > 0: the
// newest last), optionally of one run.
func (n *Notifier) List(ctx context.Context, runID string, last int) ([]Notification, error) {
	if err := n.s.Sync(ctx); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Notification
	for _, id := range n.order {
		en := n.entries[id]
		if runID == "" || en.Message.RunID == runID {
			out = append(out, en.Notification)
		}
	}
	if last > 0 && len(out) > last {
		out = out[len(out)-last:]
	}
	return out, nil
}
