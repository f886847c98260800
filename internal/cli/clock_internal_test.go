package cli

import (
	"os"
	"strings"
	"time"
)

// In every process of this test binary (the test itself and the keel
// commands it starts with KEEL_TEST_MAIN), the vaults' clock is the wall
// clock plus the duration in the file KEEL_TEST_VAULT_CLOCK names, read
// at each use: a test moves time forward by writing the file.
func init() {
	vaultClock = func() time.Time {
		p := os.Getenv("KEEL_TEST_VAULT_CLOCK")
		if p == "" {
			return time.Now()
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return time.Now()
		}
		d, err := time.ParseDuration(strings.TrimSpace(string(b)))
		if err != nil {
			return time.Now()
		}
		return time.Now().Add(d)
	}
}
