package schedule

import (
	"fmt"
	"time"
)

// TaskData is what a task template sees: plain values, which print as
// text with any verb (`{{printf "%#v" .}}` shows the same words as
// `{{.}}`, never Go syntax).
type TaskData struct {
	// Schedule is the schedule's name.
	Schedule string
	// Time is the fire's nominal time in the schedule's time zone;
	// Previous the nominal time of the previous fire with a run (for the
	// first, the schedule's start: its creation unless given).
	Time, Previous TaskTime
	// Source is "schedule", "manual" or "backfill".
	Source string
}

// String says the data in words.
func (d TaskData) String() string {
	return fmt.Sprintf("schedule %s, time %s, previous %s, source %s", d.Schedule, d.Time, d.Previous, d.Source)
}

// GoString is String: a template shows no Go syntax.
func (d TaskData) GoString() string { return d.String() }

// TaskTime is a time in a task template, in whole seconds: it prints
// like a time.Time ("2026-12-06 17:24:30 +0100 CET") with any verb and
// has the methods a task needs (`{{.Time.Format "2006-01-02"}}`,
// `{{(.Time.AddDate 0 0 -7).Format "Jan 2"}}`).
type TaskTime struct{ t time.Time }

// NewTaskTime returns t as a task template sees it.
func NewTaskTime(t time.Time) TaskTime { return TaskTime{t.Truncate(time.Second)} }

// String is time.Time's String.
func (t TaskTime) String() string { return t.t.String() }

// GoString is String.
func (t TaskTime) GoString() string { return t.t.String() }

// Format is time.Time's Format.
func (t TaskTime) Format(layout string) string { return t.t.Format(layout) }

// Unix is time.Time's Unix.
func (t TaskTime) Unix() int64 { return t.t.Unix() }

// UTC is the time in UTC.
func (t TaskTime) UTC() TaskTime { return TaskTime{t.t.UTC()} }

// AddDate is time.Time's AddDate.
func (t TaskTime) AddDate(years, months, days int) TaskTime {
	return TaskTime{t.t.AddDate(years, months, days)}
}

// Year, Month, Day, Hour, Minute and Weekday are time.Time's, the month
// and weekday as their English names.
func (t TaskTime) Year() int       { return t.t.Year() }
func (t TaskTime) Month() string   { return t.t.Month().String() }
func (t TaskTime) Day() int        { return t.t.Day() }
func (t TaskTime) Hour() int       { return t.t.Hour() }
func (t TaskTime) Minute() int     { return t.t.Minute() }
func (t TaskTime) Weekday() string { return t.t.Weekday().String() }
func (t TaskTime) IsZero() bool    { return t.t.IsZero() }
