package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Several servers may share one journal (a PostgreSQL database; also one
// SQLite file on one machine). Any of them answers the API; each run
// executes in one place, the process holding its lease ([journal.Locker]).
// What one server decides for a run another executes travels through the
// journal:
//
//   - approvals and denials are events of the run itself: the run is
//     paused (no one executes it), so the deciding server records the
//     decision and executes the run on;
//   - a cancel of a run executing elsewhere is a request in the control
//     stream, which every server follows ([journal.Follow]; with
//     PostgreSQL woken by LISTEN/NOTIFY): the executing server cancels
//     its execution, which journals run.canceled naming the person;
//   - runs left by a server that died (its leases freed themselves) are
//     adopted by the others every [Options.Adopt].

// ControlStream holds requests between the servers sharing a journal.
const ControlStream = "_keel.control"

// CancelRequested is a person's request, made through one server, to
// cancel a run another process executes.
const CancelRequested journal.Type = "run.cancel_requested"

// cancelRequest is the payload of [CancelRequested].
type cancelRequest struct {
	RunID string `json:"run_id"`
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
}

// defaultCancelWait bounds how long a cancel waits for the process that
// executes the run to record it.
const defaultCancelWait = 30 * time.Second

// stopContext returns a context canceled when Shutdown begins.
func (s *Service) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// followControl acts on the control stream's requests from its end at
// the start, until Shutdown.
func (s *Service) followControl() {
	defer s.sweeping.Done()
	ctx, cancel := s.stopContext()
	defer cancel()
	store := s.rt.Store()
	from := int64(1)
	if evs, err := store.Read(ctx, ControlStream, 1); err == nil {
		from = int64(len(evs)) + 1
	}
	for ctx.Err() == nil {
		for e, err := range journal.Follow(ctx, store, ControlStream, from, s.opts.Poll) {
			if err != nil {
				s.logger.Error("follow the control stream", "err", err)
				break
			}
			from = e.Seq + 1
			if e.Type != CancelRequested {
				continue
			}
			var req cancelRequest
			if err := json.Unmarshal(e.Payload, &req); err != nil {
				s.logger.Error("control stream: bad cancel request", "seq", e.Seq, "err", err)
				continue
			}
			if s.pool.cancelHere(req.RunID, agent.CanceledByToken(req.By, req.Token)) {
				s.logger.Info("canceling run at another server's request", "run_id", req.RunID, "by", req.By)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.opts.Poll):
		}
	}
}

// cancelElsewhere asks the process executing run id (another server) to
// cancel it, and waits until the run records the cancel. A run that
// pauses meanwhile (it stopped before the request arrived) is canceled
// here. It returns ErrElsewhere if the executing process does not act
// within the wait (it is not a server: a keel run in a terminal).
func (s *Service) cancelElsewhere(ctx context.Context, id string, who *Caller, record func() error) error {
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return err
	}
	req := &cancelRequest{RunID: id}
	if who != nil {
		req.By, req.Token = who.Name, who.ID
	}
	if _, err := s.control.Append(ctx, CancelRequested, req, nil); err != nil {
		return err
	}
	wait := s.opts.CancelWait
	if wait <= 0 {
		wait = defaultCancelWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for e, err := range journal.Follow(wctx, s.rt.Store(), id, run.Events+1, s.opts.Poll) {
		if err != nil {
			return err
		}
		switch st := journal.StatusOf(e.Type); {
		case e.Type == journal.RunCanceled:
			return nil
		case st.Terminal():
			return conflict("run_ended", "run %s ended %s before the cancel reached it", id, st)
		case st == journal.StatusPaused || s.leaseFree(ctx, id):
			// Nobody executes it now (it paused, or a worker is between
			// two of its steps and missed the request): record the
			// cancel here.
			if err := record(); !errors.Is(err, ErrElsewhere) {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (it did not act on the cancel request within %s: is it a keel run in a terminal? stop it there)", ErrElsewhere, wait)
}

// adopt submits, every Options.Adopt until Shutdown, the runs that should
// be executing but that no process holds: their executor died.
//
// A server that hands runs to workers ([Options.Dispatcher]) finds many
// such runs that are not lost: between two steps a run holds no lease
// while its workflow waits for a worker slot. Handing each of them to
// Dispatcher.Adopt at every sweep cost one look at its workflow per run
// every few seconds (the Temporal server's and this server's CPU). A run
// handed to the workers is handed again only once its journal moved
// (its newest event changed: a decision, a step) or after
// [adoptAgain] sweeps: its workflow, once woken or found with a step
// pending, looks at the journal by itself.
func (s *Service) adopt() {
	defer s.sweeping.Done()
	ctx, cancel := s.stopContext()
	defer cancel()
	t := time.NewTicker(s.opts.Adopt)
	defer t.Stop()
	type handed struct {
		seq   int64
		sweep int
	}
	seen := map[string]handed{}
	for sweep := 1; ; sweep++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var skip func(string, int64) bool
		candidates := map[string]int64{}
		if s.pool.dispatcher != nil {
			skip = func(id string, seq int64) bool {
				candidates[id] = seq
				hd, ok := seen[id]
				return ok && hd.seq == seq && sweep-hd.sweep < adoptAgain
			}
		}
		ids, err := s.orphans(ctx, s.opts.Clock().Add(-s.opts.Adopt), skip)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Error("look for runs left by a stopped process", "err", err)
			}
			continue
		}
		for id, hd := range seen {
			if sweep-hd.sweep >= adoptAgain {
				delete(seen, id)
			}
		}
		n := 0
		for _, id := range ids {
			if err := s.pool.adoptRun(id); err != nil {
				break
			}
			n++
			if skip != nil {
				seen[id] = handed{seq: candidates[id], sweep: sweep}
			}
		}
		if s.adoptSwept != nil {
			s.adoptSwept(n)
		}
		switch {
		case n > 0 && skip == nil:
			s.logger.Info("adopted runs whose executor stopped", "runs", n)
		case n > 0:
			s.logger.Debug("handed runs that no process holds to the workers", "runs", n)
		}
	}
}

// adoptAgain is the number of adoption sweeps after which a server that
// hands runs to workers looks again at a run it handed over whose
// journal has not moved since.
const adoptAgain = 12

// leaseFree reports whether no process holds run id's lease (true for a
// store without leases).
func (s *Service) leaseFree(ctx context.Context, id string) bool {
	l, ok := s.rt.Store().(journal.Locker)
	if !ok {
		return true
	}
	holder, err := l.Holder(ctx, id)
	return err == nil && holder == ""
}

// cancelHere cancels runID's execution in this pool, if it executes
// here, with cause; it reports whether it did.
func (p *pool) cancelHere(runID string, cause error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.active[runID]
	if x == nil || x.canceling {
		return false
	}
	x.again = false
	x.cancel(cause)
	return true
}

// Principals is the gate's principal check of a server's runs over the
// identity directory d, for processes that execute them on the server's
// behalf (keel worker).
func Principals(d *identity.Directory) policy.PrincipalCheck { return principals(d) }
