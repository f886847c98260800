package server

// Load returns how many runs this server's workers execute now and how
// many wait in its queue for a worker (for metrics).
func (h *Handler) Load() (executing, queued int) {
	p := h.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.active), len(p.queue)
}
