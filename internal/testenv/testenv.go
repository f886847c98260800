// Package testenv finds the real third-party programs that Keel's
// integration tests run against (PostgreSQL, an OAuth/OIDC server, Temporal,
// Jaeger, Prometheus, MCP reference servers, Mailpit).
//
// A test asks for a program by the environment variable that names it
// (`.ci/run` sets each one after installing or building the program into a
// cached, git-ignored directory). When the program is missing, the test is
// skipped on a developer's machine and fails under CI (CI is set), so a
// green CI run never hides an integration test that did not run.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Program returns the path of a program: the value of the environment
// variable env when it is set, else the first of names found on PATH. When
// none is found it skips tb, or fails it when the CI variable is set.
func Program(tb testing.TB, env string, names ...string) string {
	tb.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			missing(tb, env, "%s=%s: %v", env, p, err)
		}
		return p
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(tb, env, "%s is not set and none of %v is on PATH", env, names)
	return ""
}

// Dir returns the directory named by the environment variable env (for
// example an npm prefix holding MCP reference servers), with the same
// skip-or-fail rule as [Program].
func Dir(tb testing.TB, env string) string {
	tb.Helper()
	p := os.Getenv(env)
	if p == "" {
		missing(tb, env, "%s is not set", env)
		return ""
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		missing(tb, env, "%s=%s is not a directory", env, p)
	}
	return p
}

// Required reports whether missing programs fail tests instead of skipping
// them: true under CI.
func Required() bool { return os.Getenv("CI") != "" }

func missing(tb testing.TB, env, format string, args ...any) {
	tb.Helper()
	if Required() {
		tb.Fatalf("testenv: "+format+" (.ci/run installs it; see .ci/deps/)", args...)
	}
	tb.Skipf("testenv: "+format+" (run .ci/run, or set %s)", append(args, env)...)
}
