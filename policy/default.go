package policy

import (
	_ "embed"
	"fmt"
	"sync"
)

//go:embed default.toml
var defaultSource []byte

// DefaultName is the name of the built-in default policy, as recorded in
// runs that use it.
const DefaultName = "keel:default"

// defaultEngine is compiled on first use, not when the program starts:
// every Keel process (the sandbox's init too) would pay for it.
var defaultEngine = sync.OnceValue(func() *Engine {
	e, err := Parse(DefaultName, defaultSource)
	if err != nil {
		panic(fmt.Sprintf("policy: the built-in default policy does not compile: %v", err))
	}
	return e
})

// Default returns Keel's built-in default policy, safe on a laptop:
// reads and writes in the workspace (and the sandbox's scratch space) are
// allowed, reading system directories is allowed, the network asks when
// the run can reach it without a sandbox, commands only known at run
// time run in the sandbox and ask without one, and anything else outside
// the workspace is denied. Its source, with its
// test cases, is [DefaultSource].
func Default() *Engine { return defaultEngine() }

// DefaultSource returns the TOML source of [Default], a starting point for
// custom policies.
func DefaultSource() []byte { return append([]byte(nil), defaultSource...) }
