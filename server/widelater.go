package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// The later looks at a lone request's wide form. The load times whether a
// request that finds every core of the model free should run P across all
// of them, once: choice.TimeWide when the clock chose P on one request's
// cores, choice.PreferWide (the chosen schedule, P on one request's cores
// and P across all of them) when it chose another. A load beside other
// busy processes finds the wide form no faster (bytelm, 2026-11-27, AMD
// EPYC Zen 4, 2 cores: 2.36 ms across both against 2.01 on one for two
// servers loading at once; 1.41 against 1.87 on a quiet host) and would
// keep lone requests on one core for the model's life. So a model whose
// load said no times the forms again, with the same rule over the same
// programs, at growing intervals after it starts, and only while it is
// idle: no request of its own in flight or arriving for wideQuiet, and
// every core slot of the model held by the look, so that no request runs
// beside it. A request that arrives during a look ends it before the next
// run of the timing (one inference at most), and that look is spent. The
// first look that finds the wide form faster switches the model to the
// form a load that had found so would have served (an atomic swap of
// seqModel.form: requests in flight keep their programs), and the
// metadata says so with the times; a wide form once allowed is never
// looked at again. At most len(wideLooks) timings, each within the
// load's budget for this (half of schedule_timing, twice for TimeWide),
// so the time spent timing is bounded.
//
// What they cost: the programs the looks time stay built until the looks
// end, with their weight copies. After TimeWide that is the wide P's
// slices, as many bytes as the weights (P on one core is served anyway,
// or reads those slices). After PreferWide it is both P forms beside the
// schedule served: the wide P's slices and, unless P on one core reads
// them (choice.Shares), a copy of its own, up to twice the weights for
// about six minutes. The load keeps them only within the bound the clock
// keeps when it times programs together (choice.HoldBeside), and says so
// in schedule_reason when it does not.

// wideLooks are the pauses before each later look: the first 1 s after
// the model starts, each next one four times longer (about 5.7 minutes in
// all, plus the waits for idle moments), each moved by up to a quarter
// either way at random (jitter).
var wideLooks = []time.Duration{time.Second, 4 * time.Second, 16 * time.Second, 64 * time.Second, 256 * time.Second}

// wideQuiet is how long no request of the model may have arrived before
// a look starts.
const wideQuiet = time.Second

// wideLater is what the later looks need: the form the model switches
// to once a look finds the wide form faster, the pauses, and the timing.
type wideLater struct {
	// to is P on one request's cores with its wide form, which the load
	// built and timed and did not let lone requests run.
	to seqForm
	// sched is to's schedule as the metadata names it; says is what
	// schedule_reason adds at the switch beside the look's verdict; then
	// is what the load's reason says the looks will do, and never what
	// it says they found when none switched.
	sched, says, then, never string
	looks                    []time.Duration
	quiet                    time.Duration
	// look times the forms, asking quit before each run, and says whether
	// the switch pays and why.
	look func(quit func() bool) (bool, string, error)
}

// newWideLater is the later looks at wide for a model that serves narrow,
// P on one request's cores, timed like the load's: P on narrow's cores
// against P on wide's (choice.TimeWide), steps steps, budget a look.
func newWideLater(net *rnn.Network, narrow, wide *schedule.Program, steps int, budget time.Duration) *wideLater {
	return &wideLater{to: seqForm{prog: narrow, wide: wide}, sched: choice.Of(narrow).String(),
		then: "and a lone request runs across all cores once that is faster", never: "never faster across all cores",
		looks: wideLooks, quiet: wideQuiet,
		look: func(quit func() bool) (bool, string, error) {
			return choice.TimeWide(net, narrow, wide, steps, budget, quit)
		}}
}

// newPreferLater is the later looks for a model that serves chosen, which
// the clock chose, and whose load found P not to pay (choice.PreferWide):
// chosen, P on narrow's cores and P on wide's, timed as the load did.
// says is what schedule_reason adds once the switch is made.
func newPreferLater(net *rnn.Network, chosen, narrow, wide *schedule.Program, says string, steps int, budget time.Duration) *wideLater {
	return &wideLater{to: seqForm{prog: narrow, wide: wide}, sched: choice.Of(narrow).String(), says: says,
		then:  fmt.Sprintf("and the model runs %v, a lone request across all cores, once that pays", choice.Of(narrow)),
		never: fmt.Sprintf("%v never paid", choice.Of(narrow)),
		looks: wideLooks, quiet: wideQuiet,
		look: func(quit func() bool) (bool, string, error) {
			return preferWide(net, chosen, narrow, wide, steps, budget, quit)
		}}
}

// kept is the programs the looks hold.
func (l *wideLater) kept() []*schedule.Program { return []*schedule.Program{l.to.prog, l.to.wide} }

// laterReason is what schedule_reason adds for a model with later looks.
func laterReason(l *wideLater) string {
	var total time.Duration
	for _, d := range l.looks {
		total += d
	}
	return fmt.Sprintf("; timed again while the model is idle, up to %d times over about the first %v after it starts, %s",
		len(l.looks), total.Round(time.Second), l.then)
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
		m.switchWide(time.Since(start).Round(time.Second), tried, why)
		return
	}
	// None found it faster: the programs timed and not served go with the
	// looks.
	never := l.never
	m.dropLater()
	m.redescribe(func(r *api.RNNMetadata) {
		var b strings.Builder
		fmt.Fprintf(&b, "; timed again %d times with the model idle, %s", tried-ended, never)
		if ended > 0 {
			fmt.Fprintf(&b, " (%d more ended by a request)", ended)
		}
		if last != "" {
			fmt.Fprintf(&b, "; the last: %s", last)
		}
		r.ScheduleReason += b.String()
	})
}

// switchWide makes m serve the looks' form from now on, and says so in
// its metadata: look tried, after the start, found it pays for why.
func (m *seqModel) switchWide(after time.Duration, tried int, why string) {
	l := m.later
	to := l.to
	old := m.form.Swap(&to)
	m.redescribe(func(r *api.RNNMetadata) {
		r.ScheduleReason += fmt.Sprintf("; timed again %v after the start, with the model idle (look %d): %s", after, tried, why) + l.says
		r.Schedule = l.sched
		r.WideCores = to.wide.Workers()
	})
	if m.relabel != nil {
		m.relabel(choice.Of(old.prog).String(), l.sched)
	}
	m.metrics.wide.Add(0)
	m.log.Info("model event", "event", "wide", "model", m.name, "schedule", l.sched, "after", after, "why", why)
	m.dropLater(old.prog)
}

// dropLater lets the looks' programs go, and gone (the program m served
// before a switch, if any): where one held weight copies that the form
// served does not read, it collects, so that they are unmapped now
// rather than at some later collection (see choice.Builds.Release). A
// request in flight that runs one keeps it until it ends.
func (m *seqModel) dropLater(gone ...*schedule.Program) {
	l := m.later
	dropped := append(l.kept(), gone...)
	l.to, l.look = seqForm{}, nil
	f := m.form.Load()
	if choice.Unheld(dropped, []*schedule.Program{f.prog, f.wide}) {
		clear(dropped)
		runtime.GC()
	}
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
