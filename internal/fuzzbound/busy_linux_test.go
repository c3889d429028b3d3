package fuzzbound

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// burners is how many processes take the one core the busy test runs on.
const burners = 5

// busyHelper runs a body that does CPU work for three times its CPU bound
// of wall-clock time, on a core that burners processes take too: it gets
// a sixth of the core, so it uses about half its bound, and returns.
func busyHelper(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	lim := Limits{CPU: 50 * time.Millisecond, Wall: time.Minute}
	bound := lim.CPU * raceFactor()
	var wall, cpu time.Duration
	lim.Run(t, 0, func() {
		c := startProcessClock()
		spin(func() bool {
			wall, cpu = c.since()
			return wall >= 3*bound
		})
	})
	fmt.Printf("busy: cpus=%d bound=%d wall=%d cpu=%d\n", set.Count(), bound, wall, cpu)
}

// TestBusyMachine: a sound input on a machine busy with other processes
// is not stopped where a wall-clock bound of the same size would have
// stopped it. The helper and the processes that burn CPU beside it run on
// one core.
func TestBusyMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a core for a second")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range burners {
		c := exec.Command(exe, "-test.run=^TestHelper$")
		c.Env = append(os.Environ(), helperEnv+"=burn")
		cmds = append(cmds, c)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			if c.Process != nil && c.ProcessState == nil {
				c.Process.Kill()
				c.Wait()
			}
		}
	})
	child := exec.Command(exe, "-test.run=^TestHelper$")
	child.Env = append(os.Environ(), helperEnv+"=busy")
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := startOnOneCore(append(cmds, child)); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("%v, output:\n%s", err, out.String())
	}
	i := strings.Index(out.String(), "busy: ")
	if i < 0 {
		t.Fatalf("output:\n%s", out.String())
	}
	var cpus int
	var bound, wall, cpu time.Duration
	if _, err := fmt.Sscanf(out.String()[i:], "busy: cpus=%d bound=%d wall=%d cpu=%d", &cpus, &bound, &wall, &cpu); err != nil {
		t.Fatalf("%v, output:\n%s", err, out.String())
	}
	t.Logf("on %d core beside %d burners: %v of wall-clock time, %v of CPU time, bound %v", cpus, burners, wall, cpu, bound)
	if cpus != 1 || wall <= bound || cpu >= wall/2 {
		t.Fatalf("the body was not starved of CPU: on %d cores, %v of wall-clock time, %v of CPU time", cpus, wall, cpu)
	}
}

// startOnOneCore starts cmds on the first core this process may run on:
// from a thread pinned to it, whose affinity a child inherits. The thread
// ends with its goroutine, still locked, so no other goroutine runs on it.
func startOnOneCore(cmds []*exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		first := 0
		for !set.IsSet(first) {
			first++
		}
		set.Zero()
		set.Set(first)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}
