package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"gopkg.in/yaml.v3"

	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// childCommand is the hidden subcommand dresim runs itself as under
// valgrind: it builds one model with random weights and runs its plan a
// given number of times, nothing else.
const childCommand = "measure-child"

// target is one model, input and schedule to run for real.
type target struct {
	Spec     models.Spec
	T, B     int
	Schedule schedule.Schedule
	Seed     uint64 // weights and token ids
}

// childArgs are the arguments that make dresim run t runs times.
func (t *target) childArgs(runs int) ([]string, error) {
	spec, err := yaml.Marshal(&t.Spec)
	if err != nil {
		return nil, err
	}
	return []string{childCommand, "-spec", string(spec), "-t", fmt.Sprint(t.T), "-b", fmt.Sprint(t.B),
		"-schedule", t.Schedule.String(), "-seed", fmt.Sprint(t.Seed), "-runs", fmt.Sprint(runs)}, nil
}

// realPlan builds t's network with weights drawn from t.Seed (PyTorch's
// default initialisation, models.Randomize) and its plan for T steps of
// batch B, reading the token ids dre.DryPlan draws from the same seed, so
// that the plan run is the plan the model walks.
func (t *target) realPlan() (*schedule.Plan, error) {
	shape, err := models.Shape(&t.Spec)
	if err != nil {
		return nil, err
	}
	net, err := rnn.NewNetwork(shape.Config(), false)
	if err != nil {
		return nil, err
	}
	models.Randomize(net, t.Seed)
	_, p, err := dre.DryPlan(net, t.Schedule, t.T, t.B, t.Seed)
	return p, err
}

// cmdMeasureChild is `dresim measure-child`: build the plan, run it -runs
// times, print a checksum of the output (which keeps the work from being
// optimised away and lets the parent see it ran). The garbage collector
// is off: the plan allocates nothing while it runs, and a collection
// would add traffic that differs between the parent's two runs.
func cmdMeasureChild(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(childCommand, "[flags]", "Internal: what dresim measure --counters cachegrind runs under valgrind.", stderr)
	specText := fs.String("spec", "", "model spec (YAML)")
	var t target
	fs.IntVar(&t.T, "t", 1, "input length")
	fs.IntVar(&t.B, "b", 1, "batch")
	sched := fs.String("schedule", "A", "A or A+")
	fs.Uint64Var(&t.Seed, "seed", 1, "seed of the weights and token ids")
	runs := fs.Int("runs", 1, "inferences")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *specText == "" || *runs < 1 {
		return usageErr("%s needs -spec and -runs >= 1, and no arguments", childCommand)
	}
	spec, err := models.ParseSpec([]byte(*specText))
	if err != nil {
		return err
	}
	t.Spec = *spec
	if t.Schedule, err = schedule.Parse(*sched); err != nil {
		return usageErr("%v", err)
	}
	debug.SetGCPercent(-1)
	p, err := t.realPlan()
	if err != nil {
		return err
	}
	var out schedule.Result
	for range *runs {
		if out, err = p.Run(); err != nil {
			return err
		}
	}
	if len(out.Output) == 0 {
		return errors.New("the plan produced no output")
	}
	var sum float64
	for _, v := range out.Output {
		sum += float64(v)
	}
	fmt.Fprintf(stdout, "runs %d checksum %g\n", *runs, sum)
	return nil
}
