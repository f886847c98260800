package postgres

// LeaseKey is the advisory lock key of run's lease, for tests that wait on
// it with a blocking pg_advisory_lock.
func LeaseKey(runID string) int64 { return lockKey("keel.run", runID) }
