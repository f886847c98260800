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
