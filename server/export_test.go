package server

import "github.com/keel-run/keel/service"

// OnIdleWait sets f to be called when a resume of a run starts waiting for
// the run's ending execution.
func OnIdleWait(h *Handler, f func(runID string)) { service.OnIdleWait(h.svc, f) }
