package checkpoint

// Snapshots counts c's full and incremental snapshots since Watch.
func Snapshots(c *Checkpoints) (full, incremental int) {
	if c.t == nil {
		return 0, 0
	}
	return c.t.fulls, c.t.incrementals
}

// ChangeTime is changeTime, for tests.
var ChangeTime = changeTime
