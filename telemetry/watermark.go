package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/keel-run/keel/journal"
)

// WatermarkKind is the kind of the records ([journal.Records]) that keep,
// per run, the newest journal position whose spans the collector
// acknowledged. The key is the run id, the value {"seq": N}.
const WatermarkKind = "telemetry.export"

// Watermarks reads and advances the export watermarks of runs: a run's
// watermark N says that the spans ending at its events 1..N reached the
// collector. A process that derives a run's earlier events (a resume
// after kill -9, a restart of keel serve) exports the spans of the events
// after the watermark, with their deterministic ids, so that nothing the
// collector acknowledged is sent twice and nothing it did not is lost.
//
// Several processes may advance one run's watermark (compare-and-swap;
// it only grows). Safe for concurrent use.
type Watermarks struct {
	rec journal.Records

	mu    sync.Mutex
	cache map[string]mark
}

type mark struct{ seq, version int64 }

type watermarkValue struct {
	Seq int64 `json:"seq"`
}

// maxCachedMarks bounds the runs whose watermark versions are cached.
const maxCachedMarks = 10000

// NewWatermarks returns the watermarks kept in rec.
func NewWatermarks(rec journal.Records) *Watermarks {
	return &Watermarks{rec: rec, cache: map[string]mark{}}
}

func decodeMark(r *journal.Record) (mark, error) {
	var v watermarkValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return mark{}, fmt.Errorf("telemetry: export watermark of run %s: %w", r.Key, err)
	}
	return mark{seq: v.Seq, version: r.Version}, nil
}

func (w *Watermarks) load(ctx context.Context, runID string) (mark, error) {
	r, err := w.rec.GetRecord(ctx, WatermarkKind, runID)
	if errors.Is(err, journal.ErrNotFound) {
		return mark{}, nil
	}
	if err != nil {
		return mark{}, err
	}
	return decodeMark(r)
}

// Get returns run's watermark: 0 when none of its spans was acknowledged
// (or it was never exported).
func (w *Watermarks) Get(ctx context.Context, runID string) (int64, error) {
	m, err := w.load(ctx, runID)
	if err != nil {
		return 0, err
	}
	w.remember(runID, m)
	return m.seq, nil
}

func (w *Watermarks) remember(runID string, m mark) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.cache[runID]; ok && old.version >= m.version {
		return
	}
	if len(w.cache) >= maxCachedMarks {
		for k := range w.cache {
			delete(w.cache, k)
			break
		}
	}
	w.cache[runID] = m
}

// Advance raises run's watermark to seq (a lower seq changes nothing).
func (w *Watermarks) Advance(ctx context.Context, runID string, seq int64) error {
	w.mu.Lock()
	m, ok := w.cache[runID]
	w.mu.Unlock()
	if !ok {
		var err error
		if m, err = w.load(ctx, runID); err != nil {
			return err
		}
	}
	val, err := json.Marshal(watermarkValue{Seq: seq})
	if err != nil {
		return err
	}
	for range 5 {
		if m.seq >= seq {
			w.remember(runID, m)
			return nil
		}
		v, err := w.rec.PutRecord(ctx, WatermarkKind, runID, val, m.version)
		if err == nil {
			w.remember(runID, mark{seq: seq, version: v})
			return nil
		}
		if !errors.Is(err, journal.ErrConflict) {
			return err
		}
		// Another process moved it (or our cached version is stale).
		if m, err = w.load(ctx, runID); err != nil {
			return err
		}
	}
	return fmt.Errorf("telemetry: export watermark of run %s: too many concurrent writers", runID)
}

// All returns every run's watermark.
func (w *Watermarks) All(ctx context.Context) (map[string]int64, error) {
	recs, err := w.rec.ListRecords(ctx, WatermarkKind)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(recs))
	for i := range recs {
		m, err := decodeMark(&recs[i])
		if err != nil {
			return nil, err
		}
		out[recs[i].Key] = m.seq
	}
	return out, nil
}
