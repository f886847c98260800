//go:build linux

package linux

// PrestartNow is Prestart, returning once the spare init is started.
func PrestartNow(opts *Options) {
	if initCalled.Load() && probe() == nil {
		prestart(initKeyFor(opts))
	}
}

// SparesTaken counts the prestarted inits New took.
func SparesTaken() int64 { return sparesTaken.Load() }

// SpareGroups returns the cgroup directories of the spare init's run
// group (none: it has none, or there is no spare).
func SpareGroups() []string {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	if spare.si == nil || spare.si.rg == nil {
		return nil
	}
	var dirs []string
	for _, d := range spare.si.rg.v1 {
		dirs = append(dirs, d)
	}
	if spare.si.rg.v2 != "" {
		dirs = append(dirs, spare.si.rg.v2)
	}
	return dirs
}

// SpareInitPid is the spare init's host pid (0: none).
func SpareInitPid() int {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	if spare.si == nil {
		return 0
	}
	return spare.si.cmd.Process.Pid
}

// DiscardSpare ends the spare init as a Prestart of another key does,
// and returns once its run group is removed.
func DiscardSpare() {
	spare.mu.Lock()
	si := spare.si
	spare.si = nil
	spare.mu.Unlock()
	if si != nil {
		<-si.discard()
	}
}

// HasCgroups reports whether the sandbox tracks commands with cgroups
// on this machine.
func HasCgroups() bool { return detectCgroups().tracking() != "" }
