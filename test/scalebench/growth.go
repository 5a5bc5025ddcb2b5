package scalebench

import (
	"bytes"
	"errors"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one cost across the cluster sizes, relative to the smallest run.
type Series struct {
	Name   string
	Points []Point
}

// Point is one cluster size of a Series.
type Point struct {
	Nodes int
	// Relative is the cost per node at Nodes over the cost per node of the smallest run:
	// (value(N)/N) / (value(N0)/N0). 1 is a cost that grows as the cluster does, above 1 one that
	// grows faster, below 1 one that grows slower (a fixed cost halves when the cluster doubles).
	Relative float64
}

// cost is one measured cost the growth plot follows.
type cost struct {
	name  string
	value func(Run) float64 // 0: not measured
}

// growthCosts are the costs plotted, in the legend's order: the plans' follow the kinds of
// DaemonSet planned, in the order the runs first name them.
func growthCosts(runs []Run) []cost {
	costs := []cost{
		{"controller peak RSS", func(r Run) float64 { return r.Rollout.ControllerPeakRSSMiB }},
		{"controller CPU", func(r Run) float64 { return r.Rollout.ControllerCPUSeconds }},
		{"managed rollout time", func(r Run) float64 { return r.Rollout.ManagedSeconds }},
		{"webhook RSS", func(r Run) float64 { return r.Webhook.RSSMiB }},
		{"webhook startup", func(r Run) float64 { return r.Webhook.StartupSeconds }},
		{"review p99", func(r Run) float64 { return r.Webhook.ReviewP99Ms }},
	}
	for _, kind := range planKinds(runs) {
		costs = append(costs, cost{"plan wall (" + kind + ")", func(r Run) float64 {
			for _, p := range r.Plans {
				if p.DaemonSet == kind {
					return p.WallSeconds
				}
			}
			return 0
		}})
	}
	// The audit checks the same number of DaemonSets at every size: its work is fixed, yet it is
	// normalised per node like the others, so its line falls as N0/N while the nodes do not slow
	// it, and a line at 1 would mean it slows as the cluster grows despite the fixed work.
	return append(costs, cost{"audit time (fixed work)", func(r Run) float64 { return r.Audit.Seconds }})
}

// Growth computes how each cost grows with the cluster: per cost, one point per measured run, the
// cost per node relative to the smallest run's. Dividing by the nodes makes a cost that grows
// linearly a flat line at 1, whatever its unit and size, so costs of seconds and of MiB share one
// axis. A cost the smallest run did not measure (zero) has no baseline and no series; a run that
// did not measure a cost has no point in its series.
func Growth(runs []Run) []Series {
	runs = slices.Clone(runs)
	sortRuns(runs)
	for len(runs) > 0 && runs[0].Nodes <= 0 {
		runs = runs[1:]
	}
	if len(runs) == 0 {
		return nil
	}
	base := runs[0]
	var series []Series
	for _, c := range growthCosts(runs) {
		v0 := c.value(base)
		if v0 == 0 {
			continue
		}
		perNode0 := v0 / float64(base.Nodes)
		s := Series{Name: c.name}
		for _, r := range runs {
			if v := c.value(r); v != 0 {
				s.Points = append(s.Points, Point{Nodes: r.Nodes, Relative: v / float64(r.Nodes) / perNode0})
			}
		}
		series = append(series, s)
	}
	return series
}

// palette tells up to ten series apart by colour; the glyph shapes tell them apart in grey.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{},
}

// GrowthSVG draws Growth as an 8 by 5 inch SVG for docs/performance.md: the cluster's nodes on
// the x axis, each cost per node relative to the smallest run on the y axis, and a dashed line at
// 1 for linear growth.
func (r Results) GrowthSVG() ([]byte, error) {
	series := Growth(r.Runs)
	if len(series) == 0 {
		return nil, errors.New("no cost measured to plot")
	}
	canvas := vgsvg.New(8*vg.Inch, 5*vg.Inch)
	if err := drawGrowth(draw.New(canvas), series); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// drawGrowth draws the series on c, with the legend to the right of the plot, where it hides no
// line.
func drawGrowth(c draw.Canvas, series []Series) error {
	p := plot.New()
	p.Title.Text = "How daemonguard's costs grow with the cluster"
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = "nodes"
	p.Y.Label.Text = "cost per node, relative to the smallest run"
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true

	var sizes []int
	for _, s := range series {
		for _, pt := range s.Points {
			if !slices.Contains(sizes, pt.Nodes) {
				sizes = append(sizes, pt.Nodes)
			}
		}
	}
	slices.Sort(sizes)
	first, last := float64(sizes[0]), float64(sizes[len(sizes)-1])
	pad := (last - first) * 0.04
	if pad == 0 {
		pad = first * 0.1
	}
	p.X.Min, p.X.Max = first-pad, last+pad
	ticks := make([]plot.Tick, len(sizes))
	for i, n := range sizes {
		ticks[i] = plot.Tick{Value: float64(n), Label: count(n)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// From zero, the distance to the linear line reads true; above the highest point, room.
	top := 1.0
	for _, s := range series {
		for _, pt := range s.Points {
			top = max(top, pt.Relative)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.08

	linear, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 1}, {X: p.X.Max, Y: 1}})
	if err != nil {
		return err
	}
	linear.Color = color.Black
	linear.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
	p.Add(linear)

	for i, s := range series {
		xys := make(plotter.XYs, len(s.Points))
		for j, pt := range s.Points {
			xys[j] = plotter.XY{X: float64(pt.Nodes), Y: pt.Relative}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		colour := palette[i%len(palette)]
		line.Color = colour
		line.Width = vg.Points(1.5)
		points.Color = colour
		points.Shape = glyphs[i%len(glyphs)]
		points.Radius = vg.Points(3)
		p.Add(line, points)
		legend.Add(s.Name, line, points)
	}
	legend.Add("linear", linear)

	box := legend.Rectangle(c)
	legendWidth := box.Max.X - box.Min.X + vg.Points(12)
	p.Draw(draw.Crop(c, 0, -legendWidth, 0, 0))
	// The legend starts level with the plot's area, below the title.
	legend.Draw(draw.Crop(c, c.Max.X-c.Min.X-legendWidth+vg.Points(6), 0, 0, -vg.Points(30)))
	return nil
}
