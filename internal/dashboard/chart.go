package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// The charts are inline SVG drawn here, one bar or point a minute over the
// last hour: no script draws them, so they show as soon as the page does.

// series is one named row of values, one per minute; class colours it
// (dashboard.css).
type series struct {
	Name   string
	Class  string
	Values []float64
}

// chart is a drawn chart with its legend and the sentence a screen reader
// reads in its place.
type chart struct {
	ID      string
	Title   string
	Summary string // what the chart says, in words
	SVG     template.HTML
	Legend  []series
}

// The drawing's size, in its own units; it scales to its box.
const (
	chartW, chartH = 320.0, 140.0
	padLeft        = 38.0
	padBottom      = 16.0
)

// bars draws stacked bars: each series on top of the previous one.
func bars(id, title, unit string, stacks []series) chart {
	n := len(stacks[0].Values)
	totals := make([]float64, n)
	for _, s := range stacks {
		for i, v := range s.Values {
			totals[i] += v
		}
	}
	top := niceMax(maxOf(totals))
	var b strings.Builder
	axes(&b, top, unit, n)
	slot := (chartW - padLeft) / float64(n)
	for i := 0; i < n; i++ {
		base := 0.0
		for _, s := range stacks {
			v := s.Values[i]
			if v <= 0 {
				continue
			}
			y0, y1 := yOf(base, top), yOf(base+v, top)
			fmt.Fprintf(&b, `<rect class="%s" x="%s" y="%s" width="%s" height="%s"></rect>`,
				s.Class, num(padLeft+float64(i)*slot+0.5), num(y1), num(math.Max(slot-1, 1)), num(y0-y1))
			base += v
		}
	}
	sum := make([]string, 0, len(stacks))
	for _, s := range stacks {
		sum = append(sum, fmt.Sprintf("%s %s", num(total(s.Values)), s.Name))
	}
	return finish(id, title, "Last hour: "+strings.Join(sum, ", ")+".", &b, stacks)
}

// lines draws each series as a line; a NaN is a minute without a value.
func lines(id, title, unit string, ls []series) chart {
	n := len(ls[0].Values)
	peak := 0.0
	for _, s := range ls {
		peak = math.Max(peak, maxOf(s.Values))
	}
	top := niceMax(peak)
	var b strings.Builder
	axes(&b, top, unit, n)
	slot := (chartW - padLeft) / float64(n)
	var sum []string
	for _, s := range ls {
		var pts []string
		last := math.NaN()
		for i, v := range s.Values {
			if math.IsNaN(v) {
				continue
			}
			pts = append(pts, num(padLeft+(float64(i)+0.5)*slot)+","+num(yOf(v, top)))
			last = v
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline class="%s" fill="none" points="%s"></polyline>`, s.Class, strings.Join(pts, " "))
		}
		if math.IsNaN(last) {
			sum = append(sum, s.Name+": no reading")
		} else {
			sum = append(sum, fmt.Sprintf("%s: %s%s now", s.Name, num(last), unit))
		}
	}
	return finish(id, title, "Last hour. "+strings.Join(sum, "; ")+".", &b, ls)
}

// axes draws the frame: the top value, zero, and the hour's ends.
func axes(b *strings.Builder, top float64, unit string, n int) {
	fmt.Fprintf(b, `<line class="axis" x1="%s" y1="%s" x2="%s" y2="%s"></line>`, num(padLeft), num(chartH-padBottom), num(chartW), num(chartH-padBottom))
	fmt.Fprintf(b, `<line class="grid" x1="%s" y1="4" x2="%s" y2="4"></line>`, num(padLeft), num(chartW))
	fmt.Fprintf(b, `<text class="tick" x="%s" y="11" text-anchor="end">%s%s</text>`, num(padLeft-4), num(top), unit)
	fmt.Fprintf(b, `<text class="tick" x="%s" y="%s" text-anchor="end">0</text>`, num(padLeft-4), num(chartH-padBottom))
	fmt.Fprintf(b, `<text class="tick" x="%s" y="%s">−%dm</text>`, num(padLeft), num(chartH-2), n)
	fmt.Fprintf(b, `<text class="tick" x="%s" y="%s" text-anchor="end">now</text>`, num(chartW), num(chartH-2))
}

func finish(id, title, summary string, b *strings.Builder, legend []series) chart {
	svg := `<svg viewBox="0 0 ` + num(chartW) + ` ` + num(chartH) + `" role="img" aria-labelledby="` + id + `-title ` + id + `-desc" focusable="false">` +
		`<title id="` + id + `-title">` + template.HTMLEscapeString(title) + `</title>` +
		`<desc id="` + id + `-desc">` + template.HTMLEscapeString(summary) + `</desc>` + b.String() + `</svg>`
	return chart{ID: id, Title: title, Summary: summary, SVG: template.HTML(svg), Legend: legend} //nolint:gosec // built here from numbers and escaped text
}

func yOf(v, top float64) float64 { return chartH - padBottom - v/top*(chartH-padBottom-4) }

func maxOf(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		if !math.IsNaN(v) {
			m = math.Max(m, v)
		}
	}
	return m
}

func total(vs []float64) float64 {
	t := 0.0
	for _, v := range vs {
		if !math.IsNaN(v) {
			t += v
		}
	}
	return t
}

// niceMax is the chart's top: 1, 2 or 5 times a power of ten, at least v.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// num writes a coordinate or a value briefly: at most two decimals.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }
