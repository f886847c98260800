package tui

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLiveCallTail(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		chunks []string
		want   []string
		nl     int64
	}{
		{"nothing", nil, nil, 0},
		{"one partial line", []string{"abc"}, []string{"abc"}, 0},
		{"lines across chunks", []string{"a", "b\nc", "d\n", "e"}, []string{"ab", "cd", "e"}, 2},
		{"only the last lines", []string{"1\n2\n3\n4\n5\n6\n7\n"}, []string{"3", "4", "5", "6", "7"}, 7},
		{"the partial line counts among the last", []string{"1\n2\n3\n4\n5\n6"}, []string{"2", "3", "4", "5", "6"}, 5},
		{"carriage returns dropped at line ends", []string{"a\r\nb\r\n"}, []string{"a", "b"}, 2},
		{"a huge line is bounded", []string{strings.Repeat("x", 3*maxPartial) + "\n"}, []string{strings.Repeat("x", maxPartial)}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &liveCall{}
			var size int64
			for _, ch := range tt.chunks {
				c.Write([]byte(ch))
				size += int64(len(ch))
			}
			got, nl, n := c.tail()
			if d := cmp.Diff(tt.want, got); d != "" || nl != tt.nl || n != size {
				t.Errorf("tail %d lines %d bytes (-want +got):\n%s", nl, n, d)
			}
		})
	}
}

// BenchmarkLiveTail is the cost keel run's status block adds to each
// chunk a command writes (the tool.Output tee).
func BenchmarkLiveTail(b *testing.B) {
	chunk := bytes.Repeat([]byte("filler line for output flood test\n"), 1000)
	c := &liveCall{}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		c.Write(chunk)
	}
}
