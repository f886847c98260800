package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// GenesisHash is the prev_hash of every run's first event: 32 zero bytes
// in hex.
var GenesisHash = hex.EncodeToString(make([]byte, sha256.Size))

// TimeFormat is how event times are rendered in the canonical form and by
// backends that store text: RFC 3339 with nanoseconds, always UTC.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// canonicalTimeLen is the length of a UTC time in TimeFormat.
const canonicalTimeLen = len("2006-01-02T15:04:05.000000000Z")

// ParseTime parses a time stored as text by a backend, which must be
// exactly what [TimeFormat] gives a UTC time, and returns it in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(TimeFormat, s)
	// A UTC time in TimeFormat is fixed-width and ends in "Z" (only the
	// hour's width varies in parsing): a string of that length and ending
	// that parses is in canonical form, which formatting it again to
	// compare (an allocation per time of every listed run) also said.
	if err == nil && (len(s) != canonicalTimeLen || s[len(s)-1] != 'Z') {
		err = errors.New("not in canonical form")
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q is not in journal.TimeFormat: %w", s, err)
	}
	return t.UTC(), nil
}

// Canonical returns the canonical byte form of e that its hash covers:
//
//	{"run_id":RUN,"seq":SEQ,"type":TYPE,"time":TIME,"payload":PAYLOAD}
//
// with keys in that order, strings JSON-escaped by encoding/json, TIME in
// [TimeFormat] (UTC) and PAYLOAD the stored compact payload bytes
// verbatim. PrevHash and Hash are not part of it.
func Canonical(e *Event) []byte {
	return appendCanonical(make([]byte, 0, canonicalSize(e)), e)
}

// canonicalSize is the length of e's canonical form when its strings
// need no escaping, a capacity that avoids growing the buffer.
func canonicalSize(e *Event) int {
	return len(`{"run_id":"","seq":,"type":"","time":"","payload":}`) + len(e.RunID) + 20 + len(e.Type) + canonicalTimeLen + max(len(e.Payload), 4)
}

// appendCanonical appends e's canonical form to b.
func appendCanonical(b []byte, e *Event) []byte {
	b = append(b, `{"run_id":`...)
	b = appendJSONString(b, e.RunID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, string(e.Type))
	b = append(b, `,"time":"`...)
	// A time in TimeFormat needs no escaping.
	b = e.Time.UTC().AppendFormat(b, TimeFormat)
	b = append(b, `","payload":`...)
	if len(e.Payload) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Payload...)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: quoted as it
// is when every byte is printable ASCII that it does not escape
// (quotes, backslashes and, as HTML-safe JSON, <, > and &), else through
// json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ChainHash returns hex(SHA-256(prev ‖ Canonical(e))), where prev is the
// decoded bytes of prevHex.
func ChainHash(prevHex string, e *Event) (string, error) {
	var prev [sha256.Size]byte
	if len(prevHex) != 2*sha256.Size {
		return "", fmt.Errorf("journal: bad prev hash %q", prevHex)
	}
	if _, err := hex.Decode(prev[:], []byte(prevHex)); err != nil {
		return "", fmt.Errorf("journal: bad prev hash %q", prevHex)
	}
	n := sha256.Size + canonicalSize(e)
	bp := hashBufs.Get().(*[]byte)
	b := *bp
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = appendCanonical(append(b[:0], prev[:]...), e)
	sum := sha256.Sum256(b)
	if cap(b) <= maxHashBuf {
		*bp = b
		hashBufs.Put(bp)
	}
	return hex.EncodeToString(sum[:]), nil
}

// hashBufs keeps the buffers ChainHash writes an event's canonical form
// into (every append and every verified event hashes one), up to
// maxHashBuf bytes each: a larger one (a long tool result) is left to
// the collector.
var hashBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxHashBuf = 64 << 10

// Seal fills e.PrevHash and e.Hash for an event that follows prevHex
// (use [GenesisHash] for the first event). It compacts e.Payload first, so
// that the stored bytes are the hashed bytes. Backends call it on append.
func Seal(prevHex string, e *Event) error {
	if len(e.Payload) == 0 {
		e.Payload = json.RawMessage("{}")
	} else {
		var b bytes.Buffer
		b.Grow(len(e.Payload))
		if err := json.Compact(&b, e.Payload); err != nil {
			return fmt.Errorf("journal: event %s payload is not JSON: %w", e.Type, err)
		}
		e.Payload = b.Bytes()
	}
	e.Time = e.Time.UTC().Round(0)
	h, err := ChainHash(prevHex, e)
	if err != nil {
		return err
	}
	e.PrevHash, e.Hash = prevHex, h
	return nil
}

// Verify checks that events are run's complete journal from sequence
// number 1: gap-free, each linked to the previous hash and each hash
// correct. It returns nil or a [*CorruptError] naming the first bad event.
func Verify(runID string, events []Event) error {
	return VerifyFrom(runID, GenesisHash, 1, events)
}

// VerifyFrom is [Verify] for a suffix of a journal that starts at seq
// first and follows an event whose hash is prev.
func VerifyFrom(runID, prev string, first int64, events []Event) error {
	for i := range events {
		e := &events[i]
		want := first + int64(i)
		switch {
		case e.RunID != runID:
			return &CorruptError{RunID: runID, Seq: e.Seq, Reason: fmt.Sprintf("event belongs to run %q", e.RunID)}
		case e.Seq != want:
			return &CorruptError{RunID: runID, Seq: want, Reason: fmt.Sprintf("sequence gap: found seq %d", e.Seq)}
		case e.PrevHash != prev:
			return &CorruptError{RunID: runID, Seq: e.Seq, Reason: "prev_hash does not match the previous event's hash"}
		}
		if !json.Valid(e.Payload) {
			return &CorruptError{RunID: runID, Seq: e.Seq, Reason: "payload is not valid JSON"}
		}
		h, err := ChainHash(prev, e)
		if err != nil {
			return &CorruptError{RunID: runID, Seq: e.Seq, Reason: err.Error()}
		}
		if h != e.Hash {
			return &CorruptError{RunID: runID, Seq: e.Seq, Reason: "hash does not match the event's content"}
		}
		prev = e.Hash
	}
	return nil
}

// VerifyShown is [VerifyFrom] for events as a server showed them to a
// reader (a suffix of run's journal that starts at seq first and follows
// an event whose hash is prev; "" takes the first event's link as it
// is). Where a reader may not see parts of a run (memory of another
// scope), the server marks the events it changed [Event.Redacted] and
// withholds the hashes of every event from the first that follows such
// parts (PrevHash and Hash empty): each of them commits to the hidden
// text, so a reader could test a guess of it against them. Each event
// shown with its hashes is checked whole, as [VerifyFrom] does; an event
// without them only by its run and sequence number, and none after it
// may carry hashes (a redacted event never does). The server's audit
// verifies the withheld ones. Every reader of a server's events checks
// them with it. Never use it on a journal read from a store or a file:
// there every hash is present, and [Verify] checks them all.
func VerifyShown(runID, prev string, first int64, events []Event) (Shown, error) {
	c := Shown{RunID: runID, Prev: prev, Next: first}
	for i := range events {
		if err := c.Add(&events[i]); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Shown checks a server's events one at a time (see [VerifyShown]).
type Shown struct {
	RunID string
	// Prev is the hash of the event before Next ("" unknown: the next
	// event's link is taken as it is).
	Prev string
	// Next is the sequence number the next event must have.
	Next int64
	// Checked counts the events checked whole, Redacted those shown with
	// parts hidden, Withheld those shown without their hashes, from seq
	// FirstWithheld on.
	Checked, Redacted, Withheld int
	FirstWithheld               int64
}

// Add checks e, the event after those added before.
func (c *Shown) Add(e *Event) error {
	switch {
	case e.RunID != c.RunID:
		return &CorruptError{RunID: c.RunID, Seq: e.Seq, Reason: fmt.Sprintf("event belongs to run %q", e.RunID)}
	case e.Seq != c.Next:
		return &CorruptError{RunID: c.RunID, Seq: c.Next, Reason: fmt.Sprintf("sequence gap: found seq %d", e.Seq)}
	}
	if e.Redacted {
		c.Redacted++
	}
	if e.Hash == "" && e.PrevHash == "" {
		if c.Withheld == 0 {
			c.FirstWithheld = e.Seq
		}
		c.Withheld++
		c.Prev, c.Next = "", e.Seq+1
		return nil
	}
	switch {
	case e.Redacted:
		return &CorruptError{RunID: c.RunID, Seq: e.Seq, Reason: "a redacted event carries hashes of the content it hides"}
	case c.Withheld > 0:
		return &CorruptError{RunID: c.RunID, Seq: e.Seq, Reason: "hashes shown after an event whose hashes were withheld"}
	}
	prev := c.Prev
	if prev == "" {
		prev = e.PrevHash
	}
	if err := VerifyFrom(c.RunID, prev, e.Seq, []Event{*e}); err != nil {
		return err
	}
	c.Checked++
	c.Prev, c.Next = e.Hash, e.Seq+1
	return nil
}

// Clock returns the current time. Writers inject one so that tests and
// replays are deterministic; [time.Now] is the production clock.
type Clock func() time.Time
