// Package childtest runs part of a test in a child process, the test
// binary re-executed, and reports how the child ended, how long it took
// and its peak resident memory: what a crash, a hang or a peak of memory
// in the code under test would otherwise hide or take the test binary
// down with it.
//
// A test calls Run with the name of a helper test and a role; the helper
// test calls Role, which returns the role in the child and "" otherwise
// (then the helper skips itself):
//
//	func TestPeakHelper(t *testing.T) {
//		switch childtest.Role(t) {
//		case "open":
//			_, err := Open(os.Getenv("FILE"))
//			fmt.Println(err)
//		}
//	}
//
//	r := childtest.Run(t, "TestPeakHelper", "open", "FILE="+path)
//	if r.MaxRSS > 64<<20 { ... }
package childtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// roleEnv carries the role to the child.
const roleEnv = "CHILDTEST_ROLE"

// Result is how a child ended.
type Result struct {
	Code    int           // exit code; -1 if killed by a signal
	Output  string        // standard output and error together
	Elapsed time.Duration // wall-clock time
	MaxRSS  int64         // peak resident set, bytes
}

// Role returns the role this process was started for by Run, or skips t
// when it is not a child of Run.
func Role(t testing.TB) string {
	t.Helper()
	r := os.Getenv(roleEnv)
	if r == "" {
		t.Skip("a helper run in a child process by another test")
	}
	return r
}

// Run re-executes the test binary to run only the test named test with
// the given role and further environment variables ("KEY=value"), waiting
// at most timeout (then the child is killed and Code is -1).
func Run(t testing.TB, test, role string, timeout time.Duration, env ...string) Result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(timeout, func() { cmd.Process.Kill() })
	err = cmd.Wait()
	timer.Stop()
	r := Result{Output: out.String(), Elapsed: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.MaxRSS = ru.Maxrss << 10 // kilobytes on Linux
	}
	return r
}
