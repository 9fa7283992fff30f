package main

import (
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// draw writes t's chart to dst (SVG): lines over a numeric x, else bars.
func draw(t *table, dst string) error {
	p := plot.New()
	p.Title.Text = t.meta["title"]
	p.X.Label.Text = t.meta["x"] + "\n\n" + t.caption()
	p.Y.Label.Text = t.meta["y"]
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Label.TextStyle.Font.Size = vg.Points(9) // the caption's command can be long
	var err error
	if t.numericX() {
		p.X.Min = 0
		err = lines(p, t)
	} else {
		err = bars(p, t)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	p.Y.Min = 0
	p.Y.Max *= 1.25 // room for the legend above the highest point
	return p.Save(8*vg.Inch, 4.5*vg.Inch, dst)
}

// lines draws one line per series, every measured point marked.
func lines(p *plot.Plot, t *table) error {
	p.Add(plotter.NewGrid())
	for j, name := range t.series {
		pts := make(plotter.XYs, len(t.xs))
		for i, x := range t.xs {
			pts[i].X, _ = strconv.ParseFloat(x, 64)
			pts[i].Y = t.ys[i][j]
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(j), plotutil.Color(j)
		s.Shape = plotutil.Shape(j)
		p.Add(l, s)
		p.Legend.Add(name, l, s)
	}
	return nil
}

// bars draws grouped bars, one group per row; with relative-to, each
// value divided by that series' in the same row.
func bars(p *plot.Plot, t *table) error {
	ref := -1
	if r := t.meta["relative-to"]; r != "" {
		for j, name := range t.series {
			if name == r {
				ref = j
			}
		}
		if ref < 0 {
			return fmt.Errorf("relative-to %q is no series", r)
		}
	}
	w := vg.Points(18)
	for j, name := range t.series {
		vs := make(plotter.Values, len(t.xs))
		for i := range t.xs {
			vs[i] = t.ys[i][j]
			if ref >= 0 {
				vs[i] /= t.ys[i][ref]
			}
		}
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(j)
		b.LineStyle.Color = color.Black
		b.Offset = vg.Length(j-len(t.series)/2) * w
		if len(t.series)%2 == 0 {
			b.Offset += w / 2
		}
		p.Add(b)
		p.Legend.Add(name, b)
	}
	p.NominalX(t.xs...)
	return nil
}
