// Package lazy compiles regular expressions and templates on their first
// use instead of at package initialisation. Every keel command runs every
// linked package's init, so a package-level regexp.MustCompile is paid by
// `keel version` as much as by the one command that matches with it (a
// bounded repetition such as {0,63} compiles to dozens of nodes).
//
// Each expression is remembered (its text only) so that a test can compile
// them all: Check reports a bad expression that a package-level
// MustCompile would have reported at start.
package lazy

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
)

var (
	mu    sync.Mutex
	exprs []string
)

// Regexp returns a function that compiles expr on its first call and
// returns the same *regexp.Regexp on every call. It panics on that first
// call if expr does not compile (regexp.MustCompile).
func Regexp(expr string) func() *regexp.Regexp {
	mu.Lock()
	exprs = append(exprs, expr)
	mu.Unlock()
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Check compiles every expression given to Regexp so far and reports those
// that do not compile.
func Check() error {
	mu.Lock()
	defer mu.Unlock()
	var errs []error
	for _, e := range exprs {
		if _, err := regexp.Compile(e); err != nil {
			errs = append(errs, fmt.Errorf("lazy: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Count is how many expressions Regexp was given.
func Count() int {
	mu.Lock()
	defer mu.Unlock()
	return len(exprs)
}
