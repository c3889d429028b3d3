package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"rnnserve/dre/sweep"
)

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// envOf is an environment holding m.
func envOf(m map[string]string) lookupEnv {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestResolveShard checks where the shard comes from: the flag over the
// environment, a Kubernetes Indexed Job's index with the count from the
// flag or DRESIM_SHARD_COUNT, a Slurm array task; and that every bad or
// out-of-range value is refused by name.
func TestResolveShard(t *testing.T) {
	k8s := func(i string) map[string]string { return map[string]string{envK8sIndex: i, envShardCount: "4"} }
	slurm := func(id, lo, step, count, hi string) map[string]string {
		m := map[string]string{envSlurmID: id, envSlurmMin: lo, envSlurmCount: count}
		if step != "" {
			m[envSlurmStep] = step
		}
		if hi != "" {
			m[envSlurmMax] = hi
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		flag  string
		count int
		env   map[string]string
		want  sweep.Shard
		from  string
		err   string // a substring of the usage error; "" for none
	}{
		{name: "nothing", want: sweep.Shard{}},
		{name: "flag", flag: "1/3", want: sweep.Shard{K: 1, N: 3}},
		{name: "flag over Kubernetes", flag: "1/3", env: k8s("2"), want: sweep.Shard{K: 1, N: 3}},
		{name: "flag over Slurm", flag: "0/2", env: slurm("x", "", "", "", ""), want: sweep.Shard{K: 0, N: 2}},
		{name: "Kubernetes", env: k8s("3"), want: sweep.Shard{K: 3, N: 4}, from: envK8sIndex},
		{name: "Kubernetes count flag over env", count: 5, env: k8s("4"), want: sweep.Shard{K: 4, N: 5}, from: envK8sIndex},
		{name: "Kubernetes count flag only", count: 2, env: map[string]string{envK8sIndex: "1"}, want: sweep.Shard{K: 1, N: 2}, from: envK8sIndex},
		{name: "Slurm 0-3", env: slurm("2", "0", "", "4", "3"), want: sweep.Shard{K: 2, N: 4}, from: envSlurmID},
		{name: "Slurm 1-7:2", env: slurm("5", "1", "2", "4", "7"), want: sweep.Shard{K: 2, N: 4}, from: envSlurmID},
		{name: "Slurm without MIN and MAX", env: map[string]string{envSlurmID: "1", envSlurmCount: "2"}, want: sweep.Shard{K: 1, N: 2}, from: envSlurmID},
		{name: "Slurm count from DRESIM_SHARD_COUNT", env: map[string]string{envSlurmID: "6", envSlurmMin: "0", envSlurmCount: "1", envShardCount: "8"}, want: sweep.Shard{K: 6, N: 8}, from: envSlurmID},

		{name: "flag and count", flag: "1/3", count: 3, err: "not both"},
		{name: "bad flag", flag: "3/3", env: k8s("0"), err: "k = 3 is out of range"},
		{name: "negative count flag", count: -2, err: "--shard-count -2"},
		{name: "Kubernetes out of range", env: k8s("4"), err: "JOB_COMPLETION_INDEX=4 is out of range for 4 shards (DRESIM_SHARD_COUNT): want 0..3"},
		{name: "Kubernetes out of range of the flag", count: 2, env: k8s("2"), err: "JOB_COMPLETION_INDEX=2 is out of range for 2 shards (--shard-count)"},
		{name: "Kubernetes not a number", env: k8s("two"), err: `JOB_COMPLETION_INDEX="two": want an integer`},
		{name: "Kubernetes negative", env: k8s("-1"), err: `JOB_COMPLETION_INDEX="-1"`},
		{name: "Kubernetes without count", env: map[string]string{envK8sIndex: "1"}, err: "JOB_COMPLETION_INDEX=1 is set but not the number of shards"},
		{name: "count zero", env: map[string]string{envK8sIndex: "0", envShardCount: "0"}, err: `DRESIM_SHARD_COUNT="0": want an integer of at least 1`},
		{name: "count not a number", env: map[string]string{envK8sIndex: "0", envShardCount: "4x"}, err: `DRESIM_SHARD_COUNT="4x"`},
		{name: "count without index", env: map[string]string{envShardCount: "4"}, err: "DRESIM_SHARD_COUNT 4 gives the number of shards but no shard index"},
		{name: "count flag without index", count: 4, err: "--shard-count 4 gives the number of shards but no shard index"},
		{name: "both batch systems", env: map[string]string{envK8sIndex: "0", envShardCount: "2", envSlurmID: "0", envSlurmCount: "2"}, err: "both JOB_COMPLETION_INDEX and SLURM_ARRAY_TASK_ID"},
		{name: "Slurm bad id", env: slurm("x", "0", "", "4", ""), err: `SLURM_ARRAY_TASK_ID="x"`},
		{name: "Slurm bad min", env: slurm("1", "-3", "", "4", ""), err: `SLURM_ARRAY_TASK_MIN="-3"`},
		{name: "Slurm bad step", env: slurm("1", "0", "0", "4", ""), err: `SLURM_ARRAY_TASK_STEP="0"`},
		{name: "Slurm bad count", env: slurm("1", "0", "", "many", ""), err: `SLURM_ARRAY_TASK_COUNT="many"`},
		{name: "Slurm bad max", env: slurm("1", "0", "", "4", "z"), err: `SLURM_ARRAY_TASK_MAX="z"`},
		{name: "Slurm without count", env: map[string]string{envSlurmID: "1"}, err: "SLURM_ARRAY_TASK_ID=1 is set but not the number of shards"},
		{name: "Slurm list, not a range", env: slurm("9", "0", "", "3", "16"), err: "not one evenly spaced range"},
		{name: "Slurm id below min", env: slurm("0", "1", "", "4", ""), err: "SLURM_ARRAY_TASK_ID=0 is not SLURM_ARRAY_TASK_MIN=1 plus a multiple"},
		{name: "Slurm id off the step", env: slurm("4", "1", "2", "4", "7"), err: "SLURM_ARRAY_TASK_ID=4 is not SLURM_ARRAY_TASK_MIN=1 plus a multiple of SLURM_ARRAY_TASK_STEP=2"},
		{name: "Slurm out of range", env: slurm("4", "0", "", "4", ""), err: "SLURM_ARRAY_TASK_ID=4 is shard 4 (from SLURM_ARRAY_TASK_MIN=0, SLURM_ARRAY_TASK_STEP=1), out of range for 4 shards (SLURM_ARRAY_TASK_COUNT): want 0..3"},
		{name: "Slurm out of range of the flag", count: 2, env: slurm("3", "0", "", "4", "3"), err: "out of range for 2 shards (--shard-count)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, from, err := resolveShard(tc.flag, tc.count, envOf(tc.env))
			if tc.err != "" {
				if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || sh != tc.want || from != tc.from {
				t.Fatalf("shard %v from %q, err %v; want %v from %q", sh, from, err, tc.want, tc.from)
			}
		})
	}
	for _, name := range shardEnvVars {
		if !strings.Contains(shardUsage, name) {
			t.Errorf("dresim -h does not document %s", name)
		}
	}
}

// buildDresim builds this command into a temporary directory.
func buildDresim(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build dresim: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "dresim")
	if out, err := exec.Command(goTool, "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// environ is this process's environment without the shard variables
// (the tests may run inside a batch job), plus set ("NAME=value").
func environ(set ...string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(shardEnvVars, name)
	})
	return append(env, set...)
}

// TestShardsFromEnvironment runs the dresim binary as the processes of an
// indexed batch job would: three at once, each given only its index (and
// the count) in the environment, as a Kubernetes Indexed Job and as a
// Slurm array 1-5:2, and, for comparison, by --shard k/3; merges their
// directories with dresim merge (in another order), and compares the rows
// with an unsharded run. A bad environment is refused
// before anything is written, naming the variable.
func TestShardsFromEnvironment(t *testing.T) {
	exe := buildDresim(t)
	dir := t.TempDir()
	dresim := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(exe, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	whole := filepath.Join(dir, "whole")
	if out, err := dresim(environ(), "run", tinySweep, "-o", whole, "-j", "1", "-figures=false"); err != nil {
		t.Fatalf("unsharded run: %v\n%s", err, out)
	}
	want := readRows(t, whole)

	for _, job := range []struct {
		name string
		env  func(k int) []string
		flag func(k int) []string
		from string // in the summary line
	}{
		{"flag", func(int) []string { return environ() }, func(k int) []string { return []string{"--shard", fmt.Sprintf("%d/3", k)} }, ")"},
		{"kubernetes", func(k int) []string {
			return environ(fmt.Sprintf("%s=%d", envK8sIndex, k), envShardCount+"=3")
		}, nil, " from " + envK8sIndex + ")"},
		{"slurm", func(k int) []string {
			return environ(fmt.Sprintf("%s=%d", envSlurmID, 1+2*k), envSlurmMin+"=1", envSlurmStep+"=2", envSlurmMax+"=5", envSlurmCount+"=3")
		}, nil, " from " + envSlurmID + ")"},
	} {
		t.Run(job.name, func(t *testing.T) {
			var wg sync.WaitGroup
			outs, errs := make([]string, 3), make([]error, 3)
			var dirs []string
			for k := range 3 {
				d := filepath.Join(dir, job.name, fmt.Sprint(k))
				dirs = append(dirs, d)
				args := []string{"run", tinySweep, "-o", d, "-j", "1", "-figures=false"}
				if job.flag != nil {
					args = append(args, job.flag(k)...)
				}
				wg.Go(func() { outs[k], errs[k] = dresim(job.env(k), args...) })
			}
			wg.Wait()
			for k := range 3 {
				if errs[k] != nil {
					t.Fatalf("shard %d: %v\n%s", k, errs[k], outs[k])
				}
				if !strings.Contains(outs[k], fmt.Sprintf("(shard %d/3%s", k, job.from)) {
					t.Errorf("shard %d says %q", k, outs[k])
				}
				m, err := sweep.ReadManifest(dirs[k])
				if err != nil || m.Shard == nil || *m.Shard != (sweep.Shard{K: k, N: 3}) {
					t.Errorf("shard %d's manifest: %v, %+v", k, err, m)
				}
			}
			merged := filepath.Join(dir, job.name, "merged")
			if out, err := dresim(environ(), "merge", "-o", merged, "-figures=false", dirs[2], dirs[0], dirs[1]); err != nil {
				t.Fatalf("merge: %v\n%s", err, out)
			}
			if got := readRows(t, merged); !sameRows(got, want) {
				t.Errorf("%d merged rows differ from the %d of the unsharded run", len(got), len(want))
			}
		})
	}

	out := filepath.Join(dir, "bad")
	msg, err := dresim(environ(envK8sIndex+"=3", envShardCount+"=3"), "run", tinySweep, "-o", out)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(msg, "JOB_COMPLETION_INDEX=3 is out of range for 3 shards") {
		t.Errorf("index out of range: %v, %q", err, msg)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused run wrote its output directory")
	}
}

// TestHostCachesEnv: dresim refuses an RNNSERVE_HOST_CACHES it could not
// take (exit 2, the variable named), before doing anything else, and runs
// with one it can.
func TestHostCachesEnv(t *testing.T) {
	var out, errOut strings.Builder
	code := run([]string{"apps"}, envOf(map[string]string{"RNNSERVE_HOST_CACHES": "l3=7"}), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), `dresim: environment variable RNNSERVE_HOST_CACHES: l3="7"`) || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"apps"}, envOf(map[string]string{"RNNSERVE_HOST_CACHES": "l3=1024G"}), &out, &errOut); code != 0 || out.Len() == 0 {
		t.Errorf("a good value: exit %d, stderr %q", code, errOut.String())
	}
}
