package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/keel-run/keel/journal"
)

// SweepInterval is how often [Live.Sweep] looks for runs whose spans no
// collector acknowledged; SweepIdle is how long a run must have been
// quiet first (so that a process still sending its spans is not
// duplicated).
const (
	SweepInterval = 2 * time.Minute
	SweepIdle     = time.Minute
)

// Sweep starts a server's sweep for runs that paused or ended in a
// process killed before their spans reached the collector (the server
// itself, keel run, a worker), at start and every [SweepInterval]: their
// spans are sent from the journal ([Live.RecoverPending]). The returned
// function stops it. A live export that is not durable sweeps nothing.
func (l *Live) Sweep(ctx context.Context, store journal.Store, logger *slog.Logger) (stop func()) {
	if l == nil || !l.Durable() {
		return func() {}
	}
	stopc, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		idle := 10 * time.Second // at start: nothing of ours is in flight
		for {
			if runs, err := store.Runs(ctx, nil); err == nil {
				if n, err := l.RecoverPending(ctx, runs, time.Now().Add(-idle)); err != nil {
					logger.Warn("telemetry: reading export watermarks", "err", err)
				} else if n > 0 {
					logger.Info("telemetry: exporting spans no collector acknowledged", "runs", n)
				}
			}
			idle = SweepIdle
			select {
			case <-ctx.Done():
				return
			case <-stopc:
				return
			case <-time.After(SweepInterval):
			}
		}
	}()
	return func() { close(stopc); <-done }
}

// ExportStored exports the trace of run runID from its journal in store
// (keel runs trace): the events are checked against their hash chain
// first, and the exporter is shut down within flush afterwards. It
// returns the number of spans sent, and an error when any failed or was
// dropped.
func ExportStored(ctx context.Context, cfg *Config, store journal.Store, runID string, flush time.Duration) (int, error) {
	evs, err := store.Read(ctx, runID, 1)
	if err != nil {
		return 0, err
	}
	if err := journal.Verify(runID, evs); err != nil {
		return 0, err
	}
	exp, err := NewExporter(ctx, cfg)
	if err != nil {
		return 0, err
	}
	n, err := exp.ExportRun(ctx, runID, evs)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flush)
	defer cancel()
	_ = exp.Shutdown(sctx)
	if err != nil {
		return n, fmt.Errorf("export trace of run %s: %w", runID, err)
	}
	if st := exp.Stats(); st.Failed > 0 || st.Dropped > 0 {
		return n, fmt.Errorf("export trace of run %s to %s: %d of %d spans failed (is the collector up?)", runID, cfg.Endpoint, st.Failed+st.Dropped, n)
	}
	return n, nil
}
