package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
	var b bytes.Buffer
	q := func(s string) { j, _ := json.Marshal(s); b.Write(j) }
	b.WriteString(`{"run_id":`)
	q(e.RunID)
	b.WriteString(`,"seq":`)
	b.WriteString(strconv.FormatInt(e.Seq, 10))
	b.WriteString(`,"type":`)
	q(string(e.Type))
	b.WriteString(`,"time":`)
	q(e.Time.UTC().Format(TimeFormat))
	b.WriteString(`,"payload":`)
	if len(e.Payload) == 0 {
		b.WriteString("null")
	} else {
		b.Write(e.Payload)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ChainHash returns hex(SHA-256(prev ‖ Canonical(e))), where prev is the
// decoded bytes of prevHex.
func ChainHash(prevHex string, e *Event) (string, error) {
	prev, err := hex.DecodeString(prevHex)
	if err != nil || len(prev) != sha256.Size {
		return "", fmt.Errorf("journal: bad prev hash %q", prevHex)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(Canonical(e))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Seal fills e.PrevHash and e.Hash for an event that follows prevHex
// (use [GenesisHash] for the first event). It compacts e.Payload first, so
// that the stored bytes are the hashed bytes. Backends call it on append.
func Seal(prevHex string, e *Event) error {
	if len(e.Payload) == 0 {
		e.Payload = json.RawMessage("{}")
	} else {
		var b bytes.Buffer
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

// Clock returns the current time. Writers inject one so that tests and
// replays are deterministic; [time.Now] is the production clock.
type Clock func() time.Time
