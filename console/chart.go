package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/mendq/mend/storage"
)

// chart is a server-rendered SVG of the last hour, per minute: records
// recorded and finished (bars) and the average and maximum repair latency
// (lines). Only numbers reach the SVG; the template escapes them anyway.
type chart struct {
	W, H, PlotH     int
	Bars            []bar
	AvgLine         string
	MaxLine         string
	CountMax        int64
	LatencyMax      string
	Recorded, Done  int64
	Minutes         int
	HasLatency      bool
	AxisY, LegendY  int
	LatencyTopLabel string
}

type bar struct {
	X, DoneX, W  float64
	RecY, RecH   float64
	DoneY, DoneH float64
	Title        string
}

func makeChart(mins []storage.Minute) chart {
	c := chart{W: 720, H: 200, PlotH: 160, Minutes: len(mins)}
	c.AxisY, c.LegendY = c.PlotH, c.H-8
	var maxN int64 = 1
	var maxL time.Duration
	for _, m := range mins {
		maxN = max(maxN, m.Recorded, m.Done)
		maxL = max(maxL, m.LatencyMax)
		c.Recorded += m.Recorded
		c.Done += m.Done
	}
	c.CountMax = maxN
	c.HasLatency = maxL > 0
	c.LatencyTopLabel = dur(maxL)
	if len(mins) == 0 {
		return c
	}
	slot := float64(c.W) / float64(len(mins))
	h := float64(c.PlotH)
	var avg, mx []string
	for i, m := range mins {
		x := float64(i) * slot
		rh := h * float64(m.Recorded) / float64(maxN)
		dh := h * float64(m.Done) / float64(maxN)
		c.Bars = append(c.Bars, bar{X: x + 1, DoneX: x + slot/2, W: slot/2 - 1, RecY: h - rh, RecH: rh, DoneY: h - dh, DoneH: dh,
			Title: fmt.Sprintf("%d min ago: %d recorded, %d finished, latency avg %s max %s", m.Ago, m.Recorded, m.Done, dur(m.LatencyAvg), dur(m.LatencyMax))})
		if maxL > 0 && m.Done > 0 {
			cx := x + slot/2
			avg = append(avg, fmt.Sprintf("%.1f,%.1f", cx, h-h*float64(m.LatencyAvg)/float64(maxL)))
			mx = append(mx, fmt.Sprintf("%.1f,%.1f", cx, h-h*float64(m.LatencyMax)/float64(maxL)))
		}
	}
	c.AvgLine, c.MaxLine = strings.Join(avg, " "), strings.Join(mx, " ")
	return c
}
