package counters

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// devicesDir is where the kernel lists its PMUs, relative to the root.
const devicesDir = "sys/bus/event_source/devices"

// paranoidFile is perf_event_paranoid, relative to the root.
const paranoidFile = "proc/sys/kernel/perf_event_paranoid"

// listPMUs returns the PMU names under root's devicesDir, sorted.
func listPMUs(root string) []string {
	ents, err := os.ReadDir(filepath.Join(root, devicesDir))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// readParanoid returns perf_event_paranoid's value, or "".
func readParanoid(root string) string {
	b, err := os.ReadFile(filepath.Join(root, paranoidFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// isCorePMU reports whether a PMU name is a CPU's core PMU: "cpu" on x86,
// "cpu_core" and "cpu_atom" on hybrid Intel parts, armv8_* / armv7_* on
// Arm, riscv-pmu on RISC-V.
func isCorePMU(name string) bool {
	return name == "cpu" || strings.HasPrefix(name, "cpu_") || strings.HasPrefix(name, "armv8_") ||
		strings.HasPrefix(name, "armv7_") || name == "riscv-pmu"
}

// uncoreEvent is one memory-controller event of one PMU, ready to open:
// perf_event_open(type, config) on each CPU of cpus, whose counts times
// bytesPer are bytes.
type uncoreEvent struct {
	event    Event
	pmu      string
	name     string
	typ      uint32
	config   uint64
	cpus     []int
	bytesPer float64
}

// casBytes is what one CAS command moves: one 64-byte line.
const casBytes = 64

// The sysfs names of the memory controllers' read and write events, by
// PMU name prefix, in order of preference: a machine with both programmable
// and free-running Intel IMC PMUs is read through the programmable ones.
var uncoreNames = []struct {
	prefix, skip string
	read, write  string
}{
	{"uncore_imc_", "uncore_imc_free_running_", "cas_count_read", "cas_count_write"},
	{"uncore_imc_free_running_", "", "data_read", "data_write"},
	{"amd_umc_", "", "umc_cas_cmd.rd", "umc_cas_cmd.wr"},
}

// findUncore returns the memory-controller events sysfs under root
// describes (every PMU of the first kind that has them), or why there are
// none.
func findUncore(root string) ([]uncoreEvent, error) {
	pmus := listPMUs(root)
	var problems []string
	found := false
	for _, u := range uncoreNames {
		var evs []uncoreEvent
		for _, p := range pmus {
			if !strings.HasPrefix(p, u.prefix) || u.skip != "" && strings.HasPrefix(p, u.skip) {
				continue
			}
			found = true
			dir := filepath.Join(root, devicesDir, p)
			for _, want := range []struct {
				e    Event
				name string
			}{{DRAMReadBytes, u.read}, {DRAMWriteBytes, u.write}} {
				ev, err := readUncoreEvent(dir, want.name)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: %v", p, err))
					continue
				}
				ev.event, ev.pmu = want.e, p
				evs = append(evs, ev)
			}
		}
		if len(evs) > 0 {
			return evs, nil
		}
	}
	if !found {
		msg := fmt.Sprintf("no memory-controller PMU (uncore_imc_*, amd_umc_*) in /%s", devicesDir)
		if len(pmus) > 0 {
			msg += " (it lists " + strings.Join(pmus, ", ") + ")"
		}
		if slices.Contains(pmus, "amd_df") {
			msg += "; amd_df is there, but the kernel names none of its DRAM events in sysfs"
		}
		return nil, unavailable(Uncore, "", ErrNoPMU, "%s", msg)
	}
	return nil, unavailable(Uncore, "", ErrUnknownEvent, "%s", strings.Join(problems, "; "))
}

// errNoEvent is returned by readUncoreEvent when sysfs does not name the
// event.
var errNoEvent = errors.New("the kernel names no such event in sysfs")

// readUncoreEvent reads event name of the PMU in dir: its type, its
// config from events/NAME and the format/ files, the CPUs of cpumask, and
// how many bytes a count is, from events/NAME.scale and events/NAME.unit
// (a CAS count without them is one 64-byte line).
func readUncoreEvent(dir, name string) (uncoreEvent, error) {
	ev := uncoreEvent{name: name}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		return strings.TrimSpace(string(b)), err
	}
	desc, err := read(filepath.Join("events", name))
	if err != nil {
		return ev, fmt.Errorf("%s: %w", name, errNoEvent)
	}
	typ, err := read("type")
	if err != nil {
		return ev, err
	}
	t, err := strconv.ParseUint(typ, 10, 32)
	if err != nil {
		return ev, fmt.Errorf("type %q: not a number", typ)
	}
	ev.typ = uint32(t)
	ev.config, err = parseEventConfig(desc, func(term string) (string, error) { return read(filepath.Join("format", term)) })
	if err != nil {
		return ev, fmt.Errorf("events/%s = %q: %w", name, desc, err)
	}
	mask, err := read("cpumask")
	if err != nil {
		mask = "0" // PMUs without a cpumask count on any CPU
	}
	if ev.cpus, err = parseCPUList(mask); err != nil {
		return ev, fmt.Errorf("cpumask: %w", err)
	}
	ev.bytesPer = casBytes
	if s, err := read(filepath.Join("events", name+".scale")); err == nil {
		scale, err := strconv.ParseFloat(s, 64)
		if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
			return ev, fmt.Errorf("events/%s.scale = %q: not a positive number", name, s)
		}
		u, _ := read(filepath.Join("events", name+".unit"))
		unit, err := unitBytes(u)
		if err != nil {
			return ev, fmt.Errorf("events/%s.unit: %w", name, err)
		}
		ev.bytesPer = scale * unit
	}
	return ev, nil
}

// unitBytes is the size of a sysfs event unit.
func unitBytes(u string) (float64, error) {
	switch u {
	case "", "B", "Bytes", "bytes":
		return 1, nil
	case "KiB", "KB":
		return 1 << 10, nil
	case "MiB", "MB":
		return 1 << 20, nil
	case "GiB", "GB":
		return 1 << 30, nil
	}
	return 0, fmt.Errorf("unknown unit %q", u)
}

// parseEventConfig turns a sysfs event description such as
// "event=0x04,umask=0x03" into the perf_event_attr config, placing each
// term's value in the bits its format file names ("config:0-7", or
// several ranges such as "config:0-7,32-35", filled lowest first). A term
// without a value is 1. Terms of config1 or config2 are not supported.
func parseEventConfig(desc string, format func(term string) (string, error)) (uint64, error) {
	var config uint64
	if strings.TrimSpace(desc) == "" {
		return 0, errors.New("empty event description")
	}
	for term := range strings.SplitSeq(desc, ",") {
		name, val, hasVal := strings.Cut(strings.TrimSpace(term), "=")
		if name == "" || strings.ContainsAny(name, `/\.`) {
			return 0, fmt.Errorf("term %q: bad name", term)
		}
		v := uint64(1)
		if hasVal {
			var err error
			if v, err = strconv.ParseUint(val, 0, 64); err != nil {
				return 0, fmt.Errorf("term %q: bad value", term)
			}
		}
		f, err := format(name)
		if err != nil {
			return 0, fmt.Errorf("term %q: no format/%s", term, name)
		}
		field, ranges, ok := strings.Cut(f, ":")
		if !ok || field != "config" {
			return 0, fmt.Errorf("format/%s = %q: only config fields are supported", name, f)
		}
		rest := v
		for r := range strings.SplitSeq(ranges, ",") {
			lo, hi, err := parseBitRange(r)
			if err != nil {
				return 0, fmt.Errorf("format/%s = %q: %w", name, f, err)
			}
			width := hi - lo + 1
			var mask uint64 = math.MaxUint64
			if width < 64 {
				mask = 1<<width - 1
			}
			config |= (rest & mask) << lo
			if width >= 64 {
				rest = 0
			} else {
				rest >>= width
			}
		}
		if rest != 0 {
			return 0, fmt.Errorf("term %q: value does not fit format %q", term, f)
		}
	}
	return config, nil
}

// parseBitRange reads "lo-hi" or "bit", 0 <= lo <= hi <= 63.
func parseBitRange(s string) (lo, hi uint, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	l, err1 := strconv.ParseUint(a, 10, 8)
	h := l
	var err2 error
	if isRange {
		h, err2 = strconv.ParseUint(b, 10, 8)
	}
	if err1 != nil || err2 != nil || l > h || h > 63 {
		return 0, 0, fmt.Errorf("bad bit range %q", s)
	}
	return uint(l), uint(h), nil
}

// parseCPUList reads a kernel CPU list such as "0", "0,18" or "0-3,8".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		a, b, isRange := strings.Cut(part, "-")
		lo, err1 := strconv.Atoi(a)
		hi := lo
		var err2 error
		if isRange {
			hi, err2 = strconv.Atoi(b)
		}
		if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi-lo > 1<<16 {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		for c := lo; c <= hi; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
