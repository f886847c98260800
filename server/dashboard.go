package server

import (
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// runFilter is the runs dashboard's filter: a status, an agent and words
// of the task (all optional).
type runFilter struct {
	Status, Agent, Q string
	// Statuses and Agents are the choices the filter offers.
	Statuses, Agents []string
}

func (f *runFilter) keep(r api.Run) bool {
	switch {
	case f.Status != "" && !service.MatchStatus(&r, journal.Status(f.Status)),
		f.Agent != "" && r.Agent != f.Agent,
		f.Q != "" && !strings.Contains(strings.ToLower(r.Task+" "+r.ID), strings.ToLower(f.Q)):
		return false
	}
	return true
}

// runChart is the dashboard's chart: runs created and their cost per
// day, over the last chartDays days, as an SVG drawn on the server.
type runChart struct {
	Days      []chartDay
	Runs      int
	Cost      float64
	SVG       template.HTML
	MaxRuns   int
	MaxCost   float64
	FirstDay  string
	LastDay   string
	Truncated bool
}

type chartDay struct {
	Day  string
	Runs int
	Cost float64
}

const chartDays = 14

// newRunChart buckets runs by the local day they were created on.
func newRunChart(runs []api.Run, now time.Time) *runChart {
	c := &runChart{}
	start := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location()).AddDate(0, 0, -(chartDays - 1))
	for i := range chartDays {
		c.Days = append(c.Days, chartDay{Day: start.AddDate(0, 0, i).Format("01-02")})
	}
	for _, r := range runs {
		d := r.Created.In(now.Location())
		k := int(d.Sub(start).Hours() / 24)
		if d.Before(start) || k >= chartDays {
			continue
		}
		c.Days[k].Runs++
		c.Days[k].Cost += r.Cost
		c.Runs++
		c.Cost += r.Cost
	}
	for _, d := range c.Days {
		c.MaxRuns = max(c.MaxRuns, d.Runs)
		c.MaxCost = max(c.MaxCost, d.Cost)
	}
	c.FirstDay, c.LastDay = c.Days[0].Day, c.Days[chartDays-1].Day
	c.SVG = c.svg()
	return c
}

// svg draws bars for runs per day and a line for cost per day (each on
// its own scale), with the numbers as titles for screen readers and
// hover.
func (c *runChart) svg() template.HTML {
	const w, hgt, pad = 560, 140, 24
	bw := float64(w-2*pad) / chartDays
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="runs-chart" viewBox="0 0 %d %d" role="img" aria-label="runs and cost per day, last %d days" width="100%%" height="%d">`, w, hgt+pad, chartDays, hgt+pad)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="axis"/>`, pad, hgt, w-pad, hgt)
	var pts []string
	for i, d := range c.Days {
		x := float64(pad) + float64(i)*bw
		if c.MaxRuns > 0 && d.Runs > 0 {
			bh := float64(hgt-pad) * float64(d.Runs) / float64(c.MaxRuns)
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d run(s), $%.4f</title></rect>`, x+2, float64(hgt)-bh, bw-4, bh, d.Day, d.Runs, d.Cost)
		}
		y := float64(hgt)
		if c.MaxCost > 0 {
			y = float64(hgt) - float64(hgt-pad)*d.Cost/c.MaxCost
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x+bw/2, y))
		if i%2 == 0 || i == chartDays-1 {
			fmt.Fprintf(&b, `<text class="lbl" x="%.1f" y="%d">%s</text>`, x+bw/2, hgt+16, d.Day)
		}
	}
	fmt.Fprintf(&b, `<polyline class="costline" points="%s"/>`, strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text class="lbl left" x="%d" y="14">runs (bars, max %d/day) · cost (line, max $%.4f/day)</text></svg>`, pad, c.MaxRuns, c.MaxCost)
	return template.HTML(b.String())
}

// statusFilters are the statuses the runs page filters by: the service's.
func statusFilters() []string {
	out := make([]string, len(service.StatusFilters))
	for i, st := range service.StatusFilters {
		out[i] = string(st)
	}
	return out
}

// dashboard fills the runs page's filter from the request and returns
// the runs it keeps.
func dashboard(r *http.Request, runs []api.Run) ([]api.Run, runFilter) {
	q := r.URL.Query()
	f := runFilter{Status: q.Get("status"), Agent: q.Get("agent"), Q: strings.TrimSpace(q.Get("q")),
		Statuses: statusFilters()}
	seen := map[string]bool{}
	out := []api.Run{}
	for _, run := range runs {
		if run.Agent != "" && !seen[run.Agent] {
			seen[run.Agent] = true
			f.Agents = append(f.Agents, run.Agent)
		}
		if f.keep(run) {
			out = append(out, run)
		}
	}
	return out, f
}
