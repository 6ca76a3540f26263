package bench

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
)

// SVG draws the rows' rate against message size, one line per mode, both
// axes logarithmic, as a self-contained SVG document.
func (r *Report) SVG() string {
	type pt struct {
		size int
		rate float64
	}
	series := map[string][]pt{}
	var order []string
	for _, row := range r.Rows {
		if row.Error != "" || row.Rate <= 0 || row.Size <= 0 {
			continue // a sizeless row (workload) has no place on a size axis
		}
		if _, ok := series[row.Mode]; !ok {
			order = append(order, row.Mode)
		}
		series[row.Mode] = append(series[row.Mode], pt{row.Size, row.Rate})
	}
	const (
		W, H                 = 900, 560
		left, right, top, bt = 80, 230, 50, 60
	)
	pw, ph := float64(W-left-right), float64(H-top-bt)
	minS, maxS := math.Inf(1), math.Inf(-1)
	minR, maxR := math.Inf(1), math.Inf(-1)
	for _, pts := range series {
		for _, p := range pts {
			minS, maxS = math.Min(minS, float64(p.size)), math.Max(maxS, float64(p.size))
			minR, maxR = math.Min(minR, p.rate), math.Max(maxR, p.rate)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	title := fmt.Sprintf("rdmo bench: rate by message size (topology %s, %d initiator(s), %s)", r.Topology, r.Initiators, r.Date.Format("2006-01-02"))
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	if len(series) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no rows to plot</text>`+"\n</svg>\n", left, top+40)
		return b.String()
	}
	// Axes: log2 of size, log10 of rate, padded to whole decades/powers.
	sx0, sx1 := math.Floor(math.Log2(minS)), math.Ceil(math.Log2(maxS))
	if sx1 == sx0 {
		sx0, sx1 = sx0-1, sx1+1
	}
	ry0, ry1 := math.Floor(math.Log10(minR)), math.Ceil(math.Log10(maxR))
	if ry1 == ry0 {
		ry1++
	}
	X := func(size float64) float64 { return float64(left) + (math.Log2(size)-sx0)/(sx1-sx0)*pw }
	Y := func(rate float64) float64 { return float64(top) + ph - (math.Log10(rate)-ry0)/(ry1-ry0)*ph }
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	for e := sx0; e <= sx1; e++ {
		x := X(math.Exp2(e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", x, top, x, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, float64(top)+ph+18, sizeLabel(int(math.Exp2(e))))
	}
	for e := ry0; e <= ry1; e++ {
		y := Y(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, float64(left)+pw, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, rate(math.Pow(10, e)))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">message size (bytes)</text>`+"\n", float64(left)+pw/2, H-18)
	fmt.Fprintf(&b, `<text x="18" y="%.0f" text-anchor="middle" transform="rotate(-90 18 %.0f)">operations per second</text>`+"\n", float64(top)+ph/2, float64(top)+ph/2)
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"}
	for i, mode := range order {
		pts := series[mode]
		sort.Slice(pts, func(a, b int) bool { return pts[a].size < pts[b].size })
		c := colors[i%len(colors)]
		dash := ""
		if i >= len(colors) {
			dash = ` stroke-dasharray="5,3"`
		}
		var path []string
		for _, p := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", X(float64(p.size)), Y(p.rate)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, dash, strings.Join(path, " "))
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s %d B: %s op/s</title></circle>`+"\n",
				X(float64(p.size)), Y(p.rate), c, html.EscapeString(mode), p.size, rate(p.rate))
		}
		ly := top + 10 + i*20
		lx := W - right + 20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+24, ly, c, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+30, ly+4, html.EscapeString(mode))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func sizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n>>10)
	}
	return fmt.Sprint(n)
}
