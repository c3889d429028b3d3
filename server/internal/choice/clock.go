package choice

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// The schedule choice checked against the clock. The traffic model ranks
// the candidates (Choose); with a timing budget
// (server.Options.ScheduleTiming) the best TimedCandidates of that
// ranking are then run on this host, alternating, on the reference input
// (ReferenceInput: batch 1, Host.Steps steps), and the fastest median
// wins if it beats the model's choice by more than OverruleMargin, and
// again when the two are timed a second time (decide). The model's bytes say which schedules can be fast; the
// clock says which is, on this machine, with its kernels, barrier cost and
// core count, which the bytes do not see (a 2-core P of a small model
// spends more on its phase barriers than it saves on weights).

// DefaultTiming is the server's default timing budget per model
// (server.Options.ScheduleTiming).
const DefaultTiming = 300 * time.Millisecond

// ErrQuit is returned by a timing its caller asked to end (TimeWide's quit).
var ErrQuit = errors.New("choice: timing ended by its caller")

// TimedCandidates is how many of the traffic model's best candidates are
// timed.
const TimedCandidates = 3

// MinTimedRuns is how many runs each timed candidate gets at least,
// whatever the budget (one warm-up run comes first).
const MinTimedRuns = 3

// ranked lists the candidates in the order Choose's rule prefers
// them: the chosen one first, then by warm DRAM bytes, per-core bytes and
// preference.
func ranked(cands []Candidate, traffic []api.ScheduleTraffic) []int {
	best := pick(cands, traffic)
	order := []int{best}
	for i := range cands {
		if i != best {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order[1:], func(a, b int) int {
		ta, tb := traffic[a], traffic[b]
		return cmp.Or(cmp.Compare(ta.WarmDRAMBytes, tb.WarmDRAMBytes), cmp.Compare(*ta.CoreBytes, *tb.CoreBytes),
			cmp.Compare(cands[a].preference(), cands[b].preference()))
	})
	return order
}

// OverruleMargin is how much faster than the traffic model's choice the
// clock's fastest candidate must be to overrule it. The few runs timed at
// load move by about that much on a shared host: in two checks of the
// choice over the Table I shapes (BenchmarkChoiceTableI, 2026-11-26
// 10:00-10:05 UTC) every schedule chosen more than 5% slower than the
// fastest was one where the clock had overruled the model's P for A+
// (chosen/fastest up to 1.255 and 1.135), and P was the fastest when
// timed again for a second.
const OverruleMargin = 0.05

// clockPick returns the index of the schedule to run, given the medians
// of the timed candidates with the traffic model's choice first: the
// fastest, unless the model's choice is within OverruleMargin of it.
func clockPick(medians []time.Duration) int {
	fastest := 0
	for k, m := range medians {
		if m < medians[fastest] {
			fastest = k
		}
	}
	if float64(medians[fastest]) > (1-OverruleMargin)*float64(medians[0]) {
		return 0
	}
	return fastest
}

// timingGap is the pause before each timed run: longer than a pool
// helper's idle spin (schedule's IdleSpin, 20 µs), so helpers park.
const timingGap = 200 * time.Microsecond

// timed is the median time of one inference and how many runs it is of.
type timed struct {
	median time.Duration
	runs   int
}

// timePrograms runs one plan of each program on in, round after round
// (each program in turn, so a slow moment of the machine hits all of them
// alike), until budget has passed and each has MinTimedRuns timed runs,
// and returns each program's median. In its turn a program runs twice and
// only the second run is timed, after a pause of timingGap: the first
// brings its own weights back into the caches the other programs' runs
// took (a serving process runs one schedule, whose weights stay cached),
// and the pause lets a pool's helpers park as they do between lone
// requests, so that a plan across several cores pays their wake-up as it
// would when serving. Timed back to back instead, a program whose weights
// are copies of its own paid the others' evictions and the choice could
// go to a schedule 15-20% slower in service.
//
// quit, when not nil, is asked before every run: once it says yes the
// timing ends with ErrQuit.
func timePrograms(progs []*schedule.Program, in schedule.Input, budget time.Duration, quit func() bool) ([]timed, error) {
	run := func(p *schedule.Plan) error {
		if quit != nil && quit() {
			return ErrQuit
		}
		_, err := p.Run()
		return err
	}
	plans := make([]*schedule.Plan, len(progs))
	for i, prog := range progs {
		p, err := prog.Plan(in, schedule.PlanOptions{Head: true})
		if err != nil {
			return nil, err
		}
		if err := run(p); err != nil { // warm-up: caches, pages, the pool's threads
			return nil, err
		}
		plans[i] = p
	}
	times := make([][]time.Duration, len(plans))
	start := time.Now()
	for round := 0; round < MinTimedRuns || time.Since(start) < budget; round++ {
		for i, p := range plans {
			if err := run(p); err != nil {
				return nil, err
			}
			time.Sleep(timingGap)
			if quit != nil && quit() {
				return nil, ErrQuit
			}
			t0 := time.Now()
			if _, err := p.Run(); err != nil {
				return nil, err
			}
			times[i] = append(times[i], time.Since(t0))
		}
	}
	out := make([]timed, len(plans))
	for i, ts := range times {
		slices.Sort(ts)
		out[i] = timed{median: ts[len(ts)/2], runs: len(ts)}
	}
	return out, nil
}

// timeChoice times the traffic model's best candidates, their programs
// made by builds, and returns the fastest, the figures for the metadata
// (MeasuredSeconds set on the timed ones) and a sentence saying what the
// clock decided.
func timeChoice(net *rnn.Network, cands []Candidate, traffic []api.ScheduleTraffic, builds *Builds, steps int, budget time.Duration) (int, string, error) {
	order := ranked(cands, traffic)
	order, untimed, err := withinBound(cands, order[:min(len(order), TimedCandidates)], builds)
	if err != nil {
		return 0, "", err
	}
	if len(order) < 2 {
		return order[0], fmt.Sprintf("not timed: %s", untimed), nil
	}
	progs := make([]*schedule.Program, len(order))
	for k, i := range order {
		p, err := builds.Program(cands[i])
		if err != nil {
			return 0, "", fmt.Errorf("schedule %v: %w", cands[i], err)
		}
		progs[k] = p
	}
	ts, err := timePrograms(progs, ReferenceInput(net, steps), budget, nil)
	if err != nil {
		return 0, "", err
	}
	var figures []string
	medians := make([]time.Duration, len(order))
	for k, i := range order {
		sec := ts[k].median.Seconds()
		traffic[i].MeasuredSeconds, traffic[i].MeasuredRuns = &sec, ts[k].runs
		figures = append(figures, fmt.Sprintf("%v %v", cands[i], ts[k].median.Round(time.Microsecond)))
		medians[k] = ts[k].median
	}
	fastest, verdict, err := decide(medians, func(k int) ([2]time.Duration, error) {
		ts, err := timePrograms([]*schedule.Program{progs[0], progs[k]}, ReferenceInput(net, steps), budget, nil)
		if err != nil {
			return [2]time.Duration{}, err
		}
		return [2]time.Duration{ts[0].median, ts[1].median}, nil
	}, func(k int) string { return cands[order[k]].String() })
	if err != nil {
		return 0, "", err
	}
	if untimed != "" {
		verdict += "; " + untimed
	}
	return order[fastest], fmt.Sprintf("timed on this host (median of at least %d runs of a %d-step inference): %s; %s",
		MinTimedRuns, steps, strings.Join(figures, ", "), verdict), nil
}

// withinBound returns the candidates of order (indices into cands, the
// traffic model's choice first) that the clock times, and a sentence
// naming those it leaves to the traffic model, if any. The programs timed
// are held together until the clock decides, and a weight copy of their
// own (A's G, P's slices) beside another's would raise the load's peak
// well above what serving any one schedule holds: a container sized by
// the memory served would kill the load. So the copies of the programs
// timed together stay within the largest copy any one candidate makes
// (what serving that one holds anyway) plus the last-level cache's size:
// a candidate that would pass it is not built and the traffic model alone
// ranks it. Copies within the cache's size cost little, and there the
// clock matters most (a small model's barriers and call overheads, which
// the bytes do not see); weights larger than the cache stream from DRAM
// under every schedule, which the traffic model counts. The model's
// choice is always timed.
func withinBound(cands []Candidate, order []int, builds *Builds) ([]int, string, error) {
	var largest int64
	for _, c := range cands {
		n, err := builds.copies(c)
		if err != nil {
			return nil, "", fmt.Errorf("schedule %v: %w", c, err)
		}
		largest = max(largest, n)
	}
	bound := largest + builds.LLC
	var timed []int
	var held int64
	var left []string
	for k, i := range order {
		n, err := builds.adds(cands[i])
		if err != nil {
			return nil, "", fmt.Errorf("schedule %v: %w", cands[i], err)
		}
		if k > 0 && held+n > bound {
			left = append(left, fmt.Sprintf("%v (%.1f MiB)", cands[i], float64(n)/(1<<20)))
			continue
		}
		timed = append(timed, i)
		held += n
	}
	if len(left) == 0 {
		return timed, "", nil
	}
	return timed, fmt.Sprintf("%s left to the traffic model: its weight copy beside the %.1f MiB of those timed would pass %.1f MiB (the largest copy one schedule holds and the last-level cache)",
		strings.Join(left, ", "), float64(held)/(1<<20), float64(bound)/(1<<20)), nil
}

// decide applies clockPick to the timed candidates' medians (the traffic
// model's choice first) and returns the index to run and a sentence
// saying why. Before the clock overrules the model it times the two
// again (recheck: the model's choice and candidate k, in that order),
// and overrules only if the second look agrees: a host that stalls one
// candidate's few runs for a moment would otherwise decide. On this
// project's VM that happened at 2 of 48 Table I shapes in one check
// (BenchmarkChoiceTableI, 2026-11-26 12:10 UTC): A+ taken over P at
// lstm/1024/1/10 on two cores (P 2.17x faster when timed again) and at
// lstm/1024/1/100 on one (1.36x).
func decide(medians []time.Duration, recheck func(k int) ([2]time.Duration, error), name func(k int) string) (int, string, error) {
	fastest := clockPick(medians)
	switch {
	case fastest != 0:
		again, err := recheck(fastest)
		if err != nil {
			return 0, "", err
		}
		if clockPick(again[:]) == 0 {
			return 0, fmt.Sprintf("the clock keeps it on a second look: %v was the fastest by more than %.0f%%, then %v against %v",
				name(fastest), 100*OverruleMargin, again[1].Round(time.Microsecond), again[0].Round(time.Microsecond)), nil
		}
		return fastest, fmt.Sprintf("the clock overrules it: %v is the fastest by more than %.0f%%, twice (then %v against %v)",
			name(fastest), 100*OverruleMargin, again[1].Round(time.Microsecond), again[0].Round(time.Microsecond)), nil
	case slices.Min(medians) < medians[0]:
		return 0, fmt.Sprintf("the clock keeps it: no other schedule is faster by more than %.0f%%", 100*OverruleMargin), nil
	}
	return 0, "the clock agrees", nil
}

// TimeWide decides whether a request that finds every core free should
// run P across all of them: yes unless P on the cores one request gets is
// as fast on this host, on two looks, each timed like timeChoice. One
// look can find the other core busy for a moment (another model loading,
// another process), and its verdict would keep lone requests on one core
// until the server looks again (see the server's seqModel.lookLater):
// on bytelm, one look gave 1.09 ms across two cores at one start and
// 1.93 ms at another, against 1.9 on one. quit, when not nil, is asked
// before every run and ends the timing with ErrQuit once it says yes.
func TimeWide(net *rnn.Network, narrow, wide *schedule.Program, steps int, budget time.Duration, quit func() bool) (bool, string, error) {
	in := ReferenceInput(net, steps)
	return wideVerdict(func() ([2]time.Duration, error) {
		ts, err := timePrograms([]*schedule.Program{narrow, wide}, in, budget, quit)
		if err != nil {
			return [2]time.Duration{}, err
		}
		return [2]time.Duration{ts[0].median, ts[1].median}, nil
	}, narrow.Workers(), wide.Workers())
}

// WideFaster is TimeWide's rule on one pair of medians: a request that
// finds every core free runs P across all of them when that is faster
// than P on the cores one request gets, by any amount (a wide P computes
// every output as P on fewer cores does, so nothing but time is at
// stake). The server's live looks (seqModel.lookLive) apply it to times
// of lone requests.
func WideFaster(narrow, wide time.Duration) bool { return wide < narrow }

// wideVerdict is TimeWide's rule over look, which times P on narrow
// workers and on wide ones and returns the two medians in that order.
func wideVerdict(look func() ([2]time.Duration, error), narrow, wide int) (bool, string, error) {
	first, err := look()
	if err != nil {
		return false, "", err
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	says := fmt.Sprintf("a request that finds all of the model's %d cores free", wide)
	if WideFaster(first[0], first[1]) {
		return true, fmt.Sprintf("%s runs it across all of them: on %d core(s) %v, on %d %v (medians)",
			says, narrow, r(first[0]), wide, r(first[1])), nil
	}
	again, err := look()
	if err != nil {
		return false, "", err
	}
	if WideFaster(again[0], again[1]) {
		return true, fmt.Sprintf("%s runs it across all of them, on a second look: on %d core(s) %v, on %d %v, then %v and %v (medians)",
			says, narrow, r(first[0]), wide, r(first[1]), r(again[0]), r(again[1])), nil
	}
	return false, fmt.Sprintf("%s stays on its own cores (not faster across all of them here, twice): on %d core(s) %v, on %d %v, then %v and %v (medians)",
		says, narrow, r(first[0]), wide, r(first[1]), r(again[0]), r(again[1])), nil
}

// widePreference bounds how much slower P on the cores of one request may
// be than the schedule the clock chose, for PreferWide to take P anyway.
const widePreference = 1.10

// widePays is PreferWide's rule: P across every core beats the chosen
// schedule, and P on one request's cores is within widePreference of it.
func widePays(chosen, narrow, wide time.Duration) bool {
	return wide < chosen && float64(narrow) <= widePreference*float64(chosen)
}

// PreferWide decides whether a model should run P although the clock
// chose another schedule on the cores one request gets: with P, a
// request that finds every core of the model free runs across all of
// them, which that comparison leaves out. It times the chosen program, P
// on one request's cores and P across every core, like timeChoice. quit,
// when not nil, is asked before every run and ends the timing with
// ErrQuit once it says yes (the server's later looks, as for TimeWide).
func PreferWide(net *rnn.Network, chosen, narrow, wide *schedule.Program, steps int, budget time.Duration, quit func() bool) (bool, string, error) {
	ts, err := timePrograms([]*schedule.Program{chosen, narrow, wide}, ReferenceInput(net, steps), budget, quit)
	if err != nil {
		return false, "", err
	}
	pays := widePays(ts[0].median, ts[1].median, ts[2].median)
	what := "keeps it"
	if pays {
		what = "takes P instead, for requests that find every core free"
	}
	return pays, fmt.Sprintf("against P across all %d cores, which a lone request would run, the chosen schedule %s (medians: chosen %v, P on %d core(s) %v, P on %d %v)",
		wide.Workers(), what, ts[0].median.Round(time.Microsecond), narrow.Workers(), ts[1].median.Round(time.Microsecond),
		wide.Workers(), ts[2].median.Round(time.Microsecond)), nil
}
