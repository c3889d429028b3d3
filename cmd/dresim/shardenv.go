package main

import (
	"strconv"

	"rnnserve/dre/sweep"
)

// lookupEnv reads an environment variable: os.LookupEnv in main, a map in
// tests. Only this command reads the environment, and only through it.
type lookupEnv func(name string) (string, bool)

// Environment variables `dresim run` takes its shard from when --shard is
// not given. A Kubernetes Indexed Job sets JOB_COMPLETION_INDEX (0 ..
// completions-1) but not the count, which the Job passes as
// envShardCount (or --shard-count). A Slurm job array sets the task id,
// the count, the lowest id and the step: shard k is task min + k*step.
const (
	envShardCount = "DRESIM_SHARD_COUNT"
	envK8sIndex   = "JOB_COMPLETION_INDEX"
	envSlurmID    = "SLURM_ARRAY_TASK_ID"
	envSlurmCount = "SLURM_ARRAY_TASK_COUNT"
	envSlurmMin   = "SLURM_ARRAY_TASK_MIN"
	envSlurmMax   = "SLURM_ARRAY_TASK_MAX"
	envSlurmStep  = "SLURM_ARRAY_TASK_STEP"
)

// shardEnvVars are the variables resolveShard reads, for the usage and for
// tests that must not inherit them.
var shardEnvVars = []string{envShardCount, envK8sIndex, envSlurmID, envSlurmCount, envSlurmMin, envSlurmMax, envSlurmStep}

// resolveShard decides which shard `dresim run` runs. Flags override the
// environment: --shard k/N is used as given; otherwise the index comes
// from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, and the count from
// --shard-count (count > 0), else DRESIM_SHARD_COUNT, else (Slurm)
// SLURM_ARRAY_TASK_COUNT. Without any of them the whole sweep runs. from
// names where the shard came from ("" for the flag or the whole sweep).
// A bad or out-of-range value is a usage error that names its variable.
func resolveShard(flag string, count int, env lookupEnv) (sh sweep.Shard, from string, err error) {
	if flag != "" {
		if count != 0 {
			return sh, "", usageErr("give --shard k/N or --shard-count N, not both")
		}
		sh, err = sweep.ParseShard(flag)
		if err != nil {
			return sh, "", usageErr("%v", err)
		}
		return sh, "", nil
	}
	if count < 0 {
		return sh, "", usageErr("--shard-count %d: want at least 1", count)
	}
	countFrom := "--shard-count"
	if count == 0 {
		if count, err = envInt(env, envShardCount, 1); err != nil {
			return sh, "", err
		}
		countFrom = envShardCount
	}
	_, k8s := env(envK8sIndex)
	_, slurm := env(envSlurmID)
	switch {
	case k8s && slurm:
		return sh, "", usageErr("both %s and %s are set: run under one batch system, or give --shard k/N", envK8sIndex, envSlurmID)
	case k8s:
		k, err := envInt(env, envK8sIndex, 0)
		if err != nil {
			return sh, "", err
		}
		if count == 0 {
			return sh, "", usageErr("%s=%d is set but not the number of shards: give --shard-count N or %s (the Job's completions)", envK8sIndex, k, envShardCount)
		}
		if k >= count {
			return sh, "", usageErr("%s=%d is out of range for %d shards (%s): want 0..%d", envK8sIndex, k, count, countFrom, count-1)
		}
		return sweep.Shard{K: k, N: count}, envK8sIndex, nil
	case slurm:
		sh, err := slurmShard(env, count, countFrom)
		return sh, envSlurmID, err
	case count > 0:
		return sh, "", usageErr("%s %d gives the number of shards but no shard index is set (%s or %s): give --shard k/N", countFrom, count, envK8sIndex, envSlurmID)
	}
	return sweep.Shard{}, "", nil
}

// slurmShard is the shard of a Slurm array task: (id - min) / step, of
// count shards (SLURM_ARRAY_TASK_COUNT unless count > 0). The array must
// be one evenly spaced range, such as --array=0-7 or --array=1-15:2.
func slurmShard(env lookupEnv, count int, countFrom string) (sweep.Shard, error) {
	var sh sweep.Shard
	id, err := envInt(env, envSlurmID, 0)
	if err != nil {
		return sh, err
	}
	lo, err := envIntOr(env, envSlurmMin, 0, 0)
	if err != nil {
		return sh, err
	}
	step, err := envIntOr(env, envSlurmStep, 1, 1)
	if err != nil {
		return sh, err
	}
	if count == 0 {
		if count, err = envInt(env, envSlurmCount, 1); err != nil {
			return sh, err
		}
		if count == 0 {
			return sh, usageErr("%s=%d is set but not the number of shards: give --shard-count N, %s or %s", envSlurmID, id, envShardCount, envSlurmCount)
		}
		countFrom = envSlurmCount
		if hi, err := envIntOr(env, envSlurmMax, -1, 0); err != nil {
			return sh, err
		} else if hi >= 0 && hi != lo+(count-1)*step {
			return sh, usageErr("%s=%d, %s=%d, %s=%d and %s=%d are not one evenly spaced range: submit the array as --array=0-%d",
				envSlurmMin, lo, envSlurmMax, hi, envSlurmStep, step, envSlurmCount, count, count-1)
		}
	}
	if id < lo || (id-lo)%step != 0 {
		return sh, usageErr("%s=%d is not %s=%d plus a multiple of %s=%d", envSlurmID, id, envSlurmMin, lo, envSlurmStep, step)
	}
	k := (id - lo) / step
	if k >= count {
		return sh, usageErr("%s=%d is shard %d (from %s=%d, %s=%d), out of range for %d shards (%s): want 0..%d",
			envSlurmID, id, k, envSlurmMin, lo, envSlurmStep, step, count, countFrom, count-1)
	}
	return sweep.Shard{K: k, N: count}, nil
}

// envInt reads a decimal integer of at least lo from the environment; 0
// (and no error) if the variable is unset or empty.
func envInt(env lookupEnv, name string, lo int) (int, error) {
	return envIntOr(env, name, 0, lo)
}

// envIntOr is envInt with def for an unset or empty variable.
func envIntOr(env lookupEnv, name string, def, lo int) (int, error) {
	v, ok := env(name)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		return 0, usageErr("%s=%q: want an integer of at least %d", name, v, lo)
	}
	return n, nil
}

// shardUsage documents the variables in `dresim -h`.
const shardUsage = `
Shards from an indexed batch job (when --shard is not given; flags override
the environment):

  JOB_COMPLETION_INDEX    shard index in a Kubernetes Indexed Job (0..completions-1);
                          the count comes from --shard-count or DRESIM_SHARD_COUNT
  DRESIM_SHARD_COUNT      number of shards (the Job's completions)
  SLURM_ARRAY_TASK_ID     shard (id - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP of
                          SLURM_ARRAY_TASK_COUNT in a Slurm array submitted as one
                          evenly spaced range (SLURM_ARRAY_TASK_MAX is checked)
`
