package policy

// CanAsk reports whether a call decided by e could be asked about: e has
// an @ask policy. Keel's own asks (keel.limit, for a call too intricate
// to decide) come on top, so a run with an engine that cannot ask can
// still stop for a person in rare cases; an unattended setup must name
// someone to tell or a timeout either way when CanAsk is true.
func (e *Engine) CanAsk() bool { return len(e.forbidAsk)+len(e.permitAsk) > 0 }
