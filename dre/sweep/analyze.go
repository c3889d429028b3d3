package sweep

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// built is a unit's plan, ready to be analysed through each cache.
type built struct {
	prog *schedule.Program
	plan *schedule.Plan
	net  *rnn.Network
	dec  *rnn.Decoder // GNMT: the decoder; its steps are part of plan
	// workingSet is the plan's working set: the program's, or for an
	// encoder-decoder plan the encoder's and the decoder's together.
	workingSet dre.WorkingSet
	note       string
}

// build makes the dry plan of u: the network of its spec under its
// schedule, T steps of batch B, with the head; for an app with a decoder,
// the encoder's plan followed by the decoder's.
func build(u *unit, B int, seed uint64) (*built, error) {
	net, err := models.Shape(&u.Spec)
	if err != nil {
		return nil, err
	}
	prog, plan, err := dre.DryVariantPlan(net, u.Schedule, u.T, B, seed)
	if err != nil {
		return nil, err
	}
	b := &built{prog: prog, plan: plan, net: net, workingSet: dre.WorkingSetOfProgram(prog, u.T, B)}
	var notes []string
	if u.Note != "" {
		notes = append(notes, u.Note)
	}
	if !net.Uniform() {
		// The row's cell and sizes are the top layer's; say what is below.
		notes = append(notes, "layers "+stackString(net))
	}
	b.note = strings.Join(notes, "; ")
	if u.App == nil || u.App.Decoder == nil {
		return b, nil
	}
	_, dec, err := u.App.Shape()
	if err != nil {
		return nil, err
	}
	dp, err := schedule.NewDecoderProgram(dec)
	if err != nil {
		return nil, err
	}
	// The decoder emits as many tokens as the input has; a dry plan needs
	// the tokens it is taken to choose, drawn like the input's.
	S := u.T
	rng := rand.New(rand.NewPCG(seed, 0xdec0de))
	tokens := make([]int64, S*B)
	for i := range tokens {
		tokens[i] = rng.Int64N(int64(dec.Vocab))
	}
	dplan, err := dp.Plan(plan, schedule.DecodeInput{Steps: S, Start: 1, Tokens: tokens})
	if err != nil {
		return nil, err
	}
	b.plan, b.dec = dplan.Plan, dec
	b.workingSet = b.workingSet.Plus(decoderWorkingSet(dec, S, u.T, B))
	a := "A"
	if u.Schedule.Schedule == schedule.APlus {
		a = "A+ on the encoder only"
	}
	notes = append(notes, fmt.Sprintf("%s; decoder (%d %v layers, attention) runs A's G per step for %d output tokens", a, dec.Stack.NumLayers, dec.Stack.Cell, S))
	b.note = strings.Join(notes, "; ")
	return b, nil
}

// stackString describes the layers of net bottom first, e.g.
// "lstm 2048, lstm 8192" or "gru 256 bidirectional, lstm 1024 proj 256".
func stackString(net *rnn.Network) string {
	var parts []string
	for _, l := range net.Stack() {
		s := fmt.Sprintf("%v %d", l.Cell, l.Hidden)
		if l.Proj > 0 {
			s += fmt.Sprintf(" proj %d", l.Proj)
		}
		if l.Bidirectional {
			s += " bidirectional"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// decoderWorkingSet extends the paper's working set (weights + word
// embeddings + intermediate values, dre.WorkingSetOf) to an attention
// decoder emitting S tokens over T encoder outputs, batch B: the stack's
// and head's weights and intermediates as dre counts them for S steps
// (the input sequence [embedding; h̃], every layer's outputs, the final
// states, S steps of head output), plus the target embedding, the
// attention's weights, and its weights over the T inputs and contexts at
// every step.
func decoderWorkingSet(dec *rnn.Decoder, S, T, B int) dre.WorkingSet {
	return dre.WorkingSetOf(dec.Stack, S, B).Plus(dre.NewWorkingSet(dec.Attn.WeightBytes(),
		4*int64(dec.Vocab)*int64(dec.Embed), 4*int64(S)*int64(B)*int64(T+dec.Attn.Memory)))
}

// analyzePlan is the one place this package asks dre for a plan's
// traffic; every row, modelled or measured, comes through it.
func analyzePlan(plan *schedule.Plan, ws dre.WorkingSet, opt dre.Options) (*dre.Report, error) {
	return dre.Analyze(plan, ws, opt)
}

// analyze replays b's plan through every cache of the sweep and returns
// one row per cache.
func analyze(u *unit, b *built, sw *Sweep) ([]Row, error) {
	rows := make([]Row, 0, len(sw.Caches))
	net := b.net
	head := net.HeadOut
	vocab := net.Vocab
	if b.dec != nil {
		head = b.dec.Vocab
	}
	for c, cs := range sw.Caches {
		opt := dre.Options{Cache: cs.config(), Runs: sw.Runs, OPT: sw.OPT, OPTMaxAccesses: sw.OPTMaxAccesses}
		start := time.Now()
		r, err := analyzePlan(b.plan, b.workingSet, opt)
		if err != nil {
			return nil, fmt.Errorf("%s T=%d %v cache %s: %w", u.Model, u.T, u.Schedule, cs.Name, err)
		}
		row := Row{
			Index: u.Index*len(sw.Caches) + c, Kind: u.Kind, Model: u.Model,
			Cell: net.Cell.String(), Hidden: net.Hidden, Proj: net.Proj, Layers: net.NumLayers, Bidirectional: net.Bidirectional,
			Vocab: vocab, HeadOut: head, T: u.T, B: sw.Batch, Schedule: u.Schedule.String(),
			Cache: cs.Name, CacheBytes: int64(cs.Size), LineSize: r.Cache.LineSize, Ways: r.Cache.Ways, Runs: r.Runs,
			AvgReadBytes: r.AvgReadBytes, AvgWriteBytes: r.AvgWriteBytes, AvgRW: r.AvgRW,
			WorkingSetBytes: r.WorkingSet.Total, DRE: r.DRE, FootprintBytes: r.FootprintBytes,
			OPTSkipped: r.OPTSkipped, Note: b.note,
		}
		if r.OPT != nil {
			v := r.OPT.ReadBytes
			row.OPTReadBytes = &v
		}
		row.SimSeconds = time.Since(start).Seconds()
		rows = append(rows, row)
	}
	return rows, nil
}
