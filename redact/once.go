package redact

import (
	"regexp"
	"sync"
)

// onceRegexp compiles expr the first time the returned function is
// called, not when the package is initialised (redact imports only the
// standard library; internal/lazy does the same for Keel's other
// packages).
func onceRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
