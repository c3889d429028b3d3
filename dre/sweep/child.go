package sweep

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"go.yaml.in/yaml/v3"

	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// ChildCommand is the hidden subcommand dresim runs itself as under
// valgrind (RunChild): it builds one model with random weights and runs
// its plan a given number of times, nothing else.
const ChildCommand = "measure-child"

// Target is one model, input and schedule to run for real.
type Target struct {
	Spec     models.Spec
	T, B     int
	Schedule schedule.Variant
	Seed     uint64 // weights and token ids
}

// ChildArgs are the arguments (after the executable) that make dresim
// run t runs times: ChildCommand, then what RunChild reads.
func (t *Target) ChildArgs(runs int) ([]string, error) {
	spec, err := yaml.Marshal(&t.Spec)
	if err != nil {
		return nil, err
	}
	return []string{ChildCommand, "-spec", string(spec), "-t", fmt.Sprint(t.T), "-b", fmt.Sprint(t.B),
		"-schedule", t.Schedule.String(), "-seed", fmt.Sprint(t.Seed), "-runs", fmt.Sprint(runs)}, nil
}

// realPlan builds t's network with weights drawn from t.Seed (PyTorch's
// default initialisation, models.Randomize) and its plan for T steps of
// batch B, reading the token ids dre.DryPlan draws from the same seed, so
// that the plan run is the plan the model walks.
func (t *Target) realPlan() (*schedule.Plan, error) {
	shape, err := models.Shape(&t.Spec)
	if err != nil {
		return nil, err
	}
	net, err := rnn.NewNetwork(shape.Config(), false)
	if err != nil {
		return nil, err
	}
	models.Randomize(net, t.Seed)
	_, p, err := dre.DryVariantPlan(net, t.Schedule, t.T, t.B, t.Seed)
	return p, err
}

// RunChild is `dresim measure-child ARGS`, args being what ChildArgs
// returns after ChildCommand: it builds the plan, runs it -runs times and
// prints a checksum of the output (which keeps the work from being
// optimised away and lets the parent see it ran). It turns the garbage
// collector off for the rest of the process: the plan allocates nothing
// while it runs, and a collection would add traffic that differs between
// the parent's two runs. Bad arguments are an *OptionError.
func RunChild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(ChildCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	specText := fs.String("spec", "", "model spec (YAML)")
	var t Target
	fs.IntVar(&t.T, "t", 1, "input length")
	fs.IntVar(&t.B, "b", 1, "batch")
	sched := fs.String("schedule", "A", "A, A+, P, P-bf16 or P-int8")
	fs.Uint64Var(&t.Seed, "seed", 1, "seed of the weights and token ids")
	runs := fs.Int("runs", 1, "inferences")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: dresim %s [flags]: what dresim measure --counters cachegrind runs under valgrind.\n", ChildCommand)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return optionErr("%v", err)
	}
	if fs.NArg() != 0 || *specText == "" || *runs < 1 {
		return optionErr("%s needs -spec and -runs >= 1, and no arguments", ChildCommand)
	}
	spec, err := models.ParseSpec([]byte(*specText))
	if err != nil {
		return err
	}
	t.Spec = *spec
	if t.Schedule, err = schedule.ParseVariant(*sched); err != nil {
		return optionErr("%v", err)
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
