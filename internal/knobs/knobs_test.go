package knobs

import "testing"

func TestParseDebug(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Knobs
		wantErr bool
	}{
		{in: "", want: Knobs{}},
		{in: "crash_after_event=7", want: Knobs{CrashAfterEvent: 7}},
		{in: "cpu_profile=c.prof, mem_profile=m.prof", want: Knobs{CPUProfile: "c.prof", MemProfile: "m.prof"}},
		{in: "crash_after_event=0", wantErr: true},
		{in: "crash_after_append=12", want: Knobs{CrashAfterAppend: 12}},
		{in: "crash_after_append=-1", wantErr: true},
		{in: "mem_profile=", wantErr: true},
		{in: "cpu_profile", wantErr: true},
		{in: "nonsense=1", wantErr: true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("Parse(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
