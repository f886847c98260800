package fs

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzApplyEdit checks applyEdit's invariant: on the LF-normalised text
// the edit is exactly one replacement, and every byte outside the
// replaced region is unchanged (so CRLF endings, a BOM and the EOF state
// survive).
func FuzzApplyEdit(f *testing.F) {
	f.Add([]byte("def f():\r\n\tx = 1\r\n\treturn x\r\n"), 9, 6, "\tx = 2")
	f.Add([]byte("\xef\xbb\xbfa\nb"), 3, 1, "A\nA")
	f.Add([]byte("a\r\nb\nc\r\n"), 0, 4, "z\n")
	f.Fuzz(func(t *testing.T, data []byte, start, n int, repl string) {
		body := bytes.TrimPrefix(data, bom)
		norm, _ := normalizeCRLF(body)
		if len(norm) == 0 || start < 0 || n <= 0 {
			return
		}
		start %= len(norm)
		end := min(len(norm), start+n)
		old := norm[start:end]
		if strings.Count(norm, old) != 1 || strings.Contains(old, "\r") || strings.Contains(repl, "\r") || old == repl || strings.HasPrefix(old, string(bom)) {
			return
		}
		ed, failure := applyEdit(data, old, repl, false)
		if failure != "" {
			if strings.Contains(failure, "matches at lines") {
				return // overlapping occurrences are counted too
			}
			t.Fatalf("applyEdit(%q, %q, %q) failed: %s", data, old, repl, failure)
		}
		outBody := ed.out
		if bytes.HasPrefix(data, bom) {
			if !bytes.HasPrefix(outBody, bom) {
				t.Fatalf("BOM lost")
			}
			outBody = outBody[len(bom):]
		}
		gotNorm, _ := normalizeCRLF(outBody)
		if want := norm[:start] + repl + norm[end:]; gotNorm != want {
			t.Fatalf("normalised result = %q, want %q", gotNorm, want)
		}
		// The original bytes before and after the region are a prefix and
		// a suffix of the result.
		pre, post := rawBounds(body, start, end)
		if !bytes.HasPrefix(outBody, body[:pre]) || !bytes.HasSuffix(outBody, body[post:]) {
			t.Fatalf("bytes outside the region changed: %q -> %q", body, outBody)
		}
	})
}

// TestRestyleLargeEdit checks the fallback for edits too large to align
// line by line: the lines kept at the start and the end still keep their
// own endings.
func TestRestyleLargeEdit(t *testing.T) {
	var region, repl strings.Builder
	for i := range 1100 {
		end := "\n"
		if i%2 == 0 {
			end = "\r\n"
		}
		fmt.Fprintf(&region, "line %d%s", i, end)
		if i < 5 || i >= 1100-5 {
			fmt.Fprintf(&repl, "line %d\n", i)
		} else if i < 1000 {
			fmt.Fprintf(&repl, "new %d\n", i)
		}
	}
	got := restyle([]byte(region.String()), repl.String(), false)
	for _, want := range []string{"line 0\r\nline 1\nline 2\r\n", "new 5\nnew 6\n", "line 1098\r\nline 1099\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("restyle lost %q", want)
		}
	}
	if n, m := 1100, strings.Count(repl.String(), "\n"); n*m <= maxAlign {
		t.Fatalf("the case is small enough to align (%d×%d); make it larger", n, m)
	}
}

// rawBounds maps normalised offsets to raw offsets the slow way.
func rawBounds(body []byte, start, end int) (int, int) {
	raw := func(n int) int {
		i, k := 0, 0
		for k < n {
			if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
			i++
			k++
		}
		return i
	}
	return raw(start), raw(end)
}
