// Command serve runs rnnserve's HTTP server (KServe v2 protocol, with
// Triton's extensions) and its gRPC server (the same protocol's
// GRPCInferenceService, with health and reflection) on a model repository:
// by default the bundled models embedded in the binary.
//
//	go run ./cmd/serve                       # bundled models on 127.0.0.1:8080, gRPC on 127.0.0.1:8081
//	go run ./cmd/serve -grpc off             # REST only
//	go run ./cmd/serve -config configs/serve.yaml -repository ./my-models
//	RNNSERVE_LOG_FORMAT=json go run ./cmd/serve
//
// Every setting comes from its flag, its RNNSERVE_ environment variable,
// the configuration file or its default, in that order (settings.go;
// docs/configuration.md lists them). serve -h prints them and exits 0.
//
// With -repository every model directory is loaded at start, and the
// repository endpoints load, reload and unload models from it by name
// (only from inside it: names with a path separator or "..", and
// symbolic links out of it, are refused).
//
// main owns every long-lived component: it makes the worker pools P runs
// on (schedule.NewPool, the sizes server.PoolSizes lists), opens the
// repository, starts the server's batchers and the HTTP and gRPC
// listeners (their connections together capped by
// server.max_connections), and gives the server its memory budget: when
// the configuration sets none, an eighth of the memory the process may
// use (the least of the machine's, its cgroup's limit and GOMEMLIMIT), at
// most 256 MiB.
//
// On SIGTERM or SIGINT it shuts down in steps:
//
//  1. Lame duck, for lame_duck (-lame-duck, default 5s): readiness answers
//     503 at once (REST /v2/health/ready, gRPC health NOT_SERVING), so
//     load balancers stop sending; requests are still served, and every
//     REST response carries Connection: close, so keep-alive clients
//     reconnect elsewhere. A second signal ends this step early.
//  2. Drain, for at most drain_timeout (-drain-timeout, default 30s): the
//     listeners close (gRPC clients get GOAWAY; an HTTP keep-alive
//     connection still open may deliver a request for one more second,
//     answered with Connection: close, before the idle ones close, except
//     one on which a request has arrived), open gRPC streams end after
//     the requests they hold with a last response saying so, and the
//     requests in flight finish.
//  3. If all finished: the batchers stop, the pools close, exit 0.
//     Otherwise what is still in flight is cut: a generation stream ends
//     with a final error line (an SSE error event, an NDJSON line with
//     "error", a gRPC error_message), any other request answers 503 (gRPC
//     UNAVAILABLE); one log line names each request cut (endpoint, model,
//     protocol, age) and the connections closed, and serve exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"rnnserve/internal/host"
	"rnnserve/models"
	"rnnserve/models/bundled"
	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server"
)

// config is everything serve can be told (settings.go lists each setting
// with its flag, environment variable and file key).
type config struct {
	// File is the YAML configuration file read, if any.
	File            string `yaml:"-"`
	Listen          string `yaml:"listen"`
	GRPCListen      string `yaml:"grpc_listen"`      // "off" or empty: no gRPC
	ModelRepository string `yaml:"model_repository"` // empty: the embedded bundled models
	// Models are single models to serve instead of a repository: a model
	// folder or a lone weights file each (safetensors, PyTorch checkpoint
	// or ONNX), named after the file or folder.
	Models []string `yaml:"models"`
	// HeadInput states where the head of each -model weights file reads
	// (every_step, last_step or h_n), which no state_dict records.
	HeadInput string `yaml:"head_input"`
	// LameDuck is how long serve goes on serving after SIGTERM, failing
	// its readiness and closing every connection after its response,
	// before it stops accepting.
	LameDuck     time.Duration  `yaml:"lame_duck"`
	DrainTimeout time.Duration  `yaml:"drain_timeout"`
	ReadTimeout  time.Duration  `yaml:"read_timeout"` // slow clients: the whole request must arrive within this
	Log          logConfig      `yaml:"log"`
	Server       server.Options `yaml:"server"`

	// Actions, by flag only: print every model's spec (inferred where the
	// folder had none), or the version, and exit instead of serving.
	PrintSpec   bool `yaml:"-"`
	ShowVersion bool `yaml:"-"`
}

func defaultConfig() config {
	return config{Listen: "127.0.0.1:8080", GRPCListen: "127.0.0.1:8081", LameDuck: 5 * time.Second, DrainTimeout: 30 * time.Second,
		ReadTimeout: 30 * time.Second, Log: logConfig{Format: "text", Level: logLevel(slog.LevelInfo), Access: true}, Server: server.DefaultOptions()}
}

// maxHeaderBytes bounds a REST request's header section (net/http's
// default is 1 MiB; gRPC metadata is bounded alike).
const maxHeaderBytes = 64 << 10

// lastCall is how long, after the listeners close, an open HTTP
// connection may still deliver a request before idle connections close.
const lastCall = time.Second

// cutGrace is how long the handlers of requests cut at the drain timeout
// get to write their last line before the connections close.
const cutGrace = 2 * time.Second

func main() {
	err := run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // serve -h: the help is printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(args, environ []string, stdout io.Writer, stderr *os.File) error {
	cfg, notes, err := parseConfig(args, environ, stderr)
	if err != nil {
		return err
	}
	build := buildInfo()
	if cfg.ShowVersion {
		fmt.Fprintf(stdout, "serve %s (commit %s, %s)\n", build.Version, build.Commit, build.GoVersion)
		return nil
	}
	log := newLogger(stderr, cfg.Log)
	for _, n := range notes {
		log.Warn(n)
	}
	if cfg.Server.CacheBytes == 0 || cfg.Server.PrivateCacheBytes == 0 {
		h := host.Get()
		if h.CacheErr != nil {
			log.Warn("cannot read the host's cache sizes; modelling the defaults", "err", h.CacheErr,
				"last_level_bytes", h.L3(), "private_cache_bytes", h.L2())
		}
		if cfg.Server.CacheBytes == 0 {
			cfg.Server.CacheBytes = h.L3()
		}
		if cfg.Server.PrivateCacheBytes == 0 {
			cfg.Server.PrivateCacheBytes = h.L2()
		}
	}
	var repo fs.FS = bundled.FS
	where := "bundled models"
	var entries []server.Entry
	if len(cfg.Models) > 0 {
		repo, where = nil, "models given on the command line"
		opt := models.OpenOptions{HeadInput: cfg.HeadInput}
		for _, p := range cfg.Models {
			e, err := openModel(p, opt)
			var amb *models.AmbiguousError
			if cfg.PrintSpec && errors.As(err, &amb) {
				// Print what was inferred, with what must be added.
				e, err = server.Entry{Name: modelName(p), Model: &models.Model{Spec: amb.Spec, Source: amb.Source}}, nil
			}
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
	} else if cfg.ModelRepository != "" {
		// os.Root keeps every read inside the directory, symlinks included.
		root, err := os.OpenRoot(cfg.ModelRepository)
		if err != nil {
			return fmt.Errorf("model repository: %w", err)
		}
		defer root.Close()
		repo, where = root.FS(), cfg.ModelRepository
	}
	if entries == nil {
		if entries, err = server.LoadRepository(repo); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	if cfg.PrintSpec {
		return printSpecs(stdout, entries)
	}
	// The pools close last, once nothing can run on them: after a clean
	// drain, or when the server never started. After a failed drain the
	// process exits with work still on them.
	pools := server.Pools{}
	poolsInUse := false
	defer func() {
		if poolsInUse {
			return
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, n := range server.PoolSizes(cfg.Server) {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			return fmt.Errorf("worker pool of %d: %w", n, err)
		}
		pools[n] = p
	}
	if cfg.Server.Budget.Bytes == 0 {
		cfg.Server.Budget.Bytes = budgetFromMemory(cfg.Server.MaxBodyBytes)
	}
	srv, err := server.New(entries, cfg.Server, server.Deps{Log: log, Pools: pools, Repository: repo, Build: build})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	ln = srv.Listener(ln)
	var accessLog *slog.Logger
	if cfg.Log.Access {
		accessLog = log
	}
	requests := server.NewAccessLog(accessLog)
	gf, err := listenGRPC(cfg.GRPCListen, srv, requests.GRPCOptions()...)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gRPC: %w", err)
	}
	hs := &http.Server{Handler: requests.Handler(srv.Handler()), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: cfg.Server.IdleTimeout, MaxHeaderBytes: maxHeaderBytes, ConnState: srv.ConnState, ConnContext: srv.ConnContext}
	srv.Start()
	poolsInUse = true
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	log.Info("serving", "addr", ln.Addr().String(), "grpc", gf.addr(), "repository", where, "models", names,
		"llc_bytes", cfg.Server.CacheBytes, "private_cache_bytes", cfg.Server.PrivateCacheBytes,
		"cpu", host.Get().Model, "kernels", rnn.KernelImpl(), "budget_bytes", cfg.Server.Budget.Bytes, "max_connections", cfg.Server.MaxConnections, "version", build.Version, "commit", build.Commit)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	serveErr := make(chan error, 2) // HTTP and gRPC
	go func() { serveErr <- hs.Serve(ln) }()
	gf.serve(serveErr)
	var failed error
	select {
	case failed = <-serveErr:
		log.Error("serving failed; draining", "err", failed)
	case sig := <-sigs:
		srv.LameDuck()
		log.Info("lame duck: readiness fails; still serving, each response closing its connection", "signal", sig.String(),
			"lame_duck", cfg.LameDuck, "drain_timeout", cfg.DrainTimeout)
		select {
		case <-time.After(cfg.LameDuck):
		case sig := <-sigs:
			log.Info("second signal: the lame-duck period ends now", "signal", sig.String())
		}
	}
	if err := shutdown(log, srv, hs, ln, gf, cfg.DrainTimeout); err != nil {
		return errors.Join(failed, err)
	}
	poolsInUse = false
	if failed != nil {
		return failed
	}
	log.Info("stopped: every request in flight finished")
	return nil
}

// errCut is the error serve exits with when the drain timeout cut
// requests short.
var errCut = errors.New("drain timeout: requests in flight were cut short")

// shutdown stops accepting, drains the requests in flight for at most
// timeout, cuts what is left (see the package doc) and stops the server's
// batchers. It returns nil when everything drained.
func shutdown(log *slog.Logger, srv *server.Server, hs *http.Server, ln net.Listener, gf *grpcFront, timeout time.Duration) error {
	log.Info("draining: no new connections; waiting for the requests in flight", "in_flight", srv.InFlight(), "drain_timeout", timeout)
	drain, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- gf.drain(drain) }()
	go func() {
		// HTTP/1.1 cannot tell a client that an idle keep-alive connection
		// is about to close: a request it sends just then meets the close.
		// So the listener closes first and the open connections get
		// lastCall to deliver a request already on its way (answered with
		// Connection: close) before the idle ones close.
		ln.Close()
		select {
		case <-time.After(min(lastCall, timeout)):
		case <-drain.Done():
		}
		srv.CloseIdle() // not one on which a request has arrived
		err := hs.Shutdown(drain)
		if errors.Is(err, net.ErrClosed) { // the listener closed above
			err = nil
		}
		errc <- err
	}()
	errDrain := errors.Join(<-errc, <-errc)
	var cut []string
	if errDrain != nil {
		cut = srv.Cut()
		grace, cancel := context.WithTimeout(context.Background(), cutGrace)
		errIdle := srv.Idle(grace)
		cancel()
		hs.Close()
		gf.close()
		what := strings.Join(cut, "; ")
		if len(cut) == 0 {
			what = "no request; only connections still sending one"
		}
		log.Error("drain timeout: cut what was still in flight and closed the connections left",
			"drain_timeout", timeout, "requests_cut", len(cut), "cut", what, "idle", errIdle)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		return fmt.Errorf("%w (%d requests); then the batchers: %w", errCut, len(cut), err)
	}
	if errDrain != nil {
		return fmt.Errorf("%w (%d requests)", errCut, len(cut))
	}
	return nil
}

// modelName is the name a model given on the command line is served
// under: the folder's or the file's name without its extension.
func modelName(p string) string {
	base := filepath.Base(p)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// openModel loads one model named on the command line: a model folder (a
// spec, or one weights file whose spec is inferred) or a weights file,
// symlinks followed (they are the operator's), whose inferred spec opt completes.
// It is served under the folder's or the file's name without its
// extension. A model the weights alone leave open (a head over a
// bidirectional RNN) is refused with the spec line and the flag that
// settle it.
func openModel(p string, opt models.OpenOptions) (server.Entry, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model: %w", err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model: %w", err)
	}
	// The path and the links it holds are the operator's: they are
	// followed (a Hugging Face snapshot links its files into ../../blobs).
	dir, base := filepath.Split(abs)
	fsys := models.DirFS(dir)
	if fi.IsDir() {
		if opt != (models.OpenOptions{}) {
			return server.Entry{}, fmt.Errorf("-model %s: -head-input is for a weights file given alone; a model folder states it in its %s (head.input)", p, models.SpecFile)
		}
		e, err := server.LoadModel(fsys, base)
		if err != nil {
			return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
		}
		return e, nil
	}
	m, err := models.OpenFSWith(fsys, base, opt)
	if errors.Is(err, models.ErrAmbiguous) {
		return server.Entry{}, fmt.Errorf("-model %s: %w (or pass -head-input h_n, every_step or last_step; -print-spec prints the spec to complete)", p, err)
	}
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
	}
	return server.Entry{Name: modelName(p), Model: m}, nil
}

// printSpecs writes every sequence model's spec, each under a comment
// naming the model.
func printSpecs(w io.Writer, entries []server.Entry) error {
	for i, e := range entries {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "# model %s\n", e.Name)
		if e.Model == nil {
			fmt.Fprintln(w, "# a tree model: its spec is its model.yaml")
			continue
		}
		spec, err := models.FormatSpec(e.Model)
		if err != nil {
			return fmt.Errorf("model %s: %w", e.Name, err)
		}
		if _, err := w.Write(spec); err != nil {
			return err
		}
	}
	return nil
}
