package server

// Load returns how many runs this server's workers execute now and how
// many wait in its queue for a worker (for metrics).
func (h *Handler) Load() (executing, queued int) {
	return h.svc.Load()
}
