//go:build linux

package linux

import "time"

// guardCostFactor is how many times the duration of the last periodic
// check the next one waits at least, so checks take at most 1/20 of one
// CPU while commands run.
const guardCostFactor = 20

// startWatch starts the periodic git check (see [Options].GuardInterval):
// while at least one command runs, the guard checks the workspace every
// interval, so a file a long command plants is quarantined within about
// one interval instead of when the command ends. Close stops it.
func (s *Sandbox) startWatch() {
	if s.guard == nil || s.opts.GuardInterval < 0 {
		return
	}
	interval := s.opts.GuardInterval
	if interval == 0 {
		interval = DefaultGuardInterval
	}
	s.watchEnd = make(chan struct{})
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-s.watchEnd:
				return
			case <-t.C:
			}
			next := interval
			if s.running.Load() > 0 {
				start := time.Now()
				// Findings are journaled now (OnQuarantine) and written to
				// the output of the next command that ends.
				s.checkWorkspace(nil)
				next = max(interval, guardCostFactor*time.Since(start))
			}
			t.Reset(next)
		}
	}()
}

// stopWatch stops the periodic check and waits for a check in progress.
func (s *Sandbox) stopWatch() {
	if s.watchEnd != nil {
		close(s.watchEnd)
		s.watching.Wait()
	}
}
