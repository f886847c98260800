package tool

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func newTestWorkspace(t *testing.T) *Workspace {
	t.Helper()
	ws, err := NewWorkspace(t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// writeChunks writes src to w in chunks of n bytes.
func writeChunks(t testing.TB, w io.Writer, src []byte, n int) {
	t.Helper()
	for len(src) > 0 {
		k := min(n, len(src))
		if m, err := w.Write(src[:k]); err != nil || m != k {
			t.Fatalf("Write = %d, %v; want %d, nil", m, err, k)
		}
		src = src[k:]
	}
}

// checkView checks the invariants every view must hold.
func checkView(t *testing.T, o *Output, maxChars int) string {
	t.Helper()
	v := o.View()
	if why := checkSafe(v); why != "" {
		t.Errorf("view is not safe: %s", why)
	}
	if n := utf8.RuneCountInString(v); n > maxChars {
		t.Errorf("view has %d characters, bound is %d", n, maxChars)
	}
	return v
}

func TestOutputSmall(t *testing.T) {
	t.Parallel()
	ws := newTestWorkspace(t)
	o := NewOutput(ws, "r", "c", 0)
	writeChunks(t, o, []byte("A\x00B\x00C\nbad: \xff\n\033[31mred\033[0m\n"), 3)
	o.Close()
	if got, want := o.View(), "A\\0B\\0C\nbad: \uFFFD\nred\n"; got != want {
		t.Errorf("View() = %q, want %q", got, want)
	}
	if o.Artifact() != "" {
		t.Errorf("Artifact() = %q, want none for output that fits", o.Artifact())
	}
	if got := o.Bytes(); got != 26 {
		t.Errorf("Bytes() = %d, want 26", got)
	}
	if _, err := os.Stat(filepath.Join(ws.Root(), ".keel")); !os.IsNotExist(err) {
		t.Errorf("a small output created .keel: %v", err)
	}
}

// TestOutputFlood is OUTPUT-FLOOD/context-overflow: 50 MB through the
// writer gives a bounded view with a marker naming the size and the
// artifact, and the artifact holds every byte.
func TestOutputFlood(t *testing.T) {
	t.Parallel()
	line := "filler line for output flood test\n"
	src := bytes.Repeat([]byte(line), 50_000_000/len(line)+1)[:50_000_000]
	ws := newTestWorkspace(t)
	o := NewOutput(ws, "run-1", "call-1", 10000)
	writeChunks(t, o, src, 32<<10)
	o.Close()
	v := checkView(t, o, 10000)
	if !strings.HasPrefix(v, line+line) {
		t.Errorf("view does not start with the first lines: %.80q", v)
	}
	if !strings.HasSuffix(v, line+"filler l") { // 50 MB cuts the last line
		t.Errorf("view does not end with the last bytes: %q", v[len(v)-80:])
	}
	wantArt := ".keel/artifacts/run-1/call-1.out"
	if o.Artifact() != wantArt {
		t.Errorf("Artifact() = %q, want %q", o.Artifact(), wantArt)
	}
	if !strings.Contains(v, "bytes elided of 50,000,000 total; full output: "+wantArt+"; search it, do not re-run …]") {
		t.Errorf("view lacks the elision marker: %q", markerLine(v))
	}
	if o.Bytes() != int64(len(src)) {
		t.Errorf("Bytes() = %d, want %d", o.Bytes(), len(src))
	}
	got, err := os.ReadFile(filepath.Join(ws.Root(), wantArt))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(src) {
		t.Errorf("artifact has %d bytes and differs from the %d written", len(got), len(src))
	}
}

func markerLine(v string) string {
	for l := range strings.Lines(v) {
		if strings.HasPrefix(l, "[…") {
			return l
		}
	}
	return "(no marker)"
}

// TestOutputSeq is the "seq 1 3000000" flood: the view shows the first and
// last numbers and the marker counts the elided lines exactly.
func TestOutputSeq(t *testing.T) {
	t.Parallel()
	var src bytes.Buffer
	for i := 1; i <= 3_000_000; i++ {
		src.WriteString(strconv.Itoa(i))
		src.WriteByte('\n')
	}
	o := NewOutput(newTestWorkspace(t), "r", "seq", 2000)
	writeChunks(t, o, src.Bytes(), 4096)
	o.Close()
	v := checkView(t, o, 2000)
	head, tail, ok := strings.Cut(v, markerLine(v))
	if !ok {
		t.Fatalf("no marker in %q", v)
	}
	if !strings.HasPrefix(head, "1\n2\n3\n") || !strings.HasSuffix(tail, "2999999\n3000000\n") {
		t.Errorf("view = %q … %q, want 1,2,3 … 2999999,3000000", head[:20], tail[len(tail)-20:])
	}
	shown := strings.Count(head, "\n") + strings.Count(tail, "\n")
	want := fmt.Sprintf("[… %s lines,", formatCount(int64(3_000_000-shown)))
	if !strings.HasPrefix(markerLine(v), want) {
		t.Errorf("marker = %q, want prefix %q", markerLine(v), want)
	}
}

// TestOutputWholeButLong covers output that fits in memory but not in the
// view: head, marker, tail, with no overlap and exact byte accounting.
func TestOutputWholeButLong(t *testing.T) {
	t.Parallel()
	var src bytes.Buffer
	for i := range 400 {
		fmt.Fprintf(&src, "line %03d\n", i)
	}
	ws := newTestWorkspace(t)
	o := NewOutput(ws, "r", "c", 1000)
	o.Write(src.Bytes())
	o.Close()
	v := checkView(t, o, 1000)
	head, tail, _ := strings.Cut(v, markerLine(v))
	shownBytes := len(head) + len(tail)
	want := fmt.Sprintf("[… %d lines, %s bytes elided of 3,600 total; full output: .keel/artifacts/r/c.out; search it, do not re-run …]\n",
		400-strings.Count(head+tail, "\n"), formatCount(int64(3600-shownBytes)))
	if got := markerLine(v); got != want {
		t.Errorf("marker = %q, want %q", got, want)
	}
	if !strings.HasPrefix(head, "line 000\n") || !strings.HasSuffix(tail, "line 399\n") {
		t.Errorf("view = %q", v)
	}
	got, _ := os.ReadFile(filepath.Join(ws.Root(), ".keel/artifacts/r/c.out"))
	if !bytes.Equal(got, src.Bytes()) {
		t.Errorf("artifact differs from the output")
	}
}

func TestOutputLongLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		src   []byte
		whole bool // fits in memory: clipped but not elided
	}{
		{"one short long line", append(bytes.Repeat([]byte("x"), 5000), '\n'), true},
		{"1 MB without newline", bytes.Repeat([]byte("abcdefghij"), 100_000), false},
		{"minified with a few lines", []byte(strings.Repeat(strings.Repeat("{a:1},", 50_000)+"\n", 3)), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := newTestWorkspace(t)
			o := NewOutput(ws, "r", "c", 3000)
			writeChunks(t, o, tt.src, 8192)
			o.Close()
			v := checkView(t, o, 3000)
			if !strings.Contains(v, "more characters on this line]") {
				t.Errorf("no clip marker in %q", v)
			}
			if o.Artifact() == "" {
				t.Errorf("a clipped view has no artifact")
			}
			if tt.whole && !strings.Contains(v, "[long lines clipped; full output: .keel/artifacts/r/c.out; search it, do not re-run]") {
				t.Errorf("view = %q, want the clipped note", v)
			}
			got, _ := os.ReadFile(filepath.Join(ws.Root(), o.Artifact()))
			if !bytes.Equal(got, tt.src) {
				t.Errorf("artifact has %d bytes, want %d", len(got), len(tt.src))
			}
		})
	}
}

// TestOutputMultibyteChunks writes multi-byte runes split across writes
// and across the head/tail cut; no U+FFFD may appear from the cuts.
func TestOutputMultibyteChunks(t *testing.T) {
	t.Parallel()
	src := []byte(strings.Repeat("日本語のテキスト ", 20000))
	for _, chunk := range []int{1, 2, 5, 4093} {
		o := NewOutput(newTestWorkspace(t), "r", "c", 1000)
		writeChunks(t, o, src, chunk)
		o.Close()
		v := checkView(t, o, 1000)
		if strings.ContainsRune(v, utf8.RuneError) {
			t.Errorf("chunk %d: view has U+FFFD: %q", chunk, v)
		}
	}
}

func TestOutputBinary(t *testing.T) {
	t.Parallel()
	exe, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Skip(err)
	}
	o := NewOutput(newTestWorkspace(t), "r", "c", 0)
	o.Write(exe[:4096]) // head -c 4096 /bin/ls
	o.Close()
	v := checkView(t, o, DefaultMaxResultChars)
	if !strings.HasPrefix(v, "[output looks binary") || !strings.Contains(v, `\x7fELF`) {
		t.Errorf("view = %.200q, want the binary note and an escaped ELF header", v)
	}
}

func TestOutputNoWorkspace(t *testing.T) {
	t.Parallel()
	o := NewOutput(nil, "r", "c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("data line\n"), 100_000), 1000)
	o.Close()
	v := checkView(t, o, 1000)
	if !strings.Contains(markerLine(v), "; the full output could not be saved: no workspace …]") {
		t.Errorf("marker = %q", markerLine(v))
	}
	if o.Artifact() != "" {
		t.Errorf("Artifact() = %q, want none", o.Artifact())
	}
}

// TestOutputArtifactLink plants a link where the artifact goes; the write
// must replace the link, not follow it.
func TestOutputArtifactLink(t *testing.T) {
	t.Parallel()
	ws := newTestWorkspace(t)
	victim := filepath.Join(ws.Root(), "victim.txt")
	os.WriteFile(victim, []byte("original"), 0o644)
	dir := filepath.Join(ws.Root(), ".keel/artifacts/r")
	os.MkdirAll(dir, 0o755)
	if err := os.Symlink("../../../victim.txt", filepath.Join(dir, "c.out")); err != nil {
		t.Fatal(err)
	}
	o := NewOutput(ws, "r", "c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("payload\n"), 10_000), 4096)
	o.Close()
	if got, _ := os.ReadFile(victim); string(got) != "original" {
		t.Errorf("victim.txt = %q, want it untouched", got)
	}
	fi, err := os.Lstat(filepath.Join(dir, "c.out"))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 80_000 {
		t.Errorf("artifact = %v, %v; want a regular file of 80000 bytes", fi, err)
	}
}

func TestOutputArtifactFailure(t *testing.T) {
	t.Parallel()
	ws := newTestWorkspace(t)
	// .keel/artifacts is a file: the artifact directory cannot be made.
	os.MkdirAll(filepath.Join(ws.Root(), ".keel"), 0o755)
	os.WriteFile(filepath.Join(ws.Root(), ".keel/artifacts"), nil, 0o644)
	o := NewOutput(ws, "r", "c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("payload\n"), 10_000), 4096)
	o.Close()
	v := checkView(t, o, 1000)
	if !strings.Contains(markerLine(v), "the full output could not be saved: not a directory") {
		t.Errorf("marker = %q", markerLine(v))
	}
}

func TestOutputUnsafeNames(t *testing.T) {
	t.Parallel()
	ws := newTestWorkspace(t)
	o := NewOutput(ws, "../../etc", "a/b\x00c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("payload\n"), 10_000), 4096)
	o.Close()
	if got, want := o.Artifact(), ".keel/artifacts/.._.._etc/a_b_c.out"; got != want {
		t.Errorf("Artifact() = %q, want %q", got, want)
	}
}

func TestOutputWriteAfterClose(t *testing.T) {
	t.Parallel()
	o := NewOutput(nil, "r", "c", 0)
	o.Write([]byte("x"))
	o.Close()
	if n, err := o.Write([]byte("y")); err == nil || n != 0 {
		t.Errorf("Write after Close = %d, %v; want 0 and an error", n, err)
	}
	if err := o.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if o.View() != "x" {
		t.Errorf("View() = %q", o.View())
	}
}

// TestOutputMemoryBound streams 50 MB and checks that the heap allocated
// while doing so is a small constant, not proportional to the output. It
// is a memory bound, not a timing assertion.
func TestOutputMemoryBound(t *testing.T) {
	ws := newTestWorkspace(t)
	chunk := bytes.Repeat([]byte("filler line for output flood test\n"), 1000) // 34 KB
	const total = 50 << 20
	o := NewOutput(ws, "r", "mem", 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for n := 0; n < total; n += len(chunk) {
		o.Write(chunk)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("writing %d MB allocated %d bytes; want under 1 MiB", total>>20, grew)
	}
	// Steady state (head full, artifact open): a Write allocates nothing.
	if allocs := testing.AllocsPerRun(100, func() { o.Write(chunk) }); allocs != 0 {
		t.Errorf("Write allocates %v times per call, want 0", allocs)
	}
	o.Close()
	if got := o.Bytes(); got < total {
		t.Errorf("Bytes() = %d, want at least %d", got, total)
	}
}

func FuzzOutput(f *testing.F) {
	f.Add([]byte("A\x00B\nC\r\033[31mx"), 3, 7)
	f.Add(bytes.Repeat([]byte("é\n"), 3000), 5, 1)
	f.Add(bytes.Repeat([]byte("\xff\xfe"), 5000), 1000, 13)
	f.Fuzz(func(t *testing.T, src []byte, chunk, rep int) {
		chunk = max(1, min(chunk, 1<<16))
		rep = max(1, min(rep, 50))
		o := NewOutput(nil, "r", "c", 600)
		for range rep {
			writeChunks(t, o, src, chunk)
		}
		o.Close()
		checkView(t, o, 600)
	})
}

func BenchmarkOutputWrite(b *testing.B) {
	ws, err := NewWorkspace(b.TempDir(), "", nil)
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("filler line for output flood test\n"), 1000)
	o := NewOutput(ws, "r", "bench", 0)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		o.Write(chunk)
	}
	b.StopTimer()
	o.Close()
}

func BenchmarkOutputRender(b *testing.B) {
	chunk := bytes.Repeat([]byte("\033[32mok\033[0m filler line with colour\r\n"), 2000)
	b.ReportAllocs()
	for b.Loop() {
		o := NewOutput(nil, "r", "c", 0)
		o.Write(chunk)
		o.Close()
	}
}

// TestOutputArtifactDirLink plants a link where the run's artifact
// directory goes: the output must not land where it leads.
func TestOutputArtifactDirLink(t *testing.T) {
	t.Parallel()
	ws := newTestWorkspace(t)
	os.MkdirAll(filepath.Join(ws.Root(), "src"), 0o755)
	os.MkdirAll(filepath.Join(ws.Root(), ".keel/artifacts"), 0o755)
	if err := os.Symlink("../../src", filepath.Join(ws.Root(), ".keel/artifacts/r")); err != nil {
		t.Fatal(err)
	}
	o := NewOutput(ws, "r", "c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("payload\n"), 10_000), 4096)
	o.Close()
	if entries, _ := os.ReadDir(filepath.Join(ws.Root(), "src")); len(entries) != 0 {
		t.Errorf("output landed in src: %v", entries)
	}
	if v := checkView(t, o, 1000); !strings.Contains(markerLine(v), "could not be saved: the artifact directory is not a plain directory") {
		t.Errorf("marker = %q", markerLine(v))
	}
}

// TestOutputTee: a tee sees every byte in order as it is written, and
// the view is the same as without one.
func TestOutputTee(t *testing.T) {
	t.Parallel()
	src := bytes.Repeat([]byte("line of a long command's output\n"), 5000)
	var seen bytes.Buffer
	teed := NewOutput(nil, "r", "c", 600)
	teed.Tee(func(p []byte) {
		if seen.Len() == 0 && len(p) > 0 && teed.total != 0 {
			t.Error("the tee saw a chunk after it was recorded")
		}
		seen.Write(p)
	})
	plain := NewOutput(nil, "r", "c", 600)
	for i := 0; i < len(src); i += 777 {
		teed.Write(src[i:min(i+777, len(src))])
		plain.Write(src[i:min(i+777, len(src))])
	}
	teed.Close()
	plain.Close()
	if !bytes.Equal(seen.Bytes(), src) {
		t.Errorf("the tee saw %d bytes, want the %d written, in order", seen.Len(), len(src))
	}
	if teed.View() != plain.View() {
		t.Error("a tee changed the view")
	}
}

func BenchmarkOutputWriteTee(b *testing.B) {
	ws, err := NewWorkspace(b.TempDir(), "", nil)
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("filler line for output flood test\n"), 1000)
	o := NewOutput(ws, "r", "bench", 0)
	var lines int
	o.Tee(func(p []byte) { lines += bytes.Count(p, []byte("\n")) })
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		o.Write(chunk)
	}
	b.StopTimer()
	o.Close()
}
