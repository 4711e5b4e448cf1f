package report

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/xladdp/xladdp/internal/procfs"
)

// Curves are what a run plots: the training loss by step, and test
// accuracy (0..1) by epoch when the example measures it.
type Curves struct {
	Title string
	// AccuracyOf names the set the accuracy is measured on ("test" when
	// empty; "val" for a validation folder).
	AccuracyOf string
	// Loss holds (step, loss) points.
	Loss plotter.XYs
	// ValLoss holds (step, validation loss) points, drawn with Loss.
	ValLoss plotter.XYs
	// Accuracy holds (epoch, accuracy) points.
	Accuracy plotter.XYs
}

// AddLoss records the loss after step.
func (c *Curves) AddLoss(step int, loss float64) {
	c.Loss = append(c.Loss, plotter.XY{X: float64(step), Y: loss})
}

// AddValLoss records the validation loss after step.
func (c *Curves) AddValLoss(step int, loss float64) {
	c.ValLoss = append(c.ValLoss, plotter.XY{X: float64(step), Y: loss})
}

// AddAccuracy records the accuracy after epoch.
func (c *Curves) AddAccuracy(epoch int, acc float64) {
	c.Accuracy = append(c.Accuracy, plotter.XY{X: float64(epoch), Y: acc})
}

// WritePNG draws the loss curve (and the accuracy curve beside it, when
// there is one) to path, written whole or not at all.
func (c *Curves) WritePNG(path string) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("--plot %s: the plot is a PNG: name a .png file", path)
	}
	if len(c.Loss) == 0 {
		return errors.New("nothing to plot: no step finished")
	}
	lossPlot, err := c.lossPlot()
	if err != nil {
		return err
	}
	plots := []*plot.Plot{lossPlot}
	if len(c.Accuracy) > 0 {
		accPlot, err := c.accuracyPlot()
		if err != nil {
			return err
		}
		plots = append(plots, accPlot)
	}
	const w, h = 6 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(w*vg.Length(len(plots)), h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return writePNGFile(path, img)
}

// lossPlot is the training loss by step, with the validation loss where
// there is one.
func (c *Curves) lossPlot() (*plot.Plot, error) {
	lossPlot := plot.New()
	lossPlot.Title.Text = c.Title + ": training loss"
	lossPlot.X.Label.Text = "step"
	lossPlot.Y.Label.Text = "loss"
	line, err := plotter.NewLine(c.Loss)
	if err != nil {
		return nil, err
	}
	lossPlot.Add(line, plotter.NewGrid())
	if len(c.ValLoss) > 0 {
		lossPlot.Title.Text = c.Title + ": loss"
		val, points, err := plotter.NewLinePoints(c.ValLoss)
		if err != nil {
			return nil, err
		}
		val.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		lossPlot.Add(val, points)
		lossPlot.Legend.Add("train", line)
		lossPlot.Legend.Add("val", val, points)
		lossPlot.Legend.Top = true
	}
	return lossPlot, nil
}

// accuracyPlot is the accuracy by epoch, in percent.
func (c *Curves) accuracyPlot() (*plot.Plot, error) {
	accPlot := plot.New()
	of := c.AccuracyOf
	if of == "" {
		of = "test"
	}
	accPlot.Title.Text = c.Title + ": " + of + " accuracy"
	accPlot.X.Label.Text = "epoch"
	accPlot.X.Tick.Marker = wholeTicks
	accPlot.Y.Label.Text = "accuracy (%)"
	pts := make(plotter.XYs, len(c.Accuracy))
	for i, p := range c.Accuracy {
		pts[i] = plotter.XY{X: p.X, Y: 100 * p.Y}
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, err
	}
	accPlot.Add(line, points, plotter.NewGrid())
	return accPlot, nil
}

// writePNGFile writes img to path as a PNG, through a temporary file
// renamed into place, so path is written whole or not at all.
func writePNGFile(path string, img *vgimg.Canvas) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".plot-*.png")
	if err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	if err := errors.Join(tmp.Chmod(procfs.CreateMode("/proc")), tmp.Close()); err != nil { // not os.CreateTemp's 0600
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// wholeTicks marks whole numbers only (epochs), about eight at most.
var wholeTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	first, last := math.Ceil(lo), math.Floor(hi)
	every := max(1, math.Ceil((last-first)/8))
	var ticks []plot.Tick
	for v := first; v <= last; v += every {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ticks
})
