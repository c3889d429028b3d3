package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// The later looks at a lone request's wide form. The load times whether a
// request that finds every core of the model free should run P across all
// of them (choice.TimeWide), once; a load beside other busy processes
// finds the wide form no faster (bytelm, 2026-11-27, AMD EPYC Zen 4, 2
// cores: 2.36 ms across both against 2.01 on one for two servers loading
// at once; 1.41 against 1.87 on a quiet host) and would keep lone
// requests on one core for the model's life. So a model whose load said
// no times the two forms again, with the same rule over the same
// programs, at growing intervals after it starts, and only while it is
// idle: no request of its own in flight or arriving for wideQuiet, and
// every core slot of the model held by the look, so that no request runs
// beside it. A request that arrives during a look ends it before the next
// run of the timing (one inference at most), and that look is spent. The
// first look that finds the wide form faster lets lone requests run it
// from then on (an atomic swap: requests in flight keep their program),
// and the metadata's schedule_reason says so with the times; a wide form
// once allowed is never looked at again. At most len(wideLooks) timings,
// each within the load's budget for this (half of schedule_timing, twice),
// so the time spent timing is bounded.

// wideLooks are the pauses before each later look: the first 1 s after
// the model starts, each next one four times longer (about 5.7 minutes in
// all, plus the waits for idle moments), each moved by up to a quarter
// either way at random (jitter).
var wideLooks = []time.Duration{time.Second, 4 * time.Second, 16 * time.Second, 64 * time.Second, 256 * time.Second}

// wideQuiet is how long no request of the model may have arrived before
// a look starts.
const wideQuiet = time.Second

// wideLater is what the later looks need: the wide program the load
// built and did not let lone requests run, the pauses, and the timing.
type wideLater struct {
	wide  *schedule.Program
	looks []time.Duration
	quiet time.Duration
	// look times the one-core and the wide form, asking quit before each
	// run, and says whether the wide form is faster and why.
	look func(quit func() bool) (bool, string, error)
}

// newWideLater is the later looks at wide, timed like the load's: P on
// narrow's cores against P on wide's, steps steps, budget a look.
func newWideLater(net *rnn.Network, narrow, wide *schedule.Program, steps int, budget time.Duration) *wideLater {
	return &wideLater{wide: wide, looks: wideLooks, quiet: wideQuiet, look: func(quit func() bool) (bool, string, error) {
		return choice.TimeWide(net, narrow, wide, steps, budget, quit)
	}}
}

// laterReason is what schedule_reason adds for a model with later looks.
func laterReason(l *wideLater) string {
	var total time.Duration
	for _, d := range l.looks {
		total += d
	}
	return fmt.Sprintf("; timed again while the model is idle, up to %d times over about the first %v after it starts, and a lone request runs across all cores once that is faster",
		len(l.looks), total.Round(time.Second))
}

// lookLater runs m's later looks until one lets lone requests go wide,
// all are spent, or stop is closed.
func (m *seqModel) lookLater(stop <-chan struct{}) {
	l := m.later
	start := time.Now()
	var tried, ended int
	var last string
	for _, pause := range l.looks {
		if !sleep(stop, jitter(pause)) || !m.waitQuiet(stop, l.quiet) {
			return
		}
		tried++
		faster, why, err := m.idleLook(stop, l.look)
		switch {
		case errors.Is(err, choice.ErrQuit):
			ended++
			continue
		case err != nil:
			m.log.Warn("model event", "event", "wide_look", "model", m.name, "err", err)
			return
		case !faster:
			last = why
			continue
		}
		wide := l.wide
		m.wide.Store(wide)
		after := time.Since(start).Round(time.Second)
		m.redescribe(func(r *api.RNNMetadata) {
			r.ScheduleReason += fmt.Sprintf("; timed again %v after the start, with the model idle (look %d): %s", after, tried, why)
			r.WideCores = wide.Workers()
		})
		m.log.Info("model event", "event", "wide", "model", m.name, "after", after, "why", why)
		return
	}
	// None found it faster: the wide form's weights go with the looks.
	l.wide, l.look = nil, nil
	m.redescribe(func(r *api.RNNMetadata) {
		var b strings.Builder
		fmt.Fprintf(&b, "; timed again %d times with the model idle, never faster across all cores", tried-ended)
		if ended > 0 {
			fmt.Fprintf(&b, " (%d more ended by a request)", ended)
		}
		if last != "" {
			fmt.Fprintf(&b, "; the last: %s", last)
		}
		r.ScheduleReason += b.String()
	})
}

// jitter is d moved by up to a quarter either way, at random: servers
// started together (replicas on one host) then do not look at the same
// moments, each finding the other's timing on its cores.
func jitter(d time.Duration) time.Duration {
	if d < 4 {
		return d
	}
	return d - d/4 + rand.N(d/2)
}

// sleep waits d; false when stop closed first.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// waitQuiet waits until no request of m arrived for quiet and none is in
// flight; false when stop closed first.
func (m *seqModel) waitQuiet(stop <-chan struct{}, quiet time.Duration) bool {
	for {
		seen := m.stats.requests.Load()
		if !sleep(stop, quiet) {
			return false
		}
		if m.stats.requests.Load() == seen && m.stats.inflight.Load() == 0 {
			return true
		}
	}
}

// idleLook runs look holding every core slot of m (a panic in it comes
// back as an error, and ends the looks), and ends it
// (choice.ErrQuit) as soon as a request of m arrives or stop closes;
// ErrQuit too when a slot is held (a lane or a plan at work) or a request
// is in flight when it starts.
func (m *seqModel) idleLook(stop <-chan struct{}, look func(quit func() bool) (bool, string, error)) (bool, string, error) {
	seen := m.stats.requests.Load()
	taken := 0
	defer func() {
		for range taken {
			m.cores.give()
		}
	}()
	for taken < cap(m.cores) && m.cores.tryTake() {
		taken++
	}
	quit := func() bool {
		select {
		case <-stop:
			return true
		default:
		}
		return m.stats.requests.Load() != seen || m.stats.inflight.Load() > 0
	}
	if taken < cap(m.cores) || quit() {
		return false, "", choice.ErrQuit
	}
	var faster bool
	var why string
	err := m.protect("later look at the wide form", func() (err error) {
		faster, why, err = look(quit)
		return err
	})
	return faster, why, err
}
