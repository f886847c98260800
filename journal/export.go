package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// WriteJSONL writes events to w as JSON Lines, one event per line, for
// audit exports and for checked-in replay journals:
//
//	{"run_id":RUN,"seq":SEQ,"type":TYPE,"time":TIME,"payload":PAYLOAD,"prev_hash":PREV,"hash":HASH}
//
// TIME is in [TimeFormat] and PAYLOAD is the event's payload bytes
// verbatim (never re-encoded: the hash covers them), so [ReadJSONL] gives
// back events equal to the originals and [Verify] still passes. Events are
// written as given; WriteJSONL checks no chain. It returns an error for an
// event whose payload is not valid JSON or is not compact (a raw newline
// would break the line format), naming the event, or w's first write
// error. Output is buffered: nothing is written past the first error.
func WriteJSONL(w io.Writer, events []Event) error {
	bw := bufio.NewWriter(w)
	var line bytes.Buffer
	for i := range events {
		e := &events[i]
		if !json.Valid(e.Payload) {
			return fmt.Errorf("journal: write jsonl: run %s event %d: payload is not valid JSON", e.RunID, e.Seq)
		}
		if bytes.ContainsAny(e.Payload, "\r\n") {
			return fmt.Errorf("journal: write jsonl: run %s event %d: payload is not compact JSON", e.RunID, e.Seq)
		}
		line.Reset()
		str := func(s string) { j, _ := json.Marshal(s); line.Write(j) }
		line.WriteString(`{"run_id":`)
		str(e.RunID)
		line.WriteString(`,"seq":`)
		line.WriteString(strconv.FormatInt(e.Seq, 10))
		line.WriteString(`,"type":`)
		str(string(e.Type))
		line.WriteString(`,"time":`)
		str(e.Time.UTC().Format(TimeFormat))
		line.WriteString(`,"payload":`)
		line.Write(e.Payload)
		line.WriteString(`,"prev_hash":`)
		str(e.PrevHash)
		line.WriteString(`,"hash":`)
		str(e.Hash)
		line.WriteString("}\n")
		if _, err := bw.Write(line.Bytes()); err != nil {
			return fmt.Errorf("journal: write jsonl: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("journal: write jsonl: %w", err)
	}
	return nil
}

// TornTail describes a last line of a JSON Lines journal that is not a
// complete record: what a crash in the middle of writing it leaves behind.
// [ReadJSONL] reports it instead of failing, because the records before it
// are intact; truncating the file to Offset removes it.
type TornTail struct {
	// Line is the 1-based line number of the torn record.
	Line int
	// Offset is the byte offset at which the torn record starts.
	Offset int64
	// Size is the number of bytes from Offset to the end of the input.
	Size int64
	// Reason says why the line is not a record.
	Reason string
}

// String describes the torn tail for logs.
func (t *TornTail) String() string {
	return fmt.Sprintf("torn record at line %d (offset %d, %d bytes): %s", t.Line, t.Offset, t.Size, t.Reason)
}

// jsonlEvent is the wire form of one line; pointers tell a missing field
// from a zero one.
type jsonlEvent struct {
	RunID    *string         `json:"run_id"`
	Seq      *int64          `json:"seq"`
	Type     *string         `json:"type"`
	Time     *string         `json:"time"`
	Payload  json.RawMessage `json:"payload"`
	PrevHash *string         `json:"prev_hash"`
	Hash     *string         `json:"hash"`
}

// ReadJSONL reads events written by [WriteJSONL] from r, with their
// payload bytes exactly as they appear in the input. Blank lines are
// skipped. Every complete (newline-terminated) line must be a record with
// all seven fields and no others; otherwise ReadJSONL returns a
// [*CorruptError] whose Reason names the line, with RunID and Seq those of
// the event after the last good one (empty and 0 if the first line is
// bad). The last line of the input, when it has no trailing newline and is
// not a valid record, is a torn write (cut short, or followed by junk such
// as the zero bytes a crash can leave): ReadJSONL reports it as a
// [*TornTail] and returns the events before it with a nil error. A valid
// record that merely lacks its final newline (as editors leave files) is
// accepted. A read error from r is returned, wrapped, with no events.
//
// ReadJSONL checks the line format only: call [Verify] on each run's
// events to check the chain.
func ReadJSONL(r io.Reader) ([]Event, *TornTail, error) {
	br := bufio.NewReader(r)
	var (
		events []Event
		offset int64
		line   int
	)
	for {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("journal: read jsonl: %w", err)
		}
		if len(raw) == 0 {
			return events, nil, nil
		}
		line++
		start := offset
		offset += int64(len(raw))
		last := err != nil // io.EOF: raw has no trailing newline
		if len(bytes.TrimSpace(raw)) == 0 {
			if last {
				return events, nil, nil
			}
			continue
		}
		e, perr := parseJSONLLine(raw)
		switch {
		case perr != nil && last:
			return events, &TornTail{Line: line, Offset: start, Size: offset - start, Reason: perr.Error()}, nil
		case perr != nil:
			bad := &CorruptError{Reason: fmt.Sprintf("jsonl line %d: %v", line, perr)}
			if n := len(events); n > 0 {
				bad.RunID, bad.Seq = events[n-1].RunID, events[n-1].Seq+1
			}
			return nil, nil, bad
		}
		events = append(events, e)
		if last {
			return events, nil, nil
		}
	}
}

func parseJSONLLine(raw []byte) (Event, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var w jsonlEvent
	if err := dec.Decode(&w); err != nil {
		return Event{}, fmt.Errorf("not a JSON record: %w", err)
	}
	if rest := bytes.TrimSpace(raw[dec.InputOffset():]); len(rest) > 0 {
		return Event{}, errors.New("junk after the record")
	}
	switch {
	case w.RunID == nil || *w.RunID == "":
		return Event{}, errors.New("missing run_id")
	case w.Seq == nil || *w.Seq < 1:
		return Event{}, errors.New("missing or non-positive seq")
	case w.Type == nil || *w.Type == "":
		return Event{}, errors.New("missing type")
	case w.Time == nil:
		return Event{}, errors.New("missing time")
	case len(w.Payload) == 0 || string(w.Payload) == "null":
		return Event{}, errors.New("missing payload")
	case w.PrevHash == nil || w.Hash == nil:
		return Event{}, errors.New("missing prev_hash or hash")
	}
	t, err := time.Parse(time.RFC3339Nano, *w.Time)
	if err != nil {
		return Event{}, fmt.Errorf("bad time: %w", err)
	}
	return Event{
		RunID:    *w.RunID,
		Seq:      *w.Seq,
		Type:     Type(*w.Type),
		Time:     t.UTC(),
		Payload:  bytes.Clone(w.Payload),
		PrevHash: *w.PrevHash,
		Hash:     *w.Hash,
	}, nil
}
