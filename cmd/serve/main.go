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
// on (schedule.NewPool, the sizes server.PoolSizes lists, pinned) and
// those of tree plans (the same sizes, unpinned), opens the
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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"rnnserve/internal/f32"
	"rnnserve/internal/host"
	"rnnserve/internal/hugepage"
	"rnnserve/models"
	"rnnserve/models/bundled"
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
	// ModelName names the model of a repository directory that is itself
	// one model's folder (KServe's single-model layout).
	ModelName string `yaml:"model_name"`
	// Models are single models to serve instead of a repository: a model
	// folder or a lone weights file each (safetensors, PyTorch checkpoint
	// or ONNX), named after the file or folder.
	Models []string `yaml:"model"`
	// HeadInput states where the head of each -model weights file reads
	// (every_step, last_step or h_n), which no state_dict records.
	HeadInput string `yaml:"head_input"`
	// Nonlinearity states the nonlinearity of the nn.RNN modules of each
	// -model weights file (tanh or relu), which no state_dict records.
	Nonlinearity string `yaml:"nonlinearity"`
	// LoadModel are the models explicit model control loads at start ("*":
	// all of them).
	LoadModel []string `yaml:"load_model"`
	// ExitOnError makes a model that fails to load at start fatal.
	ExitOnError bool `yaml:"exit_on_error"`
	// HugePages puts weight matrices of 2 MiB or more on transparent huge
	// pages (internal/hugepage): each model's network holds them there,
	// outside the Go heap, instead of on it; the products read them
	// faster.
	HugePages bool `yaml:"huge_pages"`
	// Management guards the model repository API.
	Management managementConfig `yaml:"management"`
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

// managementConfig says where the model repository API (index, load,
// unload) is served and what it requires.
type managementConfig struct {
	// Listen, when set, is the one address the API is served on (REST).
	Listen string `yaml:"listen"`
	// TokenFile holds the bearer token the API requires.
	TokenFile string `yaml:"token_file"`
}

func defaultConfig() config {
	return config{Listen: "127.0.0.1:8080", GRPCListen: "127.0.0.1:8081", LameDuck: 5 * time.Second, DrainTimeout: 30 * time.Second,
		ReadTimeout: 30 * time.Second, HugePages: true, Log: logConfig{Format: "text", Level: logLevel(slog.LevelInfo), Access: true},
		Server: server.DefaultOptions()}
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
	gin.SetMode(gin.ReleaseMode)   // the REST router's mode is the process's
	hugepage.Enable(cfg.HugePages) // before any model is loaded: its matrices are placed then
	logw := newLogWriter(stderr)
	defer logw.Close()
	log := newLogger(logw, cfg.Log)
	for _, n := range notes {
		log.Warn(n)
	}
	if cfg.Server.CacheBytes == 0 || cfg.Server.PrivateCacheBytes == 0 {
		h := host.Get()
		if a := h.Assumed(); a != nil {
			log.Warn("the host does not give every cache size; modelling the defaults where not (set "+host.EnvCaches+" to say)",
				"assumed", strings.Join(a, ","), "caches", h.String(), "sysfs", fmt.Sprint(h.CacheErr),
				"last_level_bytes", h.L3(), "private_cache_bytes", h.L2())
		}
		if cfg.Server.CacheBytes == 0 {
			cfg.Server.CacheBytes = h.L3()
		}
		if cfg.Server.PrivateCacheBytes == 0 {
			cfg.Server.PrivateCacheBytes = h.L2()
		}
	}
	repo, where, entries, loadFailed, err := loadModels(log, cfg)
	if err != nil {
		return err
	}
	if cfg.PrintSpec {
		if len(loadFailed) > 0 {
			return fmt.Errorf("model %s: %w", loadFailed[0].Name, loadFailed[0].Err)
		}
		return printSpecs(stdout, entries)
	}
	mgmt := server.Management{Separate: cfg.Management.Listen != ""}
	if cfg.Management.TokenFile != "" {
		if mgmt.Token, err = readToken(cfg.Management.TokenFile); err != nil {
			return err
		}
	}
	// The pools close last, once nothing can run on them: after a clean
	// drain, or when the server never started. After a failed drain the
	// process exits with work still on them.
	// P's pools are pinned (each core keeps its slice of the weights);
	// tree plans get unpinned ones (server.Deps.TreePools).
	pools, treePools := server.Pools{}, server.Pools{}
	poolsInUse := false
	defer func() {
		if poolsInUse {
			return
		}
		for _, p := range pools {
			p.Close()
		}
		for _, p := range treePools {
			p.Close()
		}
	}()
	for _, n := range server.PoolSizes(cfg.Server) {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			return fmt.Errorf("worker pool of %d: %w", n, err)
		}
		pools[n] = p
		if p, err = schedule.NewPool(schedule.PoolOptions{Workers: n, NoPin: true}); err != nil {
			return fmt.Errorf("worker pool of %d: %w", n, err)
		}
		treePools[n] = p
	}
	if cfg.Server.Budget.Bytes == 0 {
		cfg.Server.Budget.Bytes = budgetFromMemory(cfg.Server.MaxBodyBytes)
	}
	memLimit := setSoftMemoryLimit(cfg.Server.Budget.Bytes)
	srv, err := server.New(entries, cfg.Server, server.Deps{Log: log, Pools: pools, TreePools: treePools, Repository: repo, Failed: loadFailed,
		Management: mgmt, Build: build})
	if err != nil {
		return err
	}
	unavailable := srv.Unavailable()
	if cfg.ExitOnError && len(unavailable) > 0 {
		var why []string
		for _, f := range unavailable {
			// The server keeps a reason cut to a response's size; a
			// model that failed here is told in full, fix included.
			err := f.Err
			for _, lf := range loadFailed {
				if lf.Name == f.Name {
					err = lf.Err
				}
			}
			why = append(why, f.Name+": "+err.Error())
		}
		return fmt.Errorf("%d of %d models failed to load, and exit_on_error is on (off, the default, starts with the models that load): %s",
			len(unavailable), len(entries)+len(loadFailed), strings.Join(why, "; "))
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	ln = srv.Listener(ln)
	var ms *http.Server
	var mln net.Listener
	if cfg.Management.Listen != "" {
		if mln, err = net.Listen("tcp", cfg.Management.Listen); err != nil {
			ln.Close()
			return fmt.Errorf("management listener: %w", err)
		}
		mln = srv.ManagementListener(mln)
	}
	var accessLog *slog.Logger
	if cfg.Log.Access {
		accessLog = newLogger(logw.Access(), cfg.Log)
	}
	requests := server.NewAccessLog(accessLog)
	requests.Probes = cfg.Log.AccessProbes
	gf, err := listenGRPC(cfg.GRPCListen, srv, requests.GRPCOptions()...)
	if err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return fmt.Errorf("gRPC: %w", err)
	}
	// WriteTimeout: every response is written within read_timeout and
	// write_timeout of its request's head (the request may take the first
	// to arrive; net/http clears the deadline after each response); the
	// handlers of what may take longer (an inference, a load, each event of
	// a stream) set write_timeout again before they write. Without it a
	// client that sends requests and reads no answer holds its connection
	// for ever.
	writeTimeout := cfg.ReadTimeout + cfg.Server.WriteTimeout
	hs := &http.Server{Handler: requests.Handler(srv.Handler()), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: cfg.Server.IdleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ConnState: srv.ConnState, ConnContext: srv.ConnContext}
	if mln != nil {
		ms = &http.Server{Handler: requests.Handler(srv.ManagementHandler()), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.ReadTimeout,
			WriteTimeout: writeTimeout, IdleTimeout: cfg.Server.IdleTimeout, MaxHeaderBytes: maxHeaderBytes,
			ConnState: srv.ConnState, ConnContext: srv.ConnContext}
	}
	// Signals are caught before the log says the server serves, so that
	// one sent on reading that line finds the lame duck.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv.Start()
	poolsInUse = true
	var names []string
	for _, e := range entries {
		if !slices.ContainsFunc(unavailable, func(f server.Failure) bool { return f.Name == e.Name }) {
			names = append(names, e.Name)
		}
	}
	mgmtAddr := "with the REST API"
	if mln != nil {
		mgmtAddr = mln.Addr().String()
	}
	log.Info("serving", "addr", ln.Addr().String(), "grpc", gf.addr(), "repository", where, "models", names,
		"unavailable", len(unavailable), "model_control_mode", cfg.Server.ModelControlMode, "management", mgmtAddr,
		"management_token", mgmt.Token != "",
		"llc_bytes", cfg.Server.CacheBytes, "private_cache_bytes", cfg.Server.PrivateCacheBytes,
		"cpu", host.Get().String(), "kernels", f32.Impl(), "budget_bytes", cfg.Server.Budget.Bytes, "go_memory_limit", memLimit, "max_connections", cfg.Server.MaxConnections,
		"version", build.Version, "commit", build.Commit)
	// The repository API is served on the management listener alone when
	// there is one, else on the REST and gRPC addresses.
	apiAddrs := []net.Addr{ln.Addr()}
	if gf != nil {
		apiAddrs = append(apiAddrs, gf.ln.Addr())
	}
	if mln != nil {
		apiAddrs = []net.Addr{mln.Addr()}
	}
	for _, a := range apiAddrs {
		if cfg.Server.ModelControlMode == server.ControlExplicit && mgmt.Token == "" && !loopback(a) {
			log.Warn("model control is explicit with no token on an address other hosts reach: anyone who reaches it can load and unload models; set -management-token-file or -management-listen",
				"addr", a.String())
		}
	}
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	if cfg.Server.ModelControlMode == server.ControlPoll {
		go func() {
			defer close(polled)
			t := time.NewTicker(cfg.Server.RepositoryPollInterval)
			defer t.Stop()
			for {
				select {
				case <-stopPoll:
					return
				case <-t.C:
					srv.Poll()
				}
			}
		}()
	} else {
		close(polled)
	}
	stopPolling := sync.OnceFunc(func() {
		close(stopPoll)
		<-polled
	})
	defer stopPolling()

	serveErr := make(chan error, 3) // HTTP, management and gRPC
	go func() { serveErr <- hs.Serve(ln) }()
	if ms != nil {
		go func() { serveErr <- ms.Serve(mln) }()
	}
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
	stopPolling()
	if err := shutdown(log, srv, hs, ln, ms, mln, gf, cfg.DrainTimeout); err != nil {
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
func shutdown(log *slog.Logger, srv *server.Server, hs *http.Server, ln net.Listener, ms *http.Server, mln net.Listener, gf *grpcFront, timeout time.Duration) error {
	log.Info("draining: no new connections; waiting for the requests in flight", "in_flight", srv.InFlight(), "drain_timeout", timeout)
	drain, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- gf.drain(drain) }()
	go func() {
		if ms == nil {
			errc <- nil
			return
		}
		mln.Close()
		err := ms.Shutdown(drain)
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		errc <- err
	}()
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
	errDrain := errors.Join(<-errc, <-errc, <-errc)
	var cut []string
	if errDrain != nil {
		cut = srv.Cut()
		grace, cancel := context.WithTimeout(context.Background(), cutGrace)
		errIdle := srv.Idle(grace)
		cancel()
		hs.Close()
		if ms != nil {
			ms.Close()
		}
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
// bidirectional RNN, an nn.RNN's nonlinearity) is refused with the spec
// line and the flag that settle it.
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
			return server.Entry{}, fmt.Errorf("-model %s: -head-input and -nonlinearity are for a weights file given alone; a model folder states them in its %s (head.input, cell)", p, models.SpecFile)
		}
		e, err := server.LoadModel(fsys, base)
		if err != nil {
			return server.Entry{}, fmt.Errorf("-model %s: %w", p, err)
		}
		return e, nil
	}
	m, err := models.OpenFSWith(fsys, base, opt)
	if errors.Is(err, models.ErrAmbiguous) {
		return server.Entry{}, fmt.Errorf("-model %s: %w (for a weights file alone: -head-input h_n, every_step or last_step; -nonlinearity tanh or relu)", p, err)
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

// loadModels loads what cfg says to serve: single models (-model), or the
// repository's (or the bundled ones), all of them unless model control is
// explicit, which loads those -load-model names. It logs the repository's
// entries that are no model, and returns the models that loaded and those
// that did not.
func loadModels(log *slog.Logger, cfg config) (repo *server.Repository, where string, entries []server.Entry, failed []server.Failure, err error) {
	if len(cfg.Models) > 0 {
		opt := models.OpenOptions{HeadInput: cfg.HeadInput, Nonlinearity: cfg.Nonlinearity}
		for _, p := range cfg.Models {
			e, err := openModel(p, opt)
			var amb *models.AmbiguousError
			if cfg.PrintSpec && errors.As(err, &amb) {
				// Print what was inferred, with what must be added.
				e, err = server.Entry{Name: modelName(p), Model: &models.Model{Spec: amb.Spec, Source: amb.Source}}, nil
			}
			if err != nil {
				if !cfg.PrintSpec {
					// A file the operator named is never skipped:
					// exit_on_error covers the repository's folders.
					return nil, "", nil, nil, fmt.Errorf("model %s: %w", modelName(p), err)
				}
				failed = append(failed, server.Failure{Name: modelName(p), Err: err})
				continue
			}
			entries = append(entries, e)
		}
		return nil, "models given on the command line", entries, failed, nil
	}
	var fsys fs.FS = bundled.FS
	where, single := "bundled models", ""
	if dir := cfg.ModelRepository; dir != "" {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, "", nil, nil, fmt.Errorf("model repository: %w", err)
		}
		if !fi.IsDir() {
			return nil, "", nil, nil, fmt.Errorf("model repository %s is a file, not a folder (serve a weights file with -model)", dir)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, "", nil, nil, fmt.Errorf("model repository: %w", err)
		}
		// os.DirFS follows the symbolic links the operator made; names
		// from requests are single path elements (server.Repository).
		fsys, where, single = os.DirFS(dir), dir, cmp.Or(cfg.ModelName, filepath.Base(abs))
	}
	repo, err = server.NewRepository(fsys, single)
	if err != nil {
		return nil, "", nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	names, skipped, err := repo.Scan()
	if err != nil {
		return nil, "", nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	server.LogSkipped(log, skipped)
	switch {
	case repo.Single() != "":
		log.Info("the repository folder is itself one model's folder (KServe's single-model layout)", "repository", where, "model", repo.Single())
	case cfg.ModelName != "":
		log.Info("model_name names no model: the repository holds a folder per model, each served under its folder's name", "model_name", cfg.ModelName)
	}
	if cfg.Server.ModelControlMode == server.ControlExplicit {
		if !slices.Contains(cfg.LoadModel, "*") {
			names = slices.Compact(slices.Sorted(slices.Values(cfg.LoadModel))) // a name given twice loads once
		}
		if len(names) == 0 {
			log.Info("model control is explicit and -load-model names no model: none is loaded until a load call")
		}
	}
	if len(names) == 0 && cfg.Server.ModelControlMode == server.ControlNone {
		return nil, "", nil, nil, fmt.Errorf("%s: %w: no model folders (a folder per model, each with a model.yaml or one weights file; or the folder of one model itself; the log names each entry skipped and why)",
			where, server.ErrRepository)
	}
	entries, failed = repo.LoadAll(names)
	return repo, where, entries, failed, nil
}

// maxTokenBytes bounds the management token file.
const maxTokenBytes = 4 << 10

// readToken reads the management token: the file's content without
// surrounding white space, printable ASCII without spaces.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("management token: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("management token: %w", err)
	}
	if len(data) > maxTokenBytes {
		return "", fmt.Errorf("management token file %s: more than %d bytes", path, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < 16 {
		return "", fmt.Errorf("management token file %s: the token has %d characters, want at least 16 (openssl rand -hex 32 makes one)", path, len(tok))
	}
	for _, c := range []byte(tok) {
		if c <= ' ' || c > '~' {
			return "", fmt.Errorf("management token file %s: the token holds a space or a character outside printable ASCII", path)
		}
	}
	return tok, nil
}

// loopback reports whether addr is a loopback address.
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
