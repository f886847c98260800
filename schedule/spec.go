package schedule

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/keel-run/keel/agent"
)

// Spec says when a schedule fires: a cron expression or a fixed interval,
// in a time zone, between a start and an end, each fire delayed by a
// deterministic jitter. Exactly one of Cron and Every is set.
type Spec struct {
	// Cron is a five-field cron expression ("0 9 * * MON-FRI") or a
	// descriptor ("@daily", "@hourly", "@every 90m" is not accepted: use
	// Every). Its fields are read in TimeZone.
	Cron string `json:"cron,omitempty"`
	// Every fires at every multiple of this duration since the Unix epoch,
	// shifted by Offset (Temporal's interval specification): every 1h with
	// offset 15m fires at :15 of every hour. At least one second.
	Every agent.Duration `json:"every,omitempty"`
	// Offset shifts an interval's fires; 0 ≤ Offset < Every.
	Offset agent.Duration `json:"offset,omitempty"`
	// TimeZone is an IANA time zone name ("Europe/Paris"); "" means UTC.
	// A cron time that a daylight-saving change skips fires once at the
	// first instant after the gap; one it repeats fires once (at its
	// first occurrence).
	TimeZone string `json:"time_zone,omitempty"`
	// Jitter delays each fire by a random-looking but deterministic
	// amount in [0, Jitter) derived from the schedule and the nominal
	// time, so every server computes the same due time. It never reorders
	// fires: a fire waits for the one before it.
	Jitter agent.Duration `json:"jitter,omitempty"`
	// Start and End bound the nominal times: none before Start (default:
	// the schedule's creation) and none after End (zero: never ends).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
}

// cronParser accepts the standard five fields and descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// times enumerates the nominal times of a [Spec].
type times struct {
	cron   *cron.SpecSchedule
	loc    *time.Location
	every  time.Duration
	offset time.Duration
	start  time.Time
	end    time.Time
}

// compile checks s and returns its time enumerator. created is the
// default start.
func (s *Spec) compile(created time.Time) (*times, error) {
	t := &times{start: s.Start, end: s.End}
	if t.start.IsZero() {
		t.start = created
	}
	loc := time.UTC
	if s.TimeZone != "" {
		l, err := time.LoadLocation(s.TimeZone)
		if err != nil || s.TimeZone == "Local" {
			return nil, fmt.Errorf("schedule: unknown time zone %q (an IANA name such as Europe/Paris)", s.TimeZone)
		}
		loc = l
	}
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, errors.New("schedule: give a cron expression or an interval, not both")
	case s.Cron != "":
		expr := strings.TrimSpace(s.Cron)
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, errors.New("schedule: give the time zone separately, not in the cron expression")
		}
		if strings.HasPrefix(expr, "@every") {
			return nil, errors.New("schedule: use an interval (every) instead of @every")
		}
		c, err := cronParser.Parse(expr)
		if err != nil {
			return nil, fmt.Errorf("schedule: cron expression %q: %v", s.Cron, err)
		}
		sc := c.(*cron.SpecSchedule)
		sc.Location = loc
		t.cron, t.loc = sc, loc
	case s.Every != 0:
		if s.Every.D() < time.Second {
			return nil, fmt.Errorf("schedule: interval %s is shorter than a second", s.Every.D())
		}
		if s.Offset < 0 || s.Offset >= s.Every {
			return nil, fmt.Errorf("schedule: offset %s must be at least 0 and less than the interval %s", s.Offset.D(), s.Every.D())
		}
		t.every, t.offset = s.Every.D(), s.Offset.D()
	default:
		return nil, errors.New("schedule: give a cron expression or an interval")
	}
	if s.Jitter < 0 {
		return nil, errors.New("schedule: jitter cannot be negative")
	}
	if !t.end.IsZero() && !t.end.After(t.start) {
		return nil, fmt.Errorf("schedule: the end %s is not after the start %s", t.end.Format(time.RFC3339), t.start.Format(time.RFC3339))
	}
	return t, nil
}

// next returns the first nominal time strictly after after (and at or
// after the start), or the zero time when there is none before the end.
func (t *times) next(after time.Time) time.Time {
	if after.Before(t.start) {
		after = t.start.Add(-time.Nanosecond)
	}
	var n time.Time
	if t.cron != nil {
		n = t.cronNext(after)
		if n.IsZero() {
			return n
		}
	} else {
		// The first k with epoch + k*every + offset > after.
		ns := after.UnixNano() - int64(t.offset)
		k := ns / int64(t.every)
		if ns < 0 && ns%int64(t.every) != 0 {
			k-- // floor division
		}
		n = time.Unix(0, (k+1)*int64(t.every)+int64(t.offset)).UTC()
	}
	if !t.end.IsZero() && n.After(t.end) {
		return time.Time{}
	}
	return n
}

// Jitter returns the delay of the fire of schedule id at nominal time
// n: a hash of both, in [0, max). It is deterministic (the Temporal
// driver's workflow computes it too).
func Jitter(id string, n time.Time, max time.Duration) time.Duration { return jitter(id, n, max) }

func jitter(id string, n time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := sha256.Sum256([]byte(id + "\x00" + n.UTC().Format(time.RFC3339Nano)))
	return time.Duration(binary.BigEndian.Uint64(h[:8]) % uint64(max))
}

// cronNext is the cron's next time after after, with daylight-saving
// changes handled as cron(8) does: a wall time the change repeats fires
// once (its first occurrence), and one it skips fires at the first
// instant after the gap.
func (t *times) cronNext(after time.Time) time.Time {
	n := t.cron.Next(after)
	for !n.IsZero() && t.repeated(n) {
		n = t.cron.Next(n)
	}
	if n.IsZero() {
		return n
	}
	if g, ok := t.gapFire(after, n); ok {
		return g
	}
	return n.UTC()
}

// repeated reports whether n's wall time in the schedule's zone occurred
// earlier too (the hour a change back to standard time repeats).
func (t *times) repeated(n time.Time) bool {
	const layout = "2006-01-02T15:04:05"
	w := n.In(t.loc).Format(layout)
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if n.Add(-d).In(t.loc).Format(layout) == w {
			return true
		}
	}
	return false
}

// gapFire returns the end of a daylight-saving gap between after and n
// when the cron matched a wall time inside the gap.
func (t *times) gapFire(after, n time.Time) (time.Time, bool) {
	offset := func(x time.Time) int { _, o := x.In(t.loc).Zone(); return o }
	before, later := offset(after), offset(n)
	if later <= before {
		return time.Time{}, false
	}
	lo, hi := after, n
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if offset(mid) == before {
			lo = mid
		} else {
			hi = mid
		}
	}
	g := hi.Truncate(time.Second)
	if offset(g) == before {
		g = g.Add(time.Second)
	}
	// The wall times the gap skipped are [g, g+delta) read in the old
	// offset: did the cron want one of them?
	fixed := *t.cron
	fixed.Location = time.FixedZone("", before)
	r := fixed.Next(g.Add(-time.Nanosecond))
	if r.IsZero() || !r.Before(g.Add(time.Duration(later-before)*time.Second)) || !g.After(after) {
		return time.Time{}, false
	}
	return g.UTC(), true
}
