// Command serve runs rnnserve's HTTP server (KServe v2 protocol, with
// Triton's extensions) and its gRPC server (the same protocol's
// GRPCInferenceService, with health and reflection) on a model repository:
// by default the bundled models embedded in the binary.
//
//	go run ./cmd/serve                       # bundled models on 127.0.0.1:8080, gRPC on 127.0.0.1:8081
//	go run ./cmd/serve -grpc off             # REST only
//	go run ./cmd/serve -config configs/serve.yaml -repository ./my-models
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
//     answered with Connection: close, before the idle ones close) and the
//     requests in flight finish.
//  3. If all finished: the batchers stop, the pools close, exit 0.
//     Otherwise what is still in flight is cut: a generation stream ends
//     with a final error line (an SSE error event, an NDJSON line with
//     "error", a gRPC error_message), any other request answers 503 (gRPC
//     UNAVAILABLE); one log line names each request cut (endpoint, model,
//     protocol, age) and the connections closed, and serve exits 1.
package main

import (
	"bytes"
	"cmp"
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

	"gopkg.in/yaml.v3"

	"rnnserve/models"
	"rnnserve/models/bundled"
	"rnnserve/schedule"
	"rnnserve/server"
)

// config is everything serve can be told, from the YAML file and flags.
type config struct {
	Listen          string `yaml:"listen"`
	GRPCListen      string `yaml:"grpc_listen"`      // "off" or empty: no gRPC
	ModelRepository string `yaml:"model_repository"` // empty: the embedded bundled models
	// Models are single models to serve instead of a repository: a model
	// folder or a lone weights file each (safetensors, PyTorch checkpoint
	// or ONNX), named after the file or folder.
	Models []string `yaml:"models"`
	// PrintSpec prints the spec of every model (inferred where the folder
	// had none) and exits instead of serving.
	PrintSpec bool `yaml:"-"`
	// LameDuck is how long serve goes on serving after SIGTERM, failing
	// its readiness and closing every connection after its response,
	// before it stops accepting.
	LameDuck     time.Duration  `yaml:"lame_duck"`
	DrainTimeout time.Duration  `yaml:"drain_timeout"`
	ReadTimeout  time.Duration  `yaml:"read_timeout"` // slow clients: the whole request must arrive within this
	Server       server.Options `yaml:"server"`
}

func defaultConfig() config {
	cfg := config{Listen: "127.0.0.1:8080", GRPCListen: "127.0.0.1:8081", LameDuck: 5 * time.Second, DrainTimeout: 30 * time.Second,
		ReadTimeout: 30 * time.Second, Server: server.DefaultOptions()}
	cfg.Server.Budget.Bytes = 0 // from the machine's memory, unless set
	return cfg
}

// lastCall is how long, after the listeners close, an open HTTP
// connection may still deliver a request before idle connections close.
const lastCall = time.Second

// cutGrace is how long the handlers of requests cut at the drain timeout
// get to write their last line before the connections close.
const cutGrace = 2 * time.Second

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer, stderr *os.File) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	if cfg.Server.CacheBytes == 0 || cfg.Server.PrivateCacheBytes == 0 {
		levels, err := server.HostCaches("/")
		if err != nil {
			log.Warn("cannot read the host's cache sizes; modelling a 12 MiB last-level cache and 1 MiB private caches", "err", err)
		}
		if cfg.Server.CacheBytes == 0 {
			cfg.Server.CacheBytes = cmp.Or(server.LastLevelBytes(levels), 12<<20)
		}
		if cfg.Server.PrivateCacheBytes == 0 {
			cfg.Server.PrivateCacheBytes = cmp.Or(server.PrivateBytes(levels), 1<<20)
		}
	}
	var repo fs.FS = bundled.FS
	where := "bundled models"
	var entries []server.Entry
	if len(cfg.Models) > 0 {
		repo, where = nil, "models given on the command line"
		for _, p := range cfg.Models {
			e, err := openModel(p)
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
	srv, err := server.New(entries, cfg.Server, server.Deps{Log: log, Pools: pools, Repository: repo})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	ln = srv.Listener(ln)
	gf, err := listenGRPC(cfg.GRPCListen, srv)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gRPC: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.ReadTimeout}
	srv.Start()
	poolsInUse = true
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	log.Info("serving", "addr", ln.Addr().String(), "grpc", gf.addr(), "repository", where, "models", names,
		"llc_bytes", cfg.Server.CacheBytes, "private_cache_bytes", cfg.Server.PrivateCacheBytes,
		"budget_bytes", cfg.Server.Budget.Bytes, "max_connections", cfg.Server.MaxConnections)

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

// parseConfig reads the YAML file named by -config (if any), then applies
// flags, which win.
func parseConfig(args []string) (config, error) {
	cfg := defaultConfig()
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fl.String("config", "", "YAML config file (see configs/serve.yaml)")
	listen := fl.String("listen", "", "listen address (default 127.0.0.1:8080; use 0.0.0.0:PORT to expose it)")
	var repository string
	fl.StringVar(&repository, "repository", "", "model repository directory: loaded at start, and the repository endpoints load and unload from it (default: the bundled models)")
	fl.StringVar(&repository, "models", "", "the same as -repository (its older name)")
	cache := fl.Int64("cache-bytes", 0, "last-level cache size for the schedule choice (default: read from the host)")
	private := fl.Int64("private-cache-bytes", 0, "one core's private (L2) cache size for the schedule choice (default: read from the host)")
	batching := fl.String("batching", "", "cellular batching: on or off (default on)")
	lameDuck := fl.Duration("lame-duck", 0, "after SIGTERM, serve this long with readiness failing before draining (default 5s; 0 drains at once)")
	drainTimeout := fl.Duration("drain-timeout", 0, "after the lame-duck period, wait at most this long for requests in flight, then cut them and exit 1 (default 30s)")
	budgetBytes := fl.Int64("budget-bytes", 0, "memory budget: request bytes in flight across the server (default: an eighth of the memory the process may use, at most 256 MiB)")
	maxConns := fl.Int("max-connections", 0, "most client connections open at once, REST and gRPC together (default 4096)")
	grpcAddr := fl.String("grpc", "", "gRPC listen address (default 127.0.0.1:8081); off or empty turns gRPC off")
	fl.Func("model", "serve this model folder or weights file (safetensors, PyTorch checkpoint, ONNX) instead of a repository; repeatable", func(v string) error {
		cfg.Models = append(cfg.Models, v)
		return nil
	})
	fl.BoolVar(&cfg.PrintSpec, "print-spec", false, "print every model's spec (inferred from the weights where the folder has none) as YAML and exit")
	if err := fl.Parse(args); err != nil {
		return cfg, err
	}
	if fl.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *path != "" {
		data, err := os.ReadFile(*path)
		if err != nil {
			return cfg, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) { // an empty file is an empty config
			return cfg, fmt.Errorf("config %s: %w", *path, err)
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if repository != "" {
		cfg.ModelRepository = repository
	}
	if len(cfg.Models) > 0 && cfg.ModelRepository != "" {
		return cfg, errors.New("-model and -repository (model_repository) exclude each other")
	}
	fl.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "grpc":
			cfg.GRPCListen = *grpcAddr
		case "lame-duck":
			cfg.LameDuck = *lameDuck
		}
	})
	if *cache != 0 {
		cfg.Server.CacheBytes = *cache
	}
	if *drainTimeout != 0 {
		cfg.DrainTimeout = *drainTimeout
	}
	if *budgetBytes != 0 {
		cfg.Server.Budget.Bytes = *budgetBytes
	}
	if *maxConns != 0 {
		cfg.Server.MaxConnections = *maxConns
	}
	if cfg.Server.Budget.Bytes == 0 {
		maxBody := cmp.Or(cfg.Server.MaxBodyBytes, server.DefaultOptions().MaxBodyBytes)
		if mem := machineMemory(); mem > 0 {
			cfg.Server.Budget.Bytes = server.BudgetFor(mem, maxBody)
		}
	}
	if *private != 0 {
		cfg.Server.PrivateCacheBytes = *private
	}
	switch *batching {
	case "":
	case "on", "off":
		on := *batching == "on"
		cfg.Server.Batching.Enabled = &on
	default:
		return cfg, fmt.Errorf("-batching %q: want on or off", *batching)
	}
	cfg.Server.EnsureDefaults()
	if err := cfg.Server.Validate(); err != nil {
		return cfg, err
	}
	if cfg.DrainTimeout <= 0 {
		return cfg, fmt.Errorf("drain_timeout %v: want > 0", cfg.DrainTimeout)
	}
	if cfg.LameDuck < 0 || cfg.LameDuck > 10*time.Minute {
		return cfg, fmt.Errorf("lame_duck %v: want 0..10m", cfg.LameDuck)
	}
	return cfg, nil
}

// openModel loads one model named on the command line: a model folder (a
// spec, or one weights file whose spec is inferred) or a weights file,
// read only from inside its directory. It is served under the folder's or
// the file's name without its extension.
func openModel(p string) (server.Entry, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model: %w", err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model: %w", err)
	}
	dir, base := filepath.Split(abs)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
	}
	defer root.Close()
	if fi.IsDir() {
		e, err := server.LoadModel(root.FS(), base)
		if err != nil {
			return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
		}
		return e, nil
	}
	m, err := models.OpenFS(root.FS(), base)
	if err != nil {
		return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
	}
	return server.Entry{Name: strings.TrimSuffix(base, filepath.Ext(base)), Model: m}, nil
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
