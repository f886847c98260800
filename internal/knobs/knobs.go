// Package knobs reads KEEL_DEBUG, the one variable of Keel's unstable
// test and diagnosis toggles (crash injection for the crash-safety
// harness, profiles, injected evaluation faults, test roots for the
// egress proxy). Only front ends call it; libraries take options.
package knobs

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/journal"
)

// Knobs are unstable test toggles read from KEEL_DEBUG, a
// comma-separated list of key=value (docs/architecture.md, "Conventions":
// one knob variable, parsed only here). Known keys:
//
//	crash_after_event=N   SIGKILL this process right after the append that
//	                      stores event N of a run (the crash-safety harness)
//	crash_after_append=N  SIGKILL this process right after its N-th append
//	                      to any run (a team: the lead and its children,
//	                      which run in the same process)
//	cpu_profile=FILE      write a pprof CPU profile of this process to FILE
//	                      until the command returns (the cluster benchmarks)
//	mem_profile=FILE      write a pprof heap profile (live and allocated
//	                      bytes, every allocation sampled per 64 KiB) to
//	                      FILE when the command returns
//	eval_fault=KIND@N     keel eval run: the N-th attempt meets an injected
//	                      provider (503) or sandbox failure (KIND provider
//	                      or sandbox), to check it is counted as the
//	                      infrastructure's and retried
//	egress_roots=FILE     the sandbox's egress proxy verifies the hosts of
//	                      secrets for hosts (--secret-for-host) against the
//	                      certificates of this PEM file instead of the
//	                      system's roots (a local TLS server in tests)
type Knobs struct {
	EgressRoots      string
	CrashAfterEvent  int64
	CrashAfterAppend int64
	CPUProfile       string
	MemProfile       string
	EvalFault        evalrun.Fault
}

// Parse reads the knobs of s, KEEL_DEBUG's value; an unknown key or a
// bad value is an error.
func Parse(s string) (Knobs, error) {
	var k Knobs
	for kv := range strings.SplitSeq(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		key, val, _ := strings.Cut(kv, "=")
		switch key {
		case "crash_after_event":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 1 {
				return k, fmt.Errorf("KEEL_DEBUG: crash_after_event=%q: want a positive event number", val)
			}
			k.CrashAfterEvent = n
		case "crash_after_append":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 1 {
				return k, fmt.Errorf("KEEL_DEBUG: crash_after_append=%q: want a positive number of appends", val)
			}
			k.CrashAfterAppend = n
		case "cpu_profile":
			if val == "" {
				return k, fmt.Errorf("KEEL_DEBUG: cpu_profile needs a file name")
			}
			k.CPUProfile = val
		case "eval_fault":
			kind, n, _ := strings.Cut(val, "@")
			at, err := strconv.Atoi(n)
			if (kind != "provider" && kind != "sandbox") || err != nil || at < 1 {
				return k, fmt.Errorf("KEEL_DEBUG: eval_fault=%q: want provider@N or sandbox@N", val)
			}
			k.EvalFault = evalrun.Fault{Kind: kind, At: at}
		case "egress_roots":
			if val == "" {
				return k, fmt.Errorf("KEEL_DEBUG: egress_roots needs a file name")
			}
			k.EgressRoots = val
		case "mem_profile":
			if val == "" {
				return k, fmt.Errorf("KEEL_DEBUG: mem_profile needs a file name")
			}
			k.MemProfile = val
		default:
			return k, fmt.Errorf("KEEL_DEBUG: unknown knob %q", key)
		}
	}
	return k, nil
}

// Profile starts the profiles KEEL_DEBUG (read with getenv) asks for,
// if any, and returns the function that stops and writes them.
func Profile(getenv func(string) string) func() {
	k, err := Parse(getenv("KEEL_DEBUG"))
	if err != nil {
		return func() {} // a bad value is reported where the journal opens
	}
	stopCPU := func() {}
	if k.CPUProfile != "" {
		if f, err := os.Create(k.CPUProfile); err == nil {
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
			} else {
				stopCPU = func() { pprof.StopCPUProfile(); f.Close() }
			}
		}
	}
	if k.MemProfile == "" {
		return stopCPU
	}
	// Sample finely enough to see a run's per-step allocations; set
	// before anything of the command allocates.
	runtime.MemProfileRate = 64 << 10
	return func() {
		stopCPU()
		f, err := os.Create(k.MemProfile)
		if err != nil {
			return
		}
		defer f.Close()
		runtime.GC() // the live figures as of the end
		pprof.Lookup("allocs").WriteTo(f, 0)
	}
}

// Store is s with the knobs of k that act on a journal store applied:
// crash_after_event and crash_after_append; s itself when k has none.
func (k Knobs) Store(s journal.Store) journal.Store {
	if k.CrashAfterEvent > 0 || k.CrashAfterAppend > 0 {
		return &crashStore{Store: s, after: k.CrashAfterEvent, appends: k.CrashAfterAppend}
	}
	return s
}

// crashStore kills the process, as kill -9 would, right after the append
// that stores event number after of a run: the append is durable, and
// nothing that follows it in the runtime happens.
// With appends set, it kills the process right after its appends-th
// append to any run instead.
type crashStore struct {
	journal.Store
	after   int64
	appends int64
	n       atomic.Int64
}

func (s *crashStore) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return s.kill(runID, func() ([]journal.Event, error) { return s.Store.Append(ctx, runID, after, drafts...) })
}

// AppendDeferred passes deferred appends through (the process is killed
// after them too: what kill -9 leaves of them is what a crash leaves),
// when the store defers.
func (s *crashStore) AppendDeferred(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	d, ok := s.Store.(journal.Deferrer)
	if !ok {
		return s.Append(ctx, runID, after, drafts...)
	}
	return s.kill(runID, func() ([]journal.Event, error) { return d.AppendDeferred(ctx, runID, after, drafts...) })
}

// Sync passes through.
func (s *crashStore) Sync(ctx context.Context) error {
	if d, ok := s.Store.(journal.Deferrer); ok {
		return d.Sync(ctx)
	}
	return nil
}

// kill makes the append and kills the process after it if it is the one.
func (s *crashStore) kill(runID string, app func() ([]journal.Event, error)) ([]journal.Event, error) {
	evs, err := app()
	if err != nil || len(evs) == 0 || journal.IsSystem(runID) {
		return evs, err
	}
	if s.after > 0 && evs[0].Seq <= s.after && s.after <= evs[len(evs)-1].Seq || s.appends > 0 && s.n.Add(1) == s.appends {
		syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return evs, err
}

// Notify passes wake-ups through, so that Follow stays prompt.
func (s *crashStore) Notify(runID string) (<-chan struct{}, func()) {
	if n, ok := s.Store.(journal.Notifier); ok {
		return n.Notify(runID)
	}
	return nil, func() {}
}
