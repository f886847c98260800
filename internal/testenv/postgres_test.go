package testenv_test

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/testenv"
)

func TestPostgres(t *testing.T) {
	a, b := testenv.Postgres(t), testenv.Postgres(t)
	if a == b {
		t.Fatalf("two calls returned one database %s", a)
	}
	for _, dsn := range []string{a, b} {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != "127.0.0.1" {
			t.Errorf("%s: host %s, want 127.0.0.1", dsn, u.Hostname())
		}
		out, err := exec.Command(testenv.PostgresBin(t, "psql"), "-X", "-q", "-At", "-d", dsn,
			"-c", "CREATE TABLE x (v int); INSERT INTO x VALUES (7); SELECT current_database(), sum(v) FROM x").CombinedOutput()
		if err != nil {
			t.Fatalf("psql %s: %v: %s", dsn, err, out)
		}
		want := strings.TrimPrefix(u.Path, "/") + "|7"
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("psql %s printed %q, want %q", dsn, got, want)
		}
	}
}
