package service_test

import (
	"os"
	"testing"

	"github.com/keel-run/keel/internal/testenv"
)

// TestMain runs the tests with a TMPDIR of their own, and fails them
// when they leave anything there (a demo run's workspace, say).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
