package sweep

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a bar with the rows done and the time left on one
// terminal line, redrawn at most ten times a second. A nil writer draws
// nothing.
type progress struct {
	w     io.Writer
	total int
	start time.Time
	last  time.Time
	width int
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, start: time.Now(), width: 30}
}

func (p *progress) update(done int) {
	if p.w == nil {
		return
	}
	if t := time.Now(); t.Sub(p.last) >= 100*time.Millisecond || done == p.total {
		p.last = t
		p.draw(done, t)
	}
}

func (p *progress) draw(done int, t time.Time) {
	frac := 1.0
	if p.total > 0 {
		frac = float64(done) / float64(p.total)
	}
	fill := int(frac * float64(p.width))
	bar := strings.Repeat("=", fill)
	if fill < p.width {
		bar += ">" + strings.Repeat(" ", p.width-fill-1)
	}
	elapsed := t.Sub(p.start)
	eta := "ETA --"
	if done > 0 && done < p.total {
		left := time.Duration(float64(elapsed) / float64(done) * float64(p.total-done))
		eta = "ETA " + fmtDuration(left)
	} else if done >= p.total {
		eta = "done   "
	}
	fmt.Fprintf(p.w, "\r[%s] %d/%d rows %3.0f%%  %s elapsed  %s ", bar, done, p.total, 100*frac, fmtDuration(elapsed), eta)
}

// done draws the final state and ends the line.
func (p *progress) done(done int) {
	if p.w == nil {
		return
	}
	p.draw(done, time.Now())
	fmt.Fprintln(p.w)
}

func fmtDuration(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
