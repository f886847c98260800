package tool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool"
)

// A running command's output reaches the person watching through the
// run's redaction by whole lines, so a secret split over two chunks is
// hidden too.
func TestWithLiveHidden(t *testing.T) {
	t.Parallel()
	hide := func(s string) string { return strings.ReplaceAll(s, "kcL-SECRET-42", "[REDACTED]") }
	long := strings.Repeat("x", 5000)
	for _, tt := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"split secret", []string{"token kcL-SEC", "RET-42 done\n"}, "token [REDACTED] done\n"},
		{"several lines", []string{"a\nb kcL-SECRET-42\nc", "\n"}, "a\nb [REDACTED]\nc\n"},
		{"unfinished last line held back", []string{"ok\npartial kcL-SEC"}, "ok\n"},
		{"a long line in pieces", []string{long}, long},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got strings.Builder
			ctx := tool.WithLive(context.Background(), func(p []byte) { got.Write(p) })
			fn := tool.LiveOf(tool.WithLiveHidden(ctx, hide))
			for _, c := range tt.chunks {
				fn([]byte(c))
			}
			if got.String() != tt.want {
				t.Errorf("watched %q, want %q", got.String(), tt.want)
			}
		})
	}
	if ctx := tool.WithLiveHidden(context.Background(), hide); tool.LiveOf(ctx) != nil {
		t.Error("WithLiveHidden added a live function where there was none")
	}
}
