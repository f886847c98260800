package lazy

import (
	"strings"
	"testing"
)

func TestRegexpCompilesOnce(t *testing.T) {
	re := Regexp(`^[a-z]{0,63}$`)
	a, b := re(), re()
	if a != b {
		t.Fatal("two compilations")
	}
	if !a.MatchString("abc") || a.MatchString("ABC") {
		t.Fatal("wrong expression")
	}
}

func TestCheckReportsBadExpression(t *testing.T) {
	n := Count()
	Regexp(`(unclosed`)
	if Count() != n+1 {
		t.Fatalf("count %d, want %d", Count(), n+1)
	}
	err := Check()
	if err == nil || !strings.Contains(err.Error(), "unclosed") {
		t.Fatalf("Check = %v", err)
	}
	mu.Lock()
	exprs = exprs[:n]
	mu.Unlock()
	if err := Check(); err != nil {
		t.Fatal(err)
	}
}
