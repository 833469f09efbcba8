package main

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// The HTML report of the shared scenario: one self-contained page (inline CSS and SVG, nothing from
// the internet) with the results table and, per mode, the tokens per minute over time against the
// quota, and the distribution of the assistant's latencies.

// modeColors are the series colours, by mode.
var modeColors = map[string]string{ModeNone: "#c0392b", ModeTemporal: "#d68910", ModeSluice: "#1f6fb2"}

// chartBox is a chart's plot area in an SVG of Width x Height.
type chartBox struct {
	Width, Height, Left, Right, Top, Bottom float64
	XMax, YMax                              float64
}

func (b chartBox) x(v float64) float64 {
	return b.Left + (b.Width-b.Left-b.Right)*v/b.XMax
}

func (b chartBox) y(v float64) float64 {
	return b.Height - b.Bottom - (b.Height-b.Top-b.Bottom)*v/b.YMax
}

// path is an SVG path through pts, in chart coordinates.
func (b chartBox) path(pts []Point) string {
	var s strings.Builder
	for i, p := range pts {
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&s, "%s%.1f,%.1f ", cmd, b.x(math.Min(p.At, b.XMax)), b.y(math.Min(p.V, b.YMax)))
	}
	return strings.TrimSpace(s.String())
}

// axes draws the frame, ticks and labels.
func (b chartBox) axes(xLabel, yLabel string, yFormat func(float64) string) template.HTML {
	var s strings.Builder
	fmt.Fprintf(&s, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, b.Left, b.y(0), b.Width-b.Right, b.y(0))
	fmt.Fprintf(&s, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, b.Left, b.y(0), b.Left, b.Top)
	for _, v := range ticks(b.XMax) {
		fmt.Fprintf(&s, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, b.x(v), b.y(0)+14, trimFloat(v))
	}
	for _, v := range ticks(b.YMax) {
		fmt.Fprintf(&s, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, b.Left, b.y(v), b.Width-b.Right, b.y(v))
		fmt.Fprintf(&s, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, b.Left-4, b.y(v)+4, yFormat(v))
	}
	fmt.Fprintf(&s, `<text class="label" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`,
		(b.Left+b.Width-b.Right)/2, b.Height-4, template.HTMLEscapeString(xLabel))
	fmt.Fprintf(&s, `<text class="label" x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`,
		(b.Top+b.Height-b.Bottom)/2, (b.Top+b.Height-b.Bottom)/2, template.HTMLEscapeString(yLabel))
	return template.HTML(s.String())
}

// ticks returns about five round values in [0, max].
func ticks(max float64) []float64 {
	if max <= 0 {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10(max/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if max/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for v := step; v <= max*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

func trimFloat(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") }

// tpmChart is one mode's tokens-per-minute chart.
func tpmChart(r SharedResult, tpm, xMax, yMax float64) template.HTML {
	b := chartBox{Width: 560, Height: 230, Left: 64, Right: 12, Top: 12, Bottom: 36, XMax: xMax, YMax: yMax}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg class="chart tpm" data-mode="%s" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img">`,
		r.Mode, b.Width, b.Height, b.Width, b.Height)
	s.WriteString(string(b.axes("seconds since the backfill started", "tokens per minute (10 s window)",
		func(v float64) string { return fmt.Sprintf("%.0fk", v/1000) })))
	fmt.Fprintf(&s, `<line class="quota" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, b.Left, b.y(tpm), b.Width-b.Right, b.y(tpm))
	fmt.Fprintf(&s, `<text class="quota-label" x="%.1f" y="%.1f" text-anchor="end">quota</text>`, b.Width-b.Right-4, b.y(tpm)-4)
	fmt.Fprintf(&s, `<line class="batch-end" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, b.x(r.Batch), b.y(0), b.x(r.Batch), b.Top)
	fmt.Fprintf(&s, `<path class="series" stroke="%s" d="%s"/>`, modeColors[r.Mode], b.path(r.TPM))
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}

// latencyChart is the assistant's latency distribution of every mode: the share of answers (y) that
// took at most x seconds.
func latencyChart(rs []SharedResult) template.HTML {
	xMax := 1.0
	for _, r := range rs {
		xMax = math.Max(xMax, quantile(r.Latencies, 1))
	}
	b := chartBox{Width: 560, Height: 260, Left: 64, Right: 12, Top: 12, Bottom: 36, XMax: math.Ceil(xMax), YMax: 1}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg class="chart latency" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img">`, b.Width, b.Height, b.Width, b.Height)
	s.WriteString(string(b.axes("seconds from question to answer", "share of answers", func(v float64) string {
		return fmt.Sprintf("%.0f%%", 100*v)
	})))
	for i, r := range rs {
		pts := make([]Point, 0, 2*len(r.Latencies))
		for j, l := range r.Latencies {
			pts = append(pts, Point{At: l, V: float64(j) / float64(len(r.Latencies))}, Point{At: l, V: float64(j+1) / float64(len(r.Latencies))})
		}
		fmt.Fprintf(&s, `<path class="series" data-mode="%s" stroke="%s" d="%s"/>`, r.Mode, modeColors[r.Mode], b.path(pts))
		fmt.Fprintf(&s, `<text class="legend" x="%.1f" y="%.1f" fill="%s">%s</text>`, b.Width-b.Right-90, b.Top+48+16*float64(i), modeColors[r.Mode], r.Mode)
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}

var reportTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sluice demo: one quota, two services</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{font-size:22px} h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:12px 0} th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
th:nth-child(-n+3),td:nth-child(-n+3){text-align:left} td:nth-child(2),td:nth-child(3){color:#666}
.grid-2{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0} figcaption{font-weight:600}
.axis{stroke:#444} .grid{stroke:#eee} .tick,.label{font-size:11px;fill:#555}
.quota{stroke:#222;stroke-dasharray:6 4} .quota-label{font-size:11px;fill:#222}
.batch-end{stroke:#999;stroke-dasharray:2 3} .series{fill:none;stroke-width:1.8} .legend{font-size:12px;font-weight:600}
</style></head><body>
<h1>One provider quota shared by a backfill and an assistant</h1>
<p>{{.Setup}}</p>
<table id="results"><tr><th>figure</th><th>unit</th><th>better</th>{{range .Modes}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.Unit}}</td><td>{{.Better}}</td>{{range .Values}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
<p>{{.Floor}}</p>
<h2>Tokens per minute over time, against the quota (dashed); the dotted line is the backfill's end</h2>
<div class="grid-2">{{range .TPM}}<figure><figcaption>{{.Mode}}</figcaption>{{.Chart}}</figure>{{end}}</div>
<h2>The assistant's latency: share of answers within x seconds</h2>
{{.Latency}}
</body></html>
`))

// writeReport writes the shared scenario's report for rs to w.
func writeReport(w io.Writer, cfg SharedConfig, rs []SharedResult) error {
	var modes []string
	for _, r := range rs {
		modes = append(modes, r.Mode)
	}
	type tpmFig struct {
		Mode  string
		Chart template.HTML
	}
	var xMax, yMax float64
	for _, r := range rs {
		for _, p := range r.TPM {
			xMax, yMax = math.Max(xMax, p.At), math.Max(yMax, p.V)
		}
	}
	yMax = math.Max(yMax, cfg.TPM*1.2)
	var figs []tpmFig
	for _, r := range rs {
		figs = append(figs, tpmFig{Mode: r.Mode, Chart: tpmChart(r, cfg.TPM, math.Max(1, xMax), yMax)})
	}
	floor := ""
	if len(rs) > 0 {
		floor = fmt.Sprintf("The batch floor, %.1f s, is the least time the quota allows for every call of the run: the "+
			"provider's buckets start full (%.0f s worth), then tokens and requests come at the quota's rate. "+
			"The input estimate error is the route's estimate of each call's prompt tokens (openaicost) against the "+
			"provider's count, in percent of it; the chars/4 error is what the heuristic the routes used before would "+
			"have been on the same calls.",
			rs[0].BatchFloor, cfg.Provider.BurstSeconds)
	}
	return reportTemplate.Execute(w, map[string]any{
		"Setup": sharedSetup(cfg), "Modes": modes, "Rows": resultTable(rs), "Floor": floor, "TPM": figs, "Latency": latencyChart(rs),
	})
}
