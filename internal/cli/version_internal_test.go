package cli

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestDescribeBuild: each kind of build names something a bug report can
// use, and a build without version control stamping says so.
func TestDescribeBuild(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "dev (" + runtime.Version() + ")"},
		{"git checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("vcs.revision", "67298d95aaaabbbbcccc", "vcs.modified", "false")},
			"dev (commit 67298d95aaaa, go1.26.8)"},
		{"modified checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("vcs.revision", "67298d95aaaabbbbcccc", "vcs.modified", "true")},
			"dev (commit 67298d95aaaa, modified, go1.26.8)"},
		{"go install module@version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"}},
			"dev (module v0.4.0, go1.26.8)"},
		{"no stamping", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"dev (commit unknown: built without version control stamping, as with -buildvcs=false or outside a git checkout; go1.26.8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeBuild("dev", tt.info); got != tt.want {
				t.Errorf("describeBuild = %q, want %q", got, tt.want)
			}
		})
	}
}
