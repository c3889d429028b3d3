package counters

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Options choose which hardware counters Open opens. Zero values mean the
// defaults; call EnsureDefaults and then Validate, or let Open do both.
type Options struct {
	// Source is Perf, Uncore or Auto (both, the default).
	Source Source
	// Scope of the core events: Thread (the default) or CPU.
	Scope Scope
	// CPU is the CPU that CPU scope counts.
	CPU int
	// Root is the directory under which sys/ and proc/ are read; "" means
	// "/". Tests point it at a fake tree.
	Root string

	// perf opens perf-utils profilers and uncore opens raw events; nil
	// means the real ones. Tests replace them.
	perf   perfOpener
	uncore rawOpener
}

// EnsureDefaults fills zero values with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Source == "" {
		o.Source = Auto
	}
	if o.Root == "" {
		o.Root = "/"
	}
}

// ErrInvalidOptions is wrapped by every error Validate returns.
var ErrInvalidOptions = errors.New("counters: invalid options")

// Validate reports the first invalid setting.
func (o Options) Validate() error {
	switch o.Source {
	case Auto, Perf, Uncore:
	default:
		return fmt.Errorf("%w: Source %q: hardware counters are auto, perf or uncore", ErrInvalidOptions, o.Source)
	}
	if o.Scope != Thread && o.Scope != CPU {
		return fmt.Errorf("%w: Scope %d", ErrInvalidOptions, o.Scope)
	}
	if o.CPU < 0 {
		return fmt.Errorf("%w: CPU %d is negative", ErrInvalidOptions, o.CPU)
	}
	return nil
}

// Status is whether one event can be measured.
type Status struct {
	Event  Event
	Source Source
	Err    error // nil when the event opened; else an *UnavailableError
	Note   string
}

// Detection is what Open found on this machine: per event, whether it
// opened and why not.
type Detection struct {
	Source Source
	Scope  Scope
	Events []Status
	// PMUs lists /sys/bus/event_source/devices.
	PMUs []string
	// Paranoid is /proc/sys/kernel/perf_event_paranoid, or "" if unread.
	Paranoid string
}

// Available lists the events that opened.
func (d *Detection) Available() []Event {
	var es []Event
	for _, s := range d.Events {
		if s.Err == nil {
			es = append(es, s.Event)
		}
	}
	return es
}

// Has reports whether e opened.
func (d *Detection) Has(e Event) bool {
	for _, s := range d.Events {
		if s.Event == e && s.Err == nil {
			return true
		}
	}
	return false
}

// Err is nil if some event opened, else an *UnavailableError whose cause
// is the one all events share (ErrNoPMU on a virtual machine, say) or
// ErrUnavailable when they differ, and whose detail names each reason.
func (d *Detection) Err() error {
	if len(d.Available()) > 0 {
		return nil
	}
	var cause error
	var why []string
	seen := map[string]bool{}
	for _, s := range d.Events {
		var ue *UnavailableError
		if !errors.As(s.Err, &ue) {
			continue
		}
		if cause == nil {
			cause = ue.Cause
		} else if cause != ue.Cause {
			cause = ErrUnavailable
		}
		msg := string(ue.Source) + ": " + ue.Cause.Error()
		if ue.Detail != "" {
			msg += " (" + ue.Detail + ")"
		}
		if !seen[msg] {
			seen[msg] = true
			why = append(why, msg)
		}
	}
	if cause == nil {
		cause = ErrUnavailable
	}
	return &UnavailableError{Source: d.Source, Cause: cause, Detail: strings.Join(why, "; ")}
}

// Summary is one line: the events that opened, or why none did.
func (d *Detection) Summary() string {
	if err := d.Err(); err != nil {
		return err.Error()
	}
	var names []string
	for _, e := range d.Available() {
		names = append(names, e.String())
	}
	return fmt.Sprintf("counters: %s (%s scope): %s", d.Source, d.Scope, strings.Join(names, ", "))
}

// Write prints the detection event by event.
func (d *Detection) Write(w io.Writer) {
	fmt.Fprintf(w, "hardware counters (source %s, %s scope):\n", d.Source, d.Scope)
	if len(d.PMUs) > 0 {
		fmt.Fprintf(w, "  PMUs in /sys/bus/event_source/devices: %s\n", strings.Join(d.PMUs, ", "))
	}
	if d.Paranoid != "" {
		fmt.Fprintf(w, "  perf_event_paranoid: %s\n", d.Paranoid)
	}
	for _, s := range d.Events {
		state := "available"
		var ue *UnavailableError
		switch {
		case errors.As(s.Err, &ue):
			state = ue.Cause.Error()
			if ue.Detail != "" {
				state += ": " + ue.Detail
			}
		case s.Err != nil:
			state = s.Err.Error()
		}
		if s.Note != "" {
			state += " (" + s.Note + ")"
		}
		fmt.Fprintf(w, "  %-7s %-17s %s\n", s.Source, s.Event, state)
	}
}

// Open opens the counters of opt that this machine has. It returns a nil
// Counter and d.Err() when none opened; the Detection says, event by
// event, what opened and why the others did not. With Thread scope the
// counters count the calling thread: lock the goroutine to its OS thread
// first and keep it there until Close.
func Open(opt Options) (Counter, *Detection, error) {
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, nil, err
	}
	c, d := open(opt)
	if len(c) == 0 {
		return nil, d, d.Err()
	}
	return c, d, nil
}

// Detect opens and closes every event of opt and reports what it found.
func Detect(opt Options) (*Detection, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, d, err := Open(opt)
	if d == nil {
		return nil, err
	}
	if c != nil {
		if cerr := c.Close(); cerr != nil {
			return d, fmt.Errorf("counters: close: %w", cerr)
		}
	}
	return d, nil
}

// Measurement is what the counters saw over Runs calls of a function.
type Measurement struct {
	Runs     int
	Wall     time.Duration // the runs' wall time
	Raw      Counts        // over the runs
	Baseline Counts        // over an idle interval, scaled to Wall
	Counts   Counts        // Raw - Baseline
}

// PerRun is Counts divided by Runs.
func (m *Measurement) PerRun() Counts { return m.Counts.Scale(1 / float64(m.Runs)) }

// MaxBaseline bounds the idle interval Run measures; a longer run's
// baseline is scaled up from it.
const MaxBaseline = time.Second

// Run calls fn runs times between a Start and a Read of c, then measures
// an idle interval as long as the runs (at most MaxBaseline, scaled to
// their wall time) and subtracts it. Call it on the thread that opened c.
func Run(c Counter, runs int, fn func()) (*Measurement, error) {
	if runs < 1 {
		return nil, fmt.Errorf("%w: runs = %d, want at least 1", ErrInvalidOptions, runs)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("counters: start: %w", err)
	}
	start := time.Now()
	for range runs {
		fn()
	}
	wall := time.Since(start)
	raw, err := read(c)
	if err != nil {
		return nil, err
	}
	idle := min(wall, MaxBaseline)
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("counters: start: %w", err)
	}
	t := time.Now()
	time.Sleep(idle)
	slept := time.Since(t)
	base, err := read(c)
	if err != nil {
		return nil, err
	}
	base = base.Scale(float64(wall) / float64(max(slept, time.Nanosecond)))
	return &Measurement{Runs: runs, Wall: wall, Raw: raw, Baseline: base, Counts: raw.Sub(base)}, nil
}

func read(c Counter) (Counts, error) {
	if err := c.Stop(); err != nil {
		return Counts{}, fmt.Errorf("counters: stop: %w", err)
	}
	v, err := c.Read()
	if err != nil {
		return Counts{}, fmt.Errorf("counters: read: %w", err)
	}
	if v.Empty() {
		return Counts{}, fmt.Errorf("counters: read: %w", &UnavailableError{Source: Auto, Cause: ErrNoValue,
			Detail: "no open event gave a value"})
	}
	return v, nil
}

// Measure opens the counters of opt on the calling goroutine's thread,
// locked for the purpose, runs fn runs times under Run, and closes them.
func Measure(opt Options, runs int, fn func()) (*Measurement, *Detection, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, d, err := Open(opt)
	if err != nil {
		return nil, d, err
	}
	m, err := Run(c, runs, fn)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("counters: close: %w", cerr)
	}
	return m, d, err
}
