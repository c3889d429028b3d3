package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
)

// Model control, as Triton's --model-control-mode has it. Who may change
// which models are served, and what the server owes the operator when
// they change:
//
//   - none (the default): the models loaded at start are the models
//     served; load and unload answer 403 naming the setting.
//   - explicit: load and unload calls change the models served; at start
//     the owner loads what it was told to (cmd/serve's -load-model).
//   - poll: the owner calls Poll every repository_poll_interval; a new
//     model folder loads, a changed one reloads, a removed one unloads.
//     Load and unload calls answer 403, as in Triton.
//
// The model repository API (index, load, unload) can be put behind a
// bearer token and moved to a listener of its own (Management). Every
// load, reload, unload, failure and refusal is a log line with msg
// "model event" and counted in rnnserve_model_events_total (refusals in
// rnnserve_model_control_refused_total, without the model's name, which
// the caller was not allowed to learn anything about); the repository
// index shows each model's state and reason.
//
// Readiness (strict, the default, as Triton's --strict-readiness): the
// server is ready when it has started, is not shutting down, and serves
// every model it should: those loaded or named at start, plus those an
// explicit load added, less those an explicit unload (or, in poll mode,
// a removed folder) took away on purpose. A reload that fails leaves the
// version before it serving, so readiness holds; a model that failed at
// start, or whose folder a poll found broken after it was removed and put
// back, keeps the server unready until it loads.

// ModelControl is how models may be loaded and unloaded once the server
// runs.
type ModelControl string

// The model control modes.
const (
	ControlNone     ModelControl = "none"
	ControlExplicit ModelControl = "explicit"
	ControlPoll     ModelControl = "poll"
)

// UnmarshalText accepts none, explicit or poll.
func (m *ModelControl) UnmarshalText(b []byte) error {
	switch v := ModelControl(b); v {
	case ControlNone, ControlExplicit, ControlPoll:
		*m = v
		return nil
	}
	return fmt.Errorf("model control mode %q: want none, explicit or poll", infer.Clip(string(b)))
}

// Management guards the model repository API: index, load and unload.
type Management struct {
	// Token, when set, is the bearer token each call must carry: REST's
	// Authorization: Bearer TOKEN header, gRPC's authorization metadata
	// with the same value. Without it (or with another) the call answers
	// 401 (gRPC UNAUTHENTICATED) before the model's name is looked at.
	Token string
	// Separate serves the API on ManagementHandler only: Handler answers
	// it with 403 naming the setting, and so does gRPC.
	Separate bool
}

// Errors of model control.
var (
	// ErrModelUnavailable is wrapped by the answer to a request for a
	// model the server should serve but cannot: it failed to load. It
	// matches ErrUnknownModel (404).
	ErrModelUnavailable error = &childError{"model unavailable", ErrUnknownModel}
)

// childError is a sentinel error that matches a more general one.
type childError struct {
	msg    string
	parent error
}

func (e *childError) Error() string { return e.msg }
func (e *childError) Unwrap() error { return e.parent }

// managementAPI names what a refusal is about.
const managementAPI = "the model repository API (index, load, unload)"

// controlCall is one call of the model repository API as a front end
// received it.
type controlCall struct {
	op        string // index, load or unload
	protocol  string
	viaSecond bool   // on the management listener
	bearer    string // the credential presented (Authorization's value), or ""
	remote    string
}

// authorize checks a repository API call against the settings, in an
// order that tells a caller nothing it may not know: the listener, the
// token, then the mode. A refusal is logged and counted.
func (s *Server) authorize(c controlCall) error {
	var err error
	reason := ""
	switch {
	case s.mgmt.Separate && !c.viaSecond && c.protocol == protocolGRPC:
		reason = "listener"
		err = fmt.Errorf("%w: %s is served only on the management listener (management.listen, -management-listen), over REST", ErrForbidden, managementAPI)
	case s.mgmt.Separate && !c.viaSecond:
		reason = "listener"
		err = fmt.Errorf("%w: %s is served only on the management listener (management.listen, -management-listen)", ErrForbidden, managementAPI)
	case s.mgmt.Token != "" && c.bearer == "":
		reason = "no_token"
		err = fmt.Errorf("%w: %s needs a bearer token (Authorization: Bearer TOKEN; management.token_file)", ErrUnauthenticated, managementAPI)
	case s.mgmt.Token != "" && !tokenMatches(c.bearer, s.mgmt.Token):
		reason = "bad_token"
		err = fmt.Errorf("%w: the bearer token is not the one %s takes", ErrUnauthenticated, managementAPI)
	case c.op == "index":
	case s.opts.ModelControlMode == ControlNone:
		reason = "mode"
		err = fmt.Errorf("%w: model %s is off: model_control_mode is none (the default; -model-control-mode, RNNSERVE_MODEL_CONTROL_MODE); start serve with -model-control-mode explicit to load and unload models by request", ErrForbidden, c.op)
	case s.opts.ModelControlMode == ControlPoll:
		reason = "mode"
		err = fmt.Errorf("%w: model %s by request is off while the repository is polled (model_control_mode poll): models load, reload and unload as their folders change; -model-control-mode explicit takes requests instead", ErrForbidden, c.op)
	}
	if err != nil {
		s.ctl.refused.WithLabelValues(reason).Inc()
		s.log.Warn("model event", "event", "refused", "op", c.op, "reason", reason, "protocol", c.protocol, "remote", c.remote)
	}
	return err
}

// tokenMatches compares a presented Authorization value with the token
// in constant time.
func tokenMatches(bearer, token string) bool {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(bearer), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), []byte(token)) == 1
}

// controlMetrics count model events.
type controlMetrics struct {
	events  *prometheus.CounterVec // model, event
	ready   *prometheus.GaugeVec   // model
	refused *prometheus.CounterVec // reason
}

func newControlMetrics(reg *prometheus.Registry) controlMetrics {
	c := controlMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_model_events_total",
			Help: "Model lifecycle events: load, reload, unload, load_failed (a load or reload that failed; a failed reload leaves the version before it serving). model is empty for a name the repository does not have.",
		}, []string{"model", "event"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_ready",
			Help: "For each model the server should serve: 1 while it serves it, 0 while it cannot (UNAVAILABLE in the repository index, with the reason); with strict readiness any 0 makes the server unready.",
		}, []string{"model"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_model_control_refused_total",
			Help: "Model repository API calls refused: reason mode (model_control_mode forbids it), listener (served on the management listener only), no_token or bad_token.",
		}, []string{"reason"}),
	}
	reg.MustRegister(c.events, c.ready, c.refused)
	return c
}

// event logs and counts a model event. label is the model label of the
// metric ("" for a name the repository does not have, so that requests
// cannot mint series).
func (s *Server) event(event, name, label string, took time.Duration, err error) {
	s.ctl.events.WithLabelValues(label, event).Inc()
	attrs := []any{"event", event, "model", infer.Clip(name)}
	if took > 0 {
		attrs = append(attrs, "took", took)
	}
	if err != nil {
		s.log.Warn("model event", append(attrs, "reason", errorText(err))...)
		return
	}
	s.log.Info("model event", attrs...)
}

// modelLabel is name as the metrics' model label: itself when the server
// serves it or the repository has it, else "".
func (s *Server) modelLabel(name string) string {
	if _, ok := s.table()[name]; ok {
		return name
	}
	if s.repo != nil && s.repo.Has(name) {
		return name
	}
	return ""
}

// setWantedLocked records whether model name should be served, and its
// rnnserve_model_ready; s.mu is held.
func (s *Server) setWantedLocked(name string, want bool) {
	if !want {
		delete(s.wanted, name)
		s.ctl.ready.DeleteLabelValues(name)
		return
	}
	s.wanted[name] = true
	_, serving := s.table()[name]
	v := 0.0
	if serving {
		v = 1
	}
	s.ctl.ready.WithLabelValues(name).Set(v)
}

// Unavailable lists the models the server should serve but does not
// (failed to load), sorted, with the reason of each.
func (s *Server) Unavailable() []Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	table := s.table()
	var out []Failure
	for _, n := range slices.Sorted(maps.Keys(s.wanted)) {
		if _, ok := table[n]; !ok {
			out = append(out, Failure{Name: n, Err: errors.New(cmpOr(s.failed[n].reason, "not loaded"))})
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// loadFailure is the last failed load of a model.
type loadFailure struct {
	reason string
	at     time.Time
	stamp  string // the folder's stamp then (poll mode retries on a change)
}

// RepositoryIndex lists the models: every one the repository has, every
// one served, and every one the server should serve, each READY (served)
// or UNAVAILABLE, with the reason as Triton's index gives it: why a model
// is unavailable, or that the last reload of one still serving failed.
// With ready, only the READY ones.
func (s *Server) RepositoryIndex(ready bool) ([]api.RepositoryModel, error) {
	table := s.table()
	names := slices.Collect(maps.Keys(table))
	if s.repo != nil {
		inRepo, _, err := s.repo.Scan()
		if err != nil {
			return nil, err
		}
		names = append(names, inRepo...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names = append(names, slices.Collect(maps.Keys(s.wanted))...)
	slices.Sort(names)
	names = slices.Compact(names)
	out := []api.RepositoryModel{}
	for _, n := range names {
		e := api.RepositoryModel{Name: n, Version: version, State: "READY"}
		f, failed := s.failed[n]
		if _, ok := table[n]; ok {
			if failed {
				e.Reason = fmt.Sprintf("the last reload failed (%s): %s; the version loaded before it serves", f.at.UTC().Format(time.RFC3339), f.reason)
			}
		} else {
			if ready {
				continue
			}
			e.State, e.Reason = "UNAVAILABLE", "not loaded"
			if _, ok := s.gone[n]; ok {
				e.Reason = "unloaded"
			}
			if failed {
				e.Reason = f.reason
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// maxListed bounds the served models an unknown model's error lists.
const maxListed = 8

// unknownModel is the error for a request naming a model the server does
// not serve: why it is unavailable when the server should serve it, and
// the models it serves.
func (s *Server) unknownModel(name string) error {
	served := s.names()
	list := served
	if len(list) > maxListed {
		list = append(slices.Clip(list[:maxListed]), fmt.Sprintf("and %d more", len(served)-maxListed))
	}
	s.mu.Lock()
	f, failed := s.failed[name]
	wanted := s.wanted[name]
	s.mu.Unlock()
	if wanted && failed {
		return fmt.Errorf("%w: %q did not load: %s (served: [%s])", ErrModelUnavailable, infer.Clip(name), f.reason, strings.Join(list, " "))
	}
	return fmt.Errorf("%w %q (served: [%s])", ErrUnknownModel, infer.Clip(name), strings.Join(list, " "))
}

// ready reports whether the server serves every model it should (see the
// top of this file); it is what strict readiness adds to having started.
func (s *Server) servesWanted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	table := s.table()
	for n := range s.wanted {
		if _, ok := table[n]; !ok {
			return false
		}
	}
	return true
}

// onReadiness registers f to be called with the server's readiness after
// each model event that may change it (gRPC's health service).
func (s *Server) onReadiness(f func(ready bool)) {
	s.mu.Lock()
	s.readinessHooks = append(s.readinessHooks, f)
	s.mu.Unlock()
}

// readinessChanged runs the readiness hooks.
func (s *Server) readinessChanged() {
	s.mu.Lock()
	hooks := slices.Clone(s.readinessHooks)
	s.mu.Unlock()
	r := s.Ready()
	for _, f := range hooks {
		f(r)
	}
}

// Poll rescans the repository (model_control_mode poll): a model folder
// that is new loads, one whose files changed (name, size, modification
// time) reloads, one that is gone unloads. A folder that failed to load is
// tried again when its files change. The owner calls it every
// repository_poll_interval; calls must not overlap.
func (s *Server) Poll() {
	if s.repo == nil || s.draining.Load() {
		return
	}
	names, _, err := s.repo.Scan()
	if err != nil {
		s.log.Warn("repository poll failed", "err", err)
		return
	}
	table := s.table()
	for _, n := range names {
		st, err := s.repo.Stamp(n)
		if err != nil {
			st = "error: " + err.Error()
		}
		s.mu.Lock()
		f, failed := s.failed[n]
		old := s.stamps[n]
		s.mu.Unlock()
		if err != nil && st != old && (!failed || st != f.stamp) {
			// The stamp stays this error while the folder is so: a change
			// to it is not seen until it is fixed.
			s.log.Warn("repository poll: changes to a model folder are not seen", "model", n, "err", err)
		}
		_, serving := table[n]
		switch {
		case failed && f.stamp == st:
			continue // the same files failed before
		case serving && old == st && !failed:
			continue
		}
		s.load(n, st)
	}
	for n := range table {
		if !slices.Contains(names, n) {
			if err := s.unload(n, "its folder left the repository"); err != nil {
				s.log.Warn("repository poll: unload failed", "model", n, "err", err)
			}
		}
	}
	s.mu.Lock()
	for n := range s.failed {
		if !slices.Contains(names, n) {
			delete(s.failed, n)
			s.setWantedLocked(n, false)
		}
	}
	s.mu.Unlock()
	s.readinessChanged()
}

// LogSkipped logs the entries of a repository's root that are not models
// (Repository.Scan): a warning each, or a debug line for a hidden one.
func LogSkipped(log *slog.Logger, skipped []Skipped) {
	for _, k := range skipped {
		level := slog.LevelWarn
		if k.Hidden {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "repository: skipped an entry that is not a model", "entry", infer.Clip(k.Name), "reason", k.Reason)
	}
}
