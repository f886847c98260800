// Package backend holds the parts every journal backend shares: draft
// validation and sealing ([Seal]) and the in-process wake-up broker behind
// [journal.Notifier] ([Broker]).
//
// It is internal so that its shape can change with the backends; a backend
// outside this module seals with [journal.Seal] directly.
package backend

import (
	"bytes"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/keel-run/keel/journal"
)

// minTime and maxTime bound the event times a backend accepts: years 1 to
// 9999 are exactly the times that [journal.TimeFormat] renders in fixed
// width, so that stored time text sorts chronologically.
var (
	minTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// CheckRunID returns an error unless runID is a non-empty, valid UTF-8
// string without control characters (a run ID is a key in URLs, file names
// and logs).
func CheckRunID(runID string) error {
	if runID == "" {
		return fmt.Errorf("journal: empty run id")
	}
	if !utf8.ValidString(runID) {
		return fmt.Errorf("journal: run id %q is not valid UTF-8", runID)
	}
	for _, r := range runID {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("journal: run id %q contains a control character", runID)
		}
	}
	return nil
}

// Seal validates drafts and turns them into the events that follow the
// event with sequence number after and hash prevHash (use
// [journal.GenesisHash] and 0 for a new run). Each draft needs a non-empty,
// valid UTF-8 type, a time in years 1 to 9999, and a payload that is a JSON
// object (empty means {}); the payload is compacted by [journal.Seal] and
// copied, so the returned events share no memory with drafts. The first
// invalid draft fails the whole batch with an error naming its index.
func Seal(runID string, after int64, prevHash string, drafts []journal.Draft) ([]journal.Event, error) {
	if err := CheckRunID(runID); err != nil {
		return nil, err
	}
	if len(drafts) == 0 {
		return nil, fmt.Errorf("journal: append to run %s: no drafts", runID)
	}
	if after < 0 {
		return nil, fmt.Errorf("journal: append to run %s: negative after %d", runID, after)
	}
	events := make([]journal.Event, len(drafts))
	prev := prevHash
	for i, d := range drafts {
		if err := checkDraft(&d); err != nil {
			return nil, fmt.Errorf("journal: append to run %s: draft %d: %w", runID, i, err)
		}
		// journal.Seal compacts the payload into bytes of its own:
		// the event never shares the draft's.
		e := journal.Event{
			RunID:   runID,
			Seq:     after + 1 + int64(i),
			Type:    d.Type,
			Time:    d.Time,
			Payload: d.Payload,
		}
		if err := journal.Seal(prev, &e); err != nil {
			return nil, fmt.Errorf("journal: append to run %s: draft %d: %w", runID, i, err)
		}
		prev = e.Hash
		events[i] = e
	}
	return events, nil
}

func checkDraft(d *journal.Draft) error {
	switch {
	case d.Type == "":
		return fmt.Errorf("empty type")
	case !utf8.ValidString(string(d.Type)):
		return fmt.Errorf("type %q is not valid UTF-8", d.Type)
	case d.Time.IsZero():
		return fmt.Errorf("type %s: zero time (inject a clock)", d.Type)
	}
	if t := d.Time.UTC(); t.Before(minTime) || t.After(maxTime) {
		return fmt.Errorf("type %s: time %s is outside years 1 to 9999", d.Type, t.Format(time.RFC3339Nano))
	}
	if p := bytes.TrimLeft(d.Payload, " \t\r\n"); len(p) > 0 && p[0] != '{' {
		return fmt.Errorf("type %s: payload is not a JSON object", d.Type)
	}
	return nil
}

// Broker fans append wake-ups out to in-process readers; it implements
// [journal.Notifier] for a backend that embeds or wraps it. The zero value
// is ready to use and safe for concurrent use.
//
// Delivery is lossy by design: each subscriber has a one-slot channel and a
// wake-up finding it full is dropped, since one pending wake-up already
// tells the reader to read again.
type Broker struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Notify subscribes to wake-ups for runID. The returned channel receives
// after each [Broker.Publish] of runID; stop unsubscribes and may be called
// more than once. The channel is never closed.
func (b *Broker) Notify(runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = make(map[string]map[chan struct{}]struct{})
	}
	m := b.subs[runID]
	if m == nil {
		m = make(map[chan struct{}]struct{})
		b.subs[runID] = m
	}
	m[ch] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.subs[runID], ch)
			if len(b.subs[runID]) == 0 {
				delete(b.subs, runID)
			}
		})
	}
}

// Publish wakes every subscriber of runID without blocking. Backends call
// it after an append commits and before Append returns, so a reader that
// subscribed before the append is guaranteed a pending wake-up.
func (b *Broker) Publish(runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs[runID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// PublishAll wakes every subscriber of every run, as after a gap in which
// wake-ups may have been lost (a backend's notification connection
// reconnecting).
func (b *Broker) PublishAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.subs {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
