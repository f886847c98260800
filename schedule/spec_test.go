package schedule

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// walk returns the first n nominal times of spec after from.
func walk(t *testing.T, spec Spec, from time.Time, n int) []string {
	t.Helper()
	tm, err := spec.compile(from)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for x := from; len(out) < n; {
		x = tm.next(x)
		if x.IsZero() {
			break
		}
		out = append(out, x.Format(time.RFC3339))
	}
	return out
}

func TestSpecTimes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		spec Spec
		from string
		n    int
		want []string
	}{
		{"cron in UTC", Spec{Cron: "*/15 9 * * MON"}, "2026-12-07T09:20:00Z", 3,
			[]string{"2026-12-07T09:30:00Z", "2026-12-07T09:45:00Z", "2026-12-14T09:00:00Z"}},
		{"cron in a time zone", Spec{Cron: "0 9 * * *", TimeZone: "Asia/Tokyo"}, "2026-12-07T00:00:00Z", 2,
			[]string{"2026-12-08T00:00:00Z", "2026-12-09T00:00:00Z"}},
		// New York springs forward at 02:00 on 8 March 2026: 02:30 does
		// not exist that day, and fires at the first instant after the gap.
		{"spring forward", Spec{Cron: "30 2 * * *", TimeZone: "America/New_York"}, "2026-03-07T00:00:00Z", 3,
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		// ... and falls back at 02:00 on 1 November 2026: 01:30 happens
		// twice and fires once.
		{"fall back", Spec{Cron: "30 1 * * *", TimeZone: "America/New_York"}, "2026-10-31T00:00:00Z", 3,
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"interval with offset", Spec{Every: agent.Duration(time.Hour), Offset: agent.Duration(15 * time.Minute)}, "2026-12-07T09:15:00Z", 3,
			[]string{"2026-12-07T10:15:00Z", "2026-12-07T11:15:00Z", "2026-12-07T12:15:00Z"}},
		{"end time", Spec{Every: agent.Duration(time.Hour), End: mustTime(t, "2026-12-07T11:00:00Z")}, "2026-12-07T09:00:00Z", 5,
			[]string{"2026-12-07T10:00:00Z", "2026-12-07T11:00:00Z"}},
		{"start time", Spec{Cron: "@daily", Start: mustTime(t, "2027-01-01T00:00:00Z")}, "2026-12-07T09:00:00Z", 2,
			[]string{"2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := walk(t, tt.spec, mustTime(t, tt.from), tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("times (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpecRefused(t *testing.T) {
	t.Parallel()
	now := mustTime(t, "2026-12-07T00:00:00Z")
	for _, tt := range []struct {
		name string
		spec Spec
	}{
		{"nothing", Spec{}},
		{"both", Spec{Cron: "@daily", Every: agent.Duration(time.Hour)}},
		{"bad cron", Spec{Cron: "61 * * * *"}},
		{"zone in the expression", Spec{Cron: "CRON_TZ=UTC 0 9 * * *"}},
		{"@every", Spec{Cron: "@every 1h"}},
		{"unknown zone", Spec{Cron: "@daily", TimeZone: "Mars/Olympus"}},
		{"local zone", Spec{Cron: "@daily", TimeZone: "Local"}},
		{"short interval", Spec{Every: agent.Duration(time.Millisecond)}},
		{"offset too big", Spec{Every: agent.Duration(time.Hour), Offset: agent.Duration(time.Hour)}},
		{"negative jitter", Spec{Every: agent.Duration(time.Hour), Jitter: agent.Duration(-time.Second)}},
		{"end before start", Spec{Every: agent.Duration(time.Hour), End: now.Add(-time.Hour)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.spec.compile(now); err == nil {
				t.Errorf("compile(%+v) = nil error", tt.spec)
			}
		})
	}
}

func TestJitterDeterministic(t *testing.T) {
	t.Parallel()
	n := mustTime(t, "2026-12-07T09:00:00Z")
	a, b := jitter("s1", n, time.Minute), jitter("s1", n, time.Minute)
	if a != b || a < 0 || a >= time.Minute {
		t.Errorf("jitter = %s, %s; want the same value in [0, 1m)", a, b)
	}
	seen := map[time.Duration]bool{}
	for i := range 20 {
		seen[jitter("s1", n.Add(time.Duration(i)*time.Minute), time.Minute)] = true
	}
	if len(seen) < 10 {
		t.Errorf("jitter takes %d values over 20 fires; want spread", len(seen))
	}
	if jitter("s1", n, 0) != 0 {
		t.Error("jitter with no maximum is not 0")
	}
}
