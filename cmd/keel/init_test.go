package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/lazy"
)

// initCost is one package's line of GODEBUG=inittrace=1.
type initCost struct {
	pkg           string
	bytes, allocs int
}

// inits runs this test binary again with GODEBUG=inittrace=1 and returns
// what every package's initialisation allocated: the same packages as the
// keel binary (this is package main's test), plus the testing ones.
func inits(t *testing.T) []initCost {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var costs []initCost
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// init PKG @0.1 ms, 0.02 ms clock, 1234 bytes, 12 allocs
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		b, err1 := strconv.Atoi(f[7])
		a, err2 := strconv.Atoi(f[9])
		if err1 != nil || err2 != nil {
			t.Fatalf("unexpected inittrace line %q", sc.Text())
		}
		costs = append(costs, initCost{f[1], b, a})
	}
	if len(costs) == 0 {
		t.Fatalf("no inittrace lines in:\n%s", out)
	}
	return costs
}

// Every keel command runs the initialisation of every package linked into
// the binary. Keel's own packages keep theirs small: regular expressions
// and templates are compiled on first use (internal/lazy, sync.OnceValue),
// not at init. The bound is on allocations, a count that does not depend
// on the machine's load; what the rest (third-party packages) costs is
// logged for docs/architecture.md, "Performance".
func TestInitAllocations(t *testing.T) {
	const maxOwnAllocs = 1000
	var own, other initCost
	costs := inits(t)
	sort.Slice(costs, func(i, j int) bool { return costs[i].allocs > costs[j].allocs })
	for _, c := range costs {
		sum := &other
		if strings.HasPrefix(c.pkg, "github.com/keel-run/keel/") {
			sum = &own
		}
		sum.allocs += c.allocs
		sum.bytes += c.bytes
	}
	for _, c := range costs[:min(15, len(costs))] {
		t.Logf("%6d allocs %8d bytes  %s", c.allocs, c.bytes, c.pkg)
	}
	t.Logf("Keel's packages: %d allocs, %d bytes; others: %d allocs, %d bytes", own.allocs, own.bytes, other.allocs, other.bytes)
	if own.allocs > maxOwnAllocs {
		for _, c := range costs {
			if strings.HasPrefix(c.pkg, "github.com/keel-run/keel/") && c.allocs > 50 {
				t.Errorf("%s: %d allocations at init", c.pkg, c.allocs)
			}
		}
		t.Errorf("Keel's packages allocate %d times at init (bound %d): compile regular expressions and templates on first use (internal/lazy)", own.allocs, maxOwnAllocs)
	}
}

// The regular expressions compiled on first use still compile (a
// package-level regexp.MustCompile would have failed at start).
func TestLazyRegexpsCompile(t *testing.T) {
	if lazy.Count() == 0 {
		t.Fatal("no lazy regular expressions registered: is internal/lazy still used?")
	}
	if err := lazy.Check(); err != nil {
		t.Fatal(err)
	}
}
