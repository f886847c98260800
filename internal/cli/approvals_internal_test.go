package cli

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/server/api"
)

// keel approve and deny take a call as runs are taken: its id, a unique
// prefix of it, or nothing when the run waits for one call; anything
// else names the calls the run waits for.
func TestResolveCall(t *testing.T) {
	two := []api.Approval{{CallID: "call_00_ryaC8miT", Tool: "bash"}, {CallID: "call_01_xq", Tool: "edit_file"}}
	one := two[:1]
	for _, tt := range []struct {
		name, ref string
		pending   []api.Approval
		want, err string
	}{
		{"whole id", "call_01_xq", two, "call_01_xq", ""},
		{"unique prefix", "call_00", two, "call_00_ryaC8miT", ""},
		{"none given, one waits", "", one, "call_00_ryaC8miT", ""},
		{"none given, two wait", "", two, "", "waits for 2 approvals: name the call (its id, or the start of it):\n  call_00_ryaC8miT (bash)\n  call_01_xq (edit_file)"},
		{"ambiguous", "call_0", two, "", "call call_0 of run R is ambiguous: 2 waiting calls start with it"},
		{"not waiting", "call_02", two, "", "run R does not wait for call call_02 (decided already, or never asked); it waits for:\n  call_00_ryaC8miT (bash)"},
		{"nothing waits", "call_00", nil, "", "run R waits for no approval, so not for call call_00"},
		{"nothing waits, none given", "", nil, "", "run R waits for no approval (keel approvals list shows those waiting)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveCall("R", tt.ref, tt.pending, "keel")
			if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("resolveCall(%q) = %q, %v; want %q, %q", tt.ref, got, err, tt.want, tt.err)
			}
		})
	}
}
