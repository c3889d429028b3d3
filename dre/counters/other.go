//go:build !linux

package counters

// perfOpener and rawOpener exist only on Linux.
type (
	perfOpener interface{}
	rawOpener  interface{}
)

// open finds nothing: every event is unavailable with ErrUnsupportedOS.
func open(opt Options) (multi, *Detection) {
	d := &Detection{Source: opt.Source, Scope: opt.Scope}
	add := func(src Source, es []Event) {
		for _, e := range es {
			d.Events = append(d.Events, Status{Event: e, Source: src,
				Err: unavailable(src, e.String(), ErrUnsupportedOS, "this build is not for Linux")})
		}
	}
	if opt.Source == Auto || opt.Source == Perf {
		add(Perf, CoreEvents)
	}
	if opt.Source == Auto || opt.Source == Uncore {
		add(Uncore, UncoreEvents)
	}
	return nil, d
}
