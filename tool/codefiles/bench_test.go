package codefiles

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-run/keel/tool"
)

// The digests of a stdio server in a node_modules tree of 5,000 files of
// 4 KiB (20 MiB), taken at each start of the server and at each call's
// gate decision while a start is pending: every file read ("cold", as
// before the cache, or the first time in a process) and an unchanged
// tree whose digests the process holds.
func BenchmarkFingerprint(b *testing.B) {
	dir := b.TempDir()
	content := make([]byte, 4096)
	for i := range 5000 {
		p := filepath.Join(dir, "node_modules", fmt.Sprintf("p%d", i/50), fmt.Sprintf("f%d.js", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	// The files were written just now: count them as old enough to keep.
	now = func() time.Time { return time.Now().Add(time.Hour) }
	defer func() { now = time.Now }()
	roots := ServerRoots([]string{"node", "node_modules/p0/f0.js"}, nil, ws)
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			clear(cache.m)
			Fingerprint(ws, roots)
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		Fingerprint(ws, roots)
		for b.Loop() {
			Fingerprint(ws, roots)
		}
	})
}
