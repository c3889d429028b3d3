package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
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
// A model that is never idle for wideQuiet (one client sending requests
// back to back) would never look again. So after TimeWide, where the
// model serves P on one request's cores and P across all of them computes
// every output bit for bit the same (TestLiveLookSameAnswers), a look
// that finds the model busy times its own lone requests instead (a live
// look, lookLive): the next requests that find every core slot of the
// model free alternate between the two forms, a wide one holding every
// slot as a lone request does after a switch, a narrow one leaving the
// others free, and each one's wall time per step (per row and time step)
// is a sample, unless another request of the model arrived while it ran.
// No request waits for a sample: one that cannot take every slot at once
// runs narrow, as it would anyway, and is no sample. Once each form has
// wideLater.samples (liveSamples), the medians go through TimeWide's rule
// (choice.WideFaster) and switch the model as an idle look would; a live
// look that has not gathered them within wideQuiet plus its pause is
// spent, and so is the look. The idle look still runs when the model
// falls quiet during a live look (once a look: a request that ends it
// goes on as a sample), and whichever has its verdict first is the
// look's. After PreferWide the model serves A or A+, whose answers may
// differ from P's in the last bits, so a request's answer would depend on
// the look: there the looks time only an idle model.
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

// liveSamples is how many lone requests of each form a live look times.
const liveSamples = 8

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
	// live is the rule a live look applies to the medians of lone
	// requests on to.prog and to.wide (choice.WideFaster), samples of
	// each; nil where the looks time only an idle model.
	live    func(narrow, wide time.Duration) bool
	samples int
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
		},
		live: choice.WideFaster, samples: liveSamples}
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
	if l.live != nil {
		return fmt.Sprintf("; timed again while the model is idle, or else on %d of its lone requests on each form, up to %d times over about the first %v after it starts, %s",
			l.samples, len(l.looks), total.Round(time.Second), l.then)
	}
	return fmt.Sprintf("; timed again while the model is idle, up to %d times over about the first %v after it starts, %s",
		len(l.looks), total.Round(time.Second), l.then)
}

// lookLater runs m's later looks until one lets lone requests go wide,
// all are spent, or stop is closed.
func (m *seqModel) lookLater(stop <-chan struct{}) {
	l := m.later
	start := time.Now()
	var tried, ended, live int
	var last string
	for _, pause := range l.looks {
		pause = jitter(pause)
		if !sleep(stop, pause) {
			return
		}
		var faster, onLive bool
		var why string
		var err error
		if l.live == nil {
			if !m.waitQuiet(stop, l.quiet) {
				return
			}
			faster, why, err = m.idleLook(stop, l.look)
		} else {
			faster, why, onLive, err = m.lookLive(stop, pause)
		}
		if stopped(stop) {
			return
		}
		tried++
		switch {
		case errors.Is(err, choice.ErrQuit):
			ended++
			continue
		case err != nil:
			m.log.Warn("model event", "event", "wide_look", "model", m.name, "err", err)
			return
		case onLive:
			live++
		}
		if !faster {
			last = why
			continue
		}
		how := "with the model idle"
		if onLive {
			how = "on its live lone requests"
		}
		m.switchWide(time.Since(start).Round(time.Second), tried, how, why)
		return
	}
	// None found it faster: the programs timed and not served go with the
	// looks.
	never, spent := l.never, "ended by a request"
	if l.live != nil {
		spent = "spent: ended by a request, or too few lone requests in time"
	}
	m.dropLater()
	m.redescribe(func(r *api.RNNMetadata) {
		var b strings.Builder
		fmt.Fprintf(&b, "; timed again %d times with the model idle", tried-ended-live)
		if live > 0 {
			fmt.Fprintf(&b, " and %d on its live lone requests", live)
		}
		fmt.Fprintf(&b, ", %s", never)
		if ended > 0 {
			fmt.Fprintf(&b, " (%d more %s)", ended, spent)
		}
		if last != "" {
			fmt.Fprintf(&b, "; the last: %s", last)
		}
		r.ScheduleReason += b.String()
	})
}

// switchWide makes m serve the looks' form from now on, and says so in
// its metadata: look tried, after the start, timed how, found it pays
// for why.
func (m *seqModel) switchWide(after time.Duration, tried int, how, why string) {
	l := m.later
	to := l.to
	old := m.form.Swap(&to)
	m.redescribe(func(r *api.RNNMetadata) {
		r.ScheduleReason += fmt.Sprintf("; timed again %v after the start, %s (look %d): %s", after, how, tried, why) + l.says
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

// stopped reports whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
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

// liveLook is a look timed on the model's own lone requests: each runs
// the form with fewer samples so far (narrow first, so they alternate),
// and its wall time per step goes to that form's samples until each has
// want.
type liveLook struct {
	wide *schedule.Program // the form across every core; narrow is the one served
	want int
	mu   sync.Mutex
	per  [2][]time.Duration // per step: narrow's, wide's
	full chan struct{}      // closed once both have want
}

// turn says which form the next lone request runs as a sample; ok is
// false once both have their samples.
func (lv *liveLook) turn() (wide, ok bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	n, w := len(lv.per[0]), len(lv.per[1])
	return w < n, n < lv.want || w < lv.want
}

// record adds a sample of the wide form or the narrow one.
func (lv *liveLook) record(wide bool, d time.Duration) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	k := 0
	if wide {
		k = 1
	}
	if len(lv.per[k]) == lv.want {
		return
	}
	lv.per[k] = append(lv.per[k], d)
	if len(lv.per[0]) == lv.want && len(lv.per[1]) == lv.want {
		close(lv.full)
	}
}

// medians returns the median sample of the narrow form and of the wide.
func (lv *liveLook) medians() (narrow, wide time.Duration) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	med := func(ts []time.Duration) time.Duration {
		ts = slices.Sorted(slices.Values(ts))
		return ts[len(ts)/2]
	}
	return med(lv.per[0]), med(lv.per[1])
}

// lookLive is one look of a model whose looks may time its lone
// requests, pause its pause: the idle look once no request arrived for
// l.quiet and none is in flight (once: a request that ends it goes on as
// a sample), else a live look at the lone requests, until one has its
// verdict (onLive says which). The live look lasts at most l.quiet plus
// pause; then the look is spent (choice.ErrQuit), as it is when stop
// closes, unless the model has been idle for l.quiet since the last
// tick: a goroutine woken late, with the end and a tick both due, still
// gives an idle model its idle look (TestWideLaterLateTick).
func (m *seqModel) lookLive(stop <-chan struct{}, pause time.Duration) (faster bool, why string, onLive bool, err error) {
	l := m.later
	lv := &liveLook{wide: l.to.wide, want: l.samples, full: make(chan struct{})}
	m.live.Store(lv)
	defer m.live.Store(nil)
	// seenAt before the timers: a tick or the end is then never due
	// sooner than l.quiet after it.
	seen, seenAt, idled := m.stats.requests.Load(), time.Now(), false
	end := time.NewTimer(l.quiet + pause)
	defer end.Stop()
	tick := time.NewTicker(l.quiet)
	defer tick.Stop()
	// idle runs the idle look once, if no request arrived for l.quiet
	// (since the last tick) and none is in flight; done says whether it
	// has the verdict.
	idle := func() (done bool) {
		if idled || time.Since(seenAt) < l.quiet || m.stats.requests.Load() != seen || m.stats.inflight.Load() != 0 {
			return false
		}
		idled = true
		faster, why, err = m.idleLook(stop, l.look)
		return !errors.Is(err, choice.ErrQuit)
	}
	for {
		select {
		case <-stop:
			return false, "", false, choice.ErrQuit
		case <-end.C:
			// A tick due with the end (this goroutine woken late, on a
			// busy host) still gets its idle look.
			if idle() {
				return faster, why, false, err
			}
			return false, "", false, choice.ErrQuit
		case <-lv.full:
			m.live.Store(nil)
			err := m.protect("live look at the wide form", func() error {
				faster, why = liveVerdict(l.live, lv, l.to.prog.Workers(), lv.wide.Workers())
				return nil
			})
			return faster, why, true, err
		case <-tick.C:
			if idle() {
				return faster, why, false, err
			}
			seen, seenAt = m.stats.requests.Load(), time.Now()
		}
	}
}

// liveVerdict applies rule to the medians of lv's samples, and says what
// it found: narrow and wide are the cores of each form.
func liveVerdict(rule func(narrow, wide time.Duration) bool, lv *liveLook, narrow, wide int) (bool, string) {
	n, w := lv.medians()
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Nanosecond) }
	says := fmt.Sprintf("a request that finds all of the model's %d cores free", wide)
	times := fmt.Sprintf("on %d core(s) %v, on %d %v per row and step (medians of %d lone requests each)", narrow, r(n), wide, r(w), lv.want)
	if rule(n, w) {
		return true, fmt.Sprintf("%s runs it across all of them: %s", says, times)
	}
	return false, fmt.Sprintf("%s stays on its own cores (not faster across all of them on live requests): %s", says, times)
}

// sample runs a request, holding one of cores' slots, while lv times
// lone requests. One that finds every other slot free too is lone and
// runs the form lv asks for: the wide one holding every slot, as a lone
// request does after a switch, or the one served, leaving the others
// free; its wall time per row and step is a sample unless another request
// of the model arrived while it ran. Any other request runs the form
// served, as it would without the look.
func (m *seqModel) sample(lv *liveLook, cores coreSlots, in *seqInput, state *seqState, wantHead bool) ([]rowResult, error) {
	prog := m.form.Load().prog
	release := cores.takeRest()
	if release == nil {
		return m.runPlan(in, state, wantHead, prog, nil)
	}
	wide, ok := lv.turn()
	if wide {
		prog = lv.wide
		m.metrics.wide.Inc()
	} else {
		release()
		release = nil
	}
	seen, start := m.stats.requests.Load(), time.Now()
	res, err := m.runPlan(in, state, wantHead, prog, release)
	if ok && err == nil && m.stats.requests.Load() == seen {
		lv.record(wide, time.Since(start)/time.Duration(max(1, in.T*in.B)))
	}
	return res, err
}
