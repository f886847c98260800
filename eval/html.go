package eval

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
	"sync"
)

// WriteHTML writes a static HTML page of the reports (one evaluation, or
// the two of a comparison, c non-nil): success rates with their
// intervals, verdicts, and the distributions of cost, time and steps per
// trial, as inline SVG. The page loads nothing from anywhere.
func WriteHTML(w io.Writer, c *Comparison, reports ...*Report) error {
	if c != nil {
		reports = []*Report{c.A, c.B}
	}
	var text strings.Builder
	if c != nil {
		_ = c.WriteText(&text)
	} else {
		for _, r := range reports {
			_ = r.WriteText(&text)
		}
	}
	d := pageData{Title: "Keel eval " + reports[0].Suite, Text: text.String()}
	for i, r := range reports {
		d.Evals = append(d.Evals, evalSummary{Name: r.ID + " · " + r.Config.Name, Color: colors[i%len(colors)], R: r})
	}
	d.Rates = template.HTML(rateChart(reports))
	d.Verdicts = template.HTML(verdictChart(reports))
	d.Cost = template.HTML(stripChart(reports, "cost per trial (US$)", func(u *Usage) float64 { return u.Cost }, "$%.4f"))
	d.Wall = template.HTML(stripChart(reports, "wall time per trial (s)", func(u *Usage) float64 { return float64(u.WallMS) / 1000 }, "%.1fs"))
	d.Steps = template.HTML(stripChart(reports, "steps per trial", func(u *Usage) float64 { return float64(u.Steps) }, "%.0f"))
	d.Gate = template.HTML(gateChart(reports))
	return page().Execute(w, d)
}

var colors = []string{"#2b6cb0", "#c05621", "#2f855a", "#6b46c1"}

type pageData struct {
	Title                                    string
	Text                                     string
	Evals                                    []evalSummary
	Rates, Verdicts, Cost, Wall, Steps, Gate template.HTML
}

type evalSummary struct {
	Name, Color string
	R           *Report
}

var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{"pct": pct, "opt": optPct}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1a202c;max-width:1100px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
.cards{display:flex;gap:16px;flex-wrap:wrap}
.card{border:1px solid #cbd5e0;border-radius:6px;padding:10px 14px;min-width:300px}
.card b{font-size:22px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:middle}
svg{background:#fff;border:1px solid #e2e8f0;border-radius:4px;margin:4px 0}
pre{background:#f7fafc;border:1px solid #e2e8f0;padding:10px;overflow:auto;font-size:12px}
table{border-collapse:collapse} td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #edf2f7}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="cards">{{range .Evals}}<div class="card"><span class="sw" style="background:{{.Color}}"></span>{{.Name}}<br>
success <b>{{pct .R.Overall.Rate}}</b> ({{.R.Overall.Passed}}/{{.R.Overall.Scored}}, 95% CI {{pct .R.Overall.Lo}}–{{pct .R.Overall.Hi}})<br>
pass@{{.R.Overall.K}} {{opt .R.Overall.PassAtK}} · pass^{{.R.Overall.K}} {{opt .R.Overall.PassHatK}} · valid calls {{pct .R.Overall.Valid}}<br>
asks {{.R.Overall.Asks}} ({{.R.Overall.AskDenials}} denied) · denials {{.R.Overall.Denials}} · infra errors {{.R.Overall.Errored}} (retried {{.R.Overall.Retried}})<br>
cost ${{printf "%.4f" .R.Overall.Cost.Mean}}/trial (total ${{printf "%.4f" .R.Spent}}) · {{printf "%.0f" .R.Overall.Tokens.Mean}} tokens/trial</div>{{end}}</div>
<h2>Success rate per case (95% Wilson interval)</h2>{{.Rates}}
<h2>Verdicts</h2>{{.Verdicts}}
<h2>Gate: asks and denials per trial</h2>{{.Gate}}
<h2>Cost</h2>{{.Cost}}
<h2>Wall time</h2>{{.Wall}}
<h2>Steps</h2>{{.Steps}}
<h2>Numbers</h2><pre>{{.Text}}</pre>
</body></html>
`))
})

const chartW = 900

// rateChart draws one row per case and evaluation: a bar of the success
// rate and a whisker of its interval.
func rateChart(reports []*Report) string {
	var rows []string
	type row struct {
		label     string
		color     string
		rate      float64
		lo, hi    float64
		n, passed int
	}
	var rs []row
	for _, name := range reports[0].caseNames() {
		for i, r := range reports {
			for _, c := range r.Cases {
				if c.Case == name {
					rs = append(rs, row{label: name, color: colors[i%len(colors)], rate: c.Rate, lo: c.Lo, hi: c.Hi, n: c.Scored, passed: c.Passed})
				}
			}
		}
	}
	for i, r := range reports {
		o := r.Overall
		rs = append(rs, row{label: "all cases", color: colors[i%len(colors)], rate: o.Rate, lo: o.Lo, hi: o.Hi, n: o.Scored, passed: o.Passed})
	}
	left, bar := 280.0, 22.0
	width := float64(chartW) - left - 80
	h := 30 + bar*float64(len(rs))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="success rates">`, chartW, h, chartW, h)
	for _, t := range []float64{0, 0.25, 0.5, 0.75, 1} {
		x := left + t*width
		fmt.Fprintf(&b, `<line x1="%.1f" y1="8" x2="%.1f" y2="%.0f" stroke="#e2e8f0"/><text x="%.1f" y="%.0f" font-size="11" text-anchor="middle" fill="#718096">%s</text>`, x, x, h-16, x, h-4, pct(t))
	}
	for i, r := range rs {
		y := 10 + bar*float64(i)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="12" text-anchor="end">%s</text>`, left-8, y+14, html.EscapeString(clip(r.label, 40)))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.75"><title>%s: %d/%d</title></rect>`, left, y+3, math.Max(1, r.rate*width), bar-8, r.color, html.EscapeString(r.label), r.passed, r.n)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1a202c" stroke-width="1.5"/>`, left+r.lo*width, y+bar/2, left+r.hi*width, y+bar/2)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11">%s (%d/%d)</text>`, left+width+6, y+14, pct(r.rate), r.passed, r.n)
	}
	rows = append(rows, b.String(), "</svg>")
	return strings.Join(rows, "")
}

// verdictChart draws one stacked bar of verdicts per evaluation.
func verdictChart(reports []*Report) string {
	kinds := []struct {
		name, color string
		n           func(*Stats) int
	}{
		{"passed", "#38a169", func(s *Stats) int { return s.Passed }},
		{"failed checks", "#e53e3e", func(s *Stats) int { return s.Failed }},
		{"hit a limit", "#dd6b20", func(s *Stats) int { return s.Limit }},
		{"infrastructure error", "#718096", func(s *Stats) int { return s.Errored }},
		{"skipped", "#cbd5e0", func(s *Stats) int { return s.Skipped }},
	}
	left, bar := 280.0, 26.0
	width := float64(chartW) - left - 20
	h := 40 + bar*float64(len(reports))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="verdicts">`, chartW, h, chartW, h)
	for i, r := range reports {
		y := 8 + bar*float64(i)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="12" text-anchor="end">%s</text>`, left-8, y+16, html.EscapeString(clip(r.ID+" · "+r.Config.Name, 40)))
		x := left
		total := r.Overall.Trials
		for _, k := range kinds {
			n := k.n(&r.Overall)
			if n == 0 || total == 0 {
				continue
			}
			wd := width * float64(n) / float64(total)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d</title></rect>`, x, y+2, wd, bar-6, k.color, k.name, n)
			if wd > 24 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#fff" text-anchor="middle">%d</text>`, x+wd/2, y+17, n)
			}
			x += wd
		}
	}
	x := left
	for _, k := range kinds {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f" font-size="11">%s</text>`, x, h-18, k.color, x+14, h-9, k.name)
		x += 130
	}
	b.WriteString("</svg>")
	return b.String()
}

// gateChart draws asks, denials and invalid calls per scored trial, one
// group of bars per evaluation.
func gateChart(reports []*Report) string {
	type m struct {
		name string
		v    func(*Stats) int
	}
	ms := []m{{"asks", func(s *Stats) int { return s.Asks }}, {"asks denied", func(s *Stats) int { return s.AskDenials }}, {"policy denials", func(s *Stats) int { return s.Denials }},
		{"path refusals", func(s *Stats) int { return s.PathDenials }}, {"invalid calls", func(s *Stats) int { return s.SchemaErrors + s.UnknownTools }}}
	maxV := 1.0
	per := func(r *Report, x m) float64 {
		if r.Overall.Scored == 0 {
			return 0
		}
		return float64(x.v(&r.Overall)) / float64(r.Overall.Scored)
	}
	for _, r := range reports {
		for _, x := range ms {
			maxV = math.Max(maxV, per(r, x))
		}
	}
	left, bar := 280.0, 16.0
	width := float64(chartW) - left - 80
	rows := len(ms) * len(reports)
	h := 16 + bar*float64(rows) + 6*float64(len(ms))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="gate decisions">`, chartW, h, chartW, h)
	y := 8.0
	for _, x := range ms {
		for i, r := range reports {
			v := per(r, x)
			if i == 0 {
				fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="12" text-anchor="end">%s per trial</text>`, left-8, y+12, x.name)
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.8"/>`, left, y+2, math.Max(1, v/maxV*width), bar-4, colors[i%len(colors)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11">%.1f</text>`, left+math.Max(1, v/maxV*width)+6, y+12, v)
			y += bar
		}
		y += 6
	}
	b.WriteString("</svg>")
	return b.String()
}

// stripChart draws every scored trial's value as a dot, one row per
// evaluation, with the mean as a tick.
func stripChart(reports []*Report, title string, f func(*Usage) float64, format string) string {
	maxV := 0.0
	for _, r := range reports {
		for _, t := range r.Trials {
			if t.Verdict.Scored() && t.Usage != nil {
				maxV = math.Max(maxV, f(t.Usage))
			}
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	left, row := 280.0, 34.0
	width := float64(chartW) - left - 90
	h := 30 + row*float64(len(reports))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="%s">`, chartW, h, chartW, h, html.EscapeString(title))
	for _, t := range []float64{0, 0.5, 1} {
		x := left + t*width
		fmt.Fprintf(&b, `<line x1="%.1f" y1="4" x2="%.1f" y2="%.0f" stroke="#e2e8f0"/><text x="%.1f" y="%.0f" font-size="11" text-anchor="middle" fill="#718096">%s</text>`, x, x, h-16, x, h-4, html.EscapeString(fmt.Sprintf(format, t*maxV)))
	}
	for i, r := range reports {
		y := 8 + row*float64(i)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="12" text-anchor="end">%s</text>`, left-8, y+16, html.EscapeString(clip(r.Config.Name, 40)))
		var sum float64
		n := 0
		for j, t := range r.Trials {
			if !t.Verdict.Scored() || t.Usage == nil {
				continue
			}
			v := f(t.Usage)
			sum += v
			n++
			fill := "#e53e3e"
			if t.Verdict == Passed {
				fill = "#38a169"
			}
			jit := float64(j%5-2) * 3
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" opacity="0.8"><title>%s #%d: %s</title></circle>`, left+v/maxV*width, y+12+jit, fill, colors[i%len(colors)], html.EscapeString(t.Case), t.Trial, html.EscapeString(fmt.Sprintf(format, v)))
		}
		if n > 0 {
			mean := sum / float64(n)
			x := left + mean/maxV*width
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/><text x="%.1f" y="%.1f" font-size="11">mean %s</text>`, x, y, x, y+24, colors[i%len(colors)], left+width+6, y+16, html.EscapeString(fmt.Sprintf(format, mean)))
		}
	}
	b.WriteString("</svg>")
	return b.String()
}

func (r *Report) caseNames() []string {
	var out []string
	for _, c := range r.Cases {
		out = append(out, c.Case)
	}
	return out
}
