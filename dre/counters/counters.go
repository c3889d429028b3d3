package counters

import (
	"errors"
	"fmt"
	"strings"
)

// Event is one quantity a counter source measures.
type Event uint8

// The events, core ones (perf) first, then the memory controller's
// (uncore).
const (
	Cycles          Event = iota // CPU cycles
	Instructions                 // instructions retired
	CacheReferences              // the generic cache-references event: last-level accesses on most CPUs
	CacheMisses                  // the generic cache-misses event: last-level misses on most CPUs
	LLCLoads                     // last-level cache read accesses
	LLCLoadMisses                // last-level cache read misses
	LLCStores                    // last-level cache write accesses
	LLCStoreMisses               // last-level cache write misses
	DRAMReadBytes                // bytes read at the memory controller
	DRAMWriteBytes               // bytes written at the memory controller
	numEvents
)

var eventNames = [numEvents]string{
	Cycles: "cycles", Instructions: "instructions",
	CacheReferences: "cache_references", CacheMisses: "cache_misses",
	LLCLoads: "llc_loads", LLCLoadMisses: "llc_load_misses",
	LLCStores: "llc_stores", LLCStoreMisses: "llc_store_misses",
	DRAMReadBytes: "dram_read_bytes", DRAMWriteBytes: "dram_write_bytes",
}

func (e Event) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// CoreEvents are the events of the perf source, UncoreEvents those of the
// uncore source.
var (
	CoreEvents   = []Event{Cycles, Instructions, CacheReferences, CacheMisses, LLCLoads, LLCLoadMisses, LLCStores, LLCStoreMisses}
	UncoreEvents = []Event{DRAMReadBytes, DRAMWriteBytes}
)

// Counts holds a value per event. An event that was not measured is
// absent, which is not the same as zero. The zero value holds nothing.
type Counts struct {
	v    [numEvents]float64
	have uint32
}

// Set records v for e.
func (c *Counts) Set(e Event, v float64) {
	c.v[e] = v
	c.have |= 1 << e
}

// Get returns the value of e and whether it was measured.
func (c Counts) Get(e Event) (float64, bool) {
	if e >= numEvents || c.have&(1<<e) == 0 {
		return 0, false
	}
	return c.v[e], true
}

// Has reports whether e was measured.
func (c Counts) Has(e Event) bool { _, ok := c.Get(e); return ok }

// Events lists the measured events in order.
func (c Counts) Events() []Event {
	var es []Event
	for e := range numEvents {
		if c.Has(e) {
			es = append(es, e)
		}
	}
	return es
}

// Empty reports whether no event was measured.
func (c Counts) Empty() bool { return c.have == 0 }

// Sub returns c - base for the events measured in both; an event base
// lacks is absent from the result, since its baseline is unknown.
// Differences below zero (a baseline noisier than the work) are clamped
// to zero.
func (c Counts) Sub(base Counts) Counts {
	var d Counts
	for e := range numEvents {
		v, ok1 := c.Get(e)
		b, ok2 := base.Get(e)
		if ok1 && ok2 {
			d.Set(e, max(v-b, 0))
		}
	}
	return d
}

// Scale returns c with every value multiplied by k.
func (c Counts) Scale(k float64) Counts {
	d := c
	for e := range numEvents {
		d.v[e] *= k
	}
	return d
}

// Add returns c with the events of o added: an event both have is
// summed (the same event read from several PMUs), one only o has is
// copied.
func (c Counts) Add(o Counts) Counts {
	for e := range numEvents {
		if v, ok := o.Get(e); ok {
			w, _ := c.Get(e)
			c.Set(e, w+v)
		}
	}
	return c
}

// LLCMisses is the last-level misses: load plus store misses when both
// were measured, else the generic cache-misses event.
func (c Counts) LLCMisses() (float64, bool) {
	l, ok1 := c.Get(LLCLoadMisses)
	s, ok2 := c.Get(LLCStoreMisses)
	switch {
	case ok1 && ok2:
		return l + s, true
	case ok1:
		return l, true
	}
	return c.Get(CacheMisses)
}

// DRAMBytes is the memory controller's read plus write bytes, when both
// were measured.
func (c Counts) DRAMBytes() (float64, bool) {
	r, ok1 := c.Get(DRAMReadBytes)
	w, ok2 := c.Get(DRAMWriteBytes)
	return r + w, ok1 && ok2
}

func (c Counts) String() string {
	var b strings.Builder
	for i, e := range c.Events() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.0f", e, c.v[e])
	}
	if b.Len() == 0 {
		return "(nothing measured)"
	}
	return b.String()
}

// Source names where measured traffic comes from.
type Source string

// The sources. Auto opens every hardware event available (perf and
// uncore); Cachegrind is not a live counter but valgrind's simulation of
// the program (see Valgrind); None measures nothing.
const (
	Auto       Source = "auto"
	Perf       Source = "perf"
	Uncore     Source = "uncore"
	Cachegrind Source = "cachegrind"
	None       Source = "none"
)

// ParseSource reads a source name.
func ParseSource(s string) (Source, error) {
	switch src := Source(strings.ToLower(s)); src {
	case Auto, Perf, Uncore, Cachegrind, None:
		return src, nil
	}
	return "", fmt.Errorf("counters: unknown source %q (want auto, perf, uncore, cachegrind or none)", s)
}

// Scope is what core events count.
type Scope uint8

const (
	// Thread counts the thread that opened the counters: lock the
	// goroutine to its OS thread (runtime.LockOSThread) before opening
	// and keep it locked until closing. Measure does this.
	Thread Scope = iota
	// CPU counts everything that runs on Options.CPU; it needs
	// perf_event_paranoid <= 0 or CAP_PERFMON.
	CPU
)

func (s Scope) String() string {
	if s == CPU {
		return "cpu"
	}
	return "thread"
}

// Errors. Every *UnavailableError matches ErrUnavailable and its Cause.
var (
	ErrUnavailable = errors.New("counters: unavailable")
	// ErrUnsupportedOS: hardware counters are read through Linux's
	// perf_event_open.
	ErrUnsupportedOS = errors.New("hardware counters need Linux (perf_event_open)")
	// ErrNoPMU: the kernel has no PMU that counts the event, as in a
	// virtual machine without a virtual PMU.
	ErrNoPMU = errors.New("no PMU counts it")
	// ErrPermission: perf_event_paranoid or missing privileges forbid it.
	ErrPermission = errors.New("not permitted")
	// ErrUnknownEvent: the PMU exists but does not know the event.
	ErrUnknownEvent = errors.New("event unknown to the PMU")
	// ErrBusy: the counter is in use (another tool, the NMI watchdog).
	ErrBusy = errors.New("counter busy")
	// ErrNoValue: the event opened but reading it gave no value.
	ErrNoValue = errors.New("opened but read no value")
	// ErrOpen: any other failure to open the event.
	ErrOpen = errors.New("cannot open")
	// ErrNoValgrind: valgrind is not installed.
	ErrNoValgrind = errors.New("valgrind is not on PATH")
)

// UnavailableError says why one event of one source cannot be measured.
type UnavailableError struct {
	Source Source
	Event  string // the event, or "" for the whole source
	Cause  error  // one of the sentinels above
	Detail string // what was tried and what the system said
}

func (e *UnavailableError) Error() string {
	var b strings.Builder
	b.WriteString("counters: ")
	b.WriteString(string(e.Source))
	if e.Event != "" {
		b.WriteString(" " + e.Event)
	}
	b.WriteString(" unavailable: ")
	b.WriteString(e.Cause.Error())
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func unavailable(src Source, event string, cause error, format string, a ...any) *UnavailableError {
	return &UnavailableError{Source: src, Event: event, Cause: cause, Detail: fmt.Sprintf(format, a...)}
}

// Counter is a set of open counters. Start resets and enables them, Stop
// disables them, Read returns their values since Start (only the events
// that gave one), Close releases them. A Counter is used by one goroutine.
type Counter interface {
	Events() []Event
	Start() error
	Stop() error
	Read() (Counts, error)
	Close() error
}

// multi is several Counters read as one.
type multi []Counter

func (m multi) Events() []Event {
	var es []Event
	for _, c := range m {
		es = append(es, c.Events()...)
	}
	return es
}

func (m multi) each(f func(Counter) error) error {
	var errs []error
	for _, c := range m {
		errs = append(errs, f(c))
	}
	return errors.Join(errs...)
}

func (m multi) Start() error { return m.each(Counter.Start) }
func (m multi) Stop() error  { return m.each(Counter.Stop) }
func (m multi) Close() error { return m.each(Counter.Close) }

func (m multi) Read() (Counts, error) {
	var all Counts
	err := m.each(func(c Counter) error {
		v, err := c.Read()
		all = all.Add(v)
		return err
	})
	return all, err
}
