package cli

import "testing"

func TestParseDebug(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    debugKnobs
		wantErr bool
	}{
		{in: "", want: debugKnobs{}},
		{in: "crash_after_event=7", want: debugKnobs{crashAfterEvent: 7}},
		{in: "cpu_profile=c.prof, mem_profile=m.prof", want: debugKnobs{cpuProfile: "c.prof", memProfile: "m.prof"}},
		{in: "crash_after_event=0", wantErr: true},
		{in: "crash_after_append=12", want: debugKnobs{crashAfterAppend: 12}},
		{in: "crash_after_append=-1", wantErr: true},
		{in: "mem_profile=", wantErr: true},
		{in: "cpu_profile", wantErr: true},
		{in: "nonsense=1", wantErr: true},
	} {
		got, err := parseDebug(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseDebug(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("parseDebug(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
