package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"rnnserve/internal/host"
	"rnnserve/rnn"
	"rnnserve/server"
)

// Settings: everything serve can be told comes from, in order of
// precedence, its flag, its environment variable, the configuration file
// and its default. One table, settings, names each setting once: its
// field of config, its flag, and the help text. The environment
// variable's name (envPrefix and the flag's name in capitals, dashes as
// underscores), the file's key (the yaml tags along the field's path) and
// the default (defaultConfig) follow from it, and so do the flags serve
// -h prints, and the table of docs/configuration.md (settingsTable; a
// test fails when the committed table differs).
//
// Only this package reads the environment: parseConfig is handed it.

// envPrefix starts every environment variable serve reads. A Kubernetes
// Service named rnnserve gives pods RNNSERVE_SERVICE_* and RNNSERVE_PORT*
// variables (service links, serviceLink); no setting's variable has such
// a name.
const envPrefix = "RNNSERVE_"

// setting is one setting: a field of config (a dotted path of Go field
// names), its flag and its help text. The flag is the file's key with the
// server. prefix left out and dashes for dots and underscores
// (TestOneName).
type setting struct {
	field   string
	flag    string
	aliases []alias // other flag names for it
	arg     string  // what the help calls its value; "" names it after its type
	usage   string
	// def is the default as help and documentation show it; "" shows the
	// default value of defaultConfig.
	def string
}

// alias is another flag name of a setting: an old spelling, kept working
// with a warning, or the name KServe's model servers take (--model_name),
// which serve takes as KServe's ServingRuntimes pass it.
type alias struct {
	name string
	// deprecated: using the alias (its flag, or its RNNSERVE_ variable)
	// logs a warning that names the setting's own flag.
	deprecated bool
	// env: the alias's RNNSERVE_ variable is read too (an old spelling
	// that had one).
	env bool
	// conv maps the alias's value to the setting's (KServe's --http_port
	// 8080 is -listen 0.0.0.0:8080); nil keeps it.
	conv func(string) (string, error)
	// note is what the help says of it.
	note string
}

func oldName(name string, env bool) alias {
	return alias{name: name, deprecated: true, env: env, note: "deprecated spelling"}
}

func kserveName(name string) alias { return alias{name: name, note: "KServe's name"} }

// kservePort is KServe's --http_port or --grpc_port: a port, served on
// every interface, as KServe's model servers do.
func kservePort(name string) alias {
	a := kserveName(name)
	a.conv = func(v string) (string, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q is not a port number", v)
		}
		return "0.0.0.0:" + v, nil
	}
	a.note = "KServe's name; a port, on every interface"
	return a
}

var settings = []setting{
	{field: "File", flag: "config", arg: "FILE", usage: "YAML configuration file; configs/serve.yaml documents every key", def: "none"},
	{field: "Listen", flag: "listen", arg: "ADDR", aliases: []alias{kservePort("http_port")}, usage: "REST listen address (0.0.0.0:PORT serves other hosts too)"},
	{field: "GRPCListen", flag: "grpc-listen", arg: "ADDR", aliases: []alias{oldName("grpc", true), kservePort("grpc_port")}, usage: "gRPC listen address; off turns gRPC off (so does an empty flag)"},
	{field: "ModelRepository", flag: "model-repository", arg: "DIR", aliases: []alias{oldName("repository", true), oldName("models", false), kserveName("model_dir")},
		usage: "model repository directory: a folder per model, or one model's own folder (KServe's single-model layout, named by -model-name)", def: "the bundled models"},
	{field: "ModelName", flag: "model-name", arg: "NAME", aliases: []alias{kserveName("model_name")},
		usage: "the model's name when the repository directory is itself one model's folder (KServe's InferenceService name)", def: "the directory's name"},
	{field: "Models", flag: "model", arg: "PATH", usage: "serve this model folder or weights file (safetensors, PyTorch checkpoint, ONNX) instead of a repository; repeat the flag for more, or list them in the variable separated by colons", def: "none"},
	{field: "HeadInput", flag: "head-input", arg: "WHERE", usage: "where the head of each -model weights file reads, which no state_dict records: every_step (fc(out)), last_step (fc(out[:, -1])) or h_n (fc(h_n[-1]), or fc(cat(h_n[-2], h_n[-1])) for two directions); needed for a head over a bidirectional RNN", def: "unset (every_step over a unidirectional RNN; a bidirectional one is refused)"},
	{field: "Nonlinearity", flag: "nonlinearity", arg: "tanh|relu", usage: "the nonlinearity of the nn.RNN (Elman) modules of each -model weights file, which no state_dict records: tanh (nn.RNN's default) or relu", def: "unset (an nn.RNN is refused)"},
	{field: "LoadModel", flag: "load-model", arg: "NAME", usage: "with -model-control-mode explicit, a model of the repository to load at start (repeat the flag, or separate names with colons; * loads them all); without it none loads, as in Triton", def: "none"},
	{field: "ExitOnError", flag: "exit-on-error", usage: "exit with status 1 when a repository model fails to load at start, as Triton's exit-on-error; off starts with the models that load and lists the others UNAVAILABLE with the reason (a file named by -model always stops serve)"},
	{field: "HugePages", flag: "huge-pages", usage: "hold each weight matrix of 2 MiB or more on transparent huge pages instead of the Go heap, which the products read faster (schedules A, A+, P, the stepper and the heads; 1.03-1.26x on the benchmarks of docs/roofline.md); the bytes are outside the Go heap (metric rnnserve_hugepage_mapped_bytes; P's per-core slices and int8 or bf16 packings are mapped too); off keeps every weight on the Go heap. No effect where the kernel's THP mode is never"},
	{field: "Management.Listen", flag: "management-listen", arg: "ADDR", usage: "serve the model repository API (index, load, unload) over REST on this address only; the REST and gRPC addresses then refuse it with 403", def: "none (served with the rest)"},
	{field: "Management.TokenFile", flag: "management-token-file", arg: "FILE", usage: "file holding a bearer token the model repository API then requires (Authorization: Bearer TOKEN, or gRPC metadata authorization); read once at start", def: "none (no token)"},
	{field: "LameDuck", flag: "lame-duck", usage: "on SIGINT or SIGTERM, how long serve goes on serving with its readiness failing (each REST response closing its connection) before it stops accepting; 0 stops at once; a second signal ends it"},
	{field: "DrainTimeout", flag: "drain-timeout", usage: "after the lame-duck period, how long the requests in flight may take to finish; what is left then is cut short and serve exits 1"},
	{field: "ReadTimeout", flag: "read-timeout", usage: "a request's headers and body must arrive within this (slow clients get 400); 0 waits forever"},
	{field: "Log.Format", flag: "log-format", usage: "log lines as text (key=value) or json"},
	{field: "Log.Level", flag: "log-level", usage: "least level logged: debug, info, warn or error"},
	{field: "Log.Access", flag: "log-access", aliases: []alias{oldName("access-log", true)}, usage: "log a line per request (at level info, with its request id): on or off"},
	{field: "Log.AccessProbes", flag: "log-access-probes", usage: "log health probes in the access log too (REST /v2/health/*, gRPC health checks, ServerLive, ServerReady)"},
	{field: "Server.ModelControlMode", flag: "model-control-mode", arg: "none|explicit|poll", usage: "who loads and unloads models, as Triton's model-control-mode: none (the models loaded at start; load and unload calls get 403), explicit (load and unload calls; -load-model at start), poll (the repository is rescanned every -repository-poll-interval)"},
	{field: "Server.RepositoryPollInterval", flag: "repository-poll-interval", usage: "with -model-control-mode poll, how often the repository is rescanned"},
	{field: "Server.StrictReadiness", flag: "strict-readiness", usage: "ready only while every model that should be served is (one that failed to load makes it unready), as Triton's strict-readiness; off, ready once started"},
	{field: "Server.MaxBodyBytes", flag: "max-body-bytes", arg: "SIZE", usage: "largest request body (inflated, if compressed) or gRPC message"},
	{field: "Server.MaxResponseBytes", flag: "max-response-bytes", arg: "SIZE", usage: "largest response, in its encoding (JSON, binary tensor data, gRPC), sized before the request runs; a larger one is refused (400, gRPC RESOURCE_EXHAUSTED)"},
	{field: "Server.WriteTimeout", flag: "write-timeout", usage: "a REST response (a streamed one: each of its events while the model makes them, and the rest together once it has made them all) must be written within this, else the connection closes; a gRPC connection that holds responses it does not take for this long is closed"},
	{field: "Server.MaxSteps", flag: "max-steps", usage: "most time steps in one request"},
	{field: "Server.MaxRequestRows", flag: "max-request-rows", usage: "largest batch B of one request"},
	{field: "Server.MaxGenerateTokens", flag: "max-generate-tokens", usage: "largest max_tokens of a generate request"},
	{field: "Server.Budget.Bytes", flag: "budget-bytes", arg: "SIZE", usage: "memory budget: request bytes (bodies, gRPC messages and their decoded tensors) in flight at once, every protocol together; at least max-body-bytes", def: "0 (an eighth of the memory serve may use, at most 256MiB)"},
	{field: "Server.Budget.Wait", flag: "budget-wait", usage: "how long a request waits for room in the memory budget before it gets 503 and Retry-After"},
	{field: "Server.MinBodyRate", flag: "min-body-rate", usage: "slowest a request body may arrive, in bytes a second, after its first 64 KiB at that rate; a slower one gets 408 and gives its share of the memory budget back"},
	{field: "Server.MaxConnections", flag: "max-connections", usage: "most client connections open at once, REST and gRPC together; more wait to be accepted"},
	{field: "Server.IdleTimeout", flag: "idle-timeout", usage: "a connection with nothing in flight for this long is closed: an HTTP keep-alive connection between requests, a gRPC connection without calls (after a GOAWAY)"},
	{field: "Server.GRPC.MaxConcurrentStreams", flag: "grpc-max-concurrent-streams", usage: "most gRPC calls open at once on one connection; more are refused (REFUSED_STREAM) and clients retry them"},
	{field: "Server.GRPC.MaxCalls", flag: "grpc-max-calls", usage: "most gRPC calls open at once over all connections; one more is refused (UNAVAILABLE with a retry delay) unless its connection has fewer than its fair share"},
	{field: "Server.GRPC.MaxInferStreams", flag: "grpc-max-infer-streams", usage: "most ModelStreamInfer (and reflection) streams open at once; each may make the transport hold one request beyond the memory budget while it arrives", def: "0 (the memory budget over max-body-bytes, at least 4)"},
	{field: "Server.GRPC.FirstMessageTimeout", flag: "grpc-first-message-timeout", usage: "how long a gRPC call's message (a stream's first request) may take to arrive from the call's start"},
	{field: "Server.GRPC.MaxConnectionAge", flag: "grpc-max-connection-age", usage: "a gRPC connection this old gets GOAWAY, so clients spread over new replicas; 0 keeps connections as long as they are used"},
	{field: "Server.GRPC.MaxConnectionAgeGrace", flag: "grpc-max-connection-age-grace", usage: "after the GOAWAY of grpc-max-connection-age, how long its calls may take before the connection closes"},
	{field: "Server.GRPC.KeepaliveTime", flag: "grpc-keepalive-time", usage: "a gRPC connection silent this long is pinged; one whose client does not answer within 10s is closed, with what the server held for it"},
	{field: "Server.CacheBytes", flag: "cache-bytes", arg: "SIZE", usage: "last-level cache size for the schedule choice and the modelled traffic; 0 reads the host's", def: "0 (the host's)"},
	{field: "Server.PrivateCacheBytes", flag: "private-cache-bytes", arg: "SIZE", usage: "one core's private (L2) cache size for the schedule choice; 0 reads the host's", def: "0 (the host's)"},
	{field: "Server.TrafficSteps", flag: "traffic-steps", usage: "input length of the reference inference of the modelled traffic and DRE"},
	{field: "Server.ScheduleTiming", flag: "schedule-timing", usage: "per model, time spent at load timing the best-modelled schedules to run the fastest; 0 lets the model decide alone"},
	{field: "Server.Batching.Enabled", flag: "batching-enabled", aliases: []alias{oldName("batching", true)}, usage: "cellular batching of unidirectional models: on or off"},
	{field: "Server.Batching.MaxRows", flag: "batching-max-rows", usage: "most sequences in a model's running batch"},
	{field: "Server.Batching.MaxQueueDelay", flag: "batching-max-queue-delay", usage: "how long an empty batch waits for more requests before its first step"},
	{field: "Server.Batching.QueueLength", flag: "batching-queue-length", usage: "requests that may wait for a place; one more gets 503 and Retry-After"},
	{field: "Server.Batching.Workers", flag: "batching-workers", usage: "per model, requests run at once: batches (one core each) when batched, whole-request plans when not; 0 is GOMAXPROCS", def: "0 (GOMAXPROCS)"},
	{field: "Server.Sequences.IdleTimeout", flag: "sequences-idle-timeout", usage: "a sequence with no request for this long expires"},
	{field: "Server.Sequences.MaxLive", flag: "sequences-max-live", usage: "live sequences per model; one more gets 429"},
}

// deprecatedKeys are configuration file keys renamed: the old key still
// works, with a warning.
var deprecatedKeys = map[string]string{"models": "model"}

// actions are the flags that do something instead of setting something:
// they have no environment variable and no file key.
var actions = []struct{ flag, usage string }{
	{"print-spec", "print every model's spec (inferred from the weights where the folder has none) as YAML and exit"},
	{"version", "print the version, VCS commit and Go release, and exit"},
	{"h", "print this help and exit"},
}

// env is the setting's environment variable.
func (s *setting) env() string { return envName(s.flag) }

// envName is the environment variable of a flag name.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// size reports whether the setting is a size in bytes, which takes units
// (8MiB).
func (s *setting) size() bool { return s.arg == "SIZE" }

// show is the setting's value in cfg the way it is given.
func (s *setting) show(cfg *config) string {
	v := s.value(cfg)
	if s.size() {
		return formatSize(v.Int())
	}
	return formatValue(v)
}

// value is the setting's field of cfg.
func (s *setting) value(cfg *config) reflect.Value {
	v := reflect.ValueOf(cfg).Elem()
	for name := range strings.SplitSeq(s.field, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// key is the setting's key in the configuration file, dotted, or "" when
// the file cannot set it.
func (s *setting) key() string {
	t := reflect.TypeFor[config]()
	var parts []string
	for name := range strings.SplitSeq(s.field, ".") {
		f, _ := t.FieldByName(name)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			return ""
		}
		parts = append(parts, tag)
		t = f.Type
	}
	return strings.Join(parts, ".")
}

// list reports whether the setting takes a list.
func (s *setting) list() bool {
	return s.value(&config{}).Kind() == reflect.Slice
}

// defaultText is the default as help and documentation show it.
func (s *setting) defaultText() string {
	if s.def != "" {
		return s.def
	}
	d := defaultConfig()
	return s.show(&d)
}

// formatValue writes a setting's value the way it is given.
func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return shortDuration(x)
	case *bool:
		if x == nil {
			return ""
		}
		return onOff(*x)
	case bool:
		return onOff(x)
	case []string:
		return strings.Join(x, string(filepath.ListSeparator))
	case fmt.Stringer:
		return x.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	}
	panic(fmt.Sprintf("serve: setting of type %s", v.Type()))
}

// shortDuration is d as time.Duration.String writes it, without zero
// trailing units (5m, not 5m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// setValue parses s into v, a setting's field; a list appends to it.
func setValue(v reflect.Value, s string) error {
	if u, ok := v.Addr().Interface().(interface{ UnmarshalText([]byte) error }); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (such as 300ms, 30s or 5m)", s)
		}
		v.SetInt(int64(d))
		return nil
	case *bool, bool:
		var b bool
		switch s {
		case "on", "true":
			b = true
		case "off", "false":
		default:
			return fmt.Errorf("%q: want on or off", s)
		}
		if v.Kind() == reflect.Bool {
			v.SetBool(b)
		} else {
			v.Set(reflect.ValueOf(&b))
		}
		return nil
	case []string:
		v.Set(reflect.Append(v, reflect.ValueOf(s)))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(n)
	default:
		panic(fmt.Sprintf("serve: setting of type %s", v.Type()))
	}
	return nil
}

// flagValue is a setting's flag: it checks each value as it is given and
// keeps it, to be applied after the file and the environment.
type flagValue struct {
	s     *setting
	given []string
	name  string // the flag name last given: the setting's or an alias's
}

func (f *flagValue) String() string {
	if f == nil || f.s == nil { // flag.PrintDefaults' zero value
		return ""
	}
	return f.s.defaultText()
}

func (f *flagValue) Set(v string) error {
	f.name = f.s.flag
	return f.set(v)
}

func (f *flagValue) set(v string) error {
	var probe config
	if err := f.s.set(f.s.value(&probe), v); err != nil {
		return err
	}
	if f.s.list() {
		f.given = append(f.given, v)
	} else {
		f.given = []string{v}
	}
	return nil
}

// set parses x into v, the setting's field: a size takes units.
func (s *setting) set(v reflect.Value, x string) error {
	if s.size() {
		n, err := parseSize(x)
		if err != nil {
			return err
		}
		v.SetInt(n)
		return nil
	}
	return setValue(v, x)
}

// aliasFlag is an alias's flag: it maps the value and sets the setting's
// flag, noting an old spelling.
type aliasFlag struct {
	f     *flagValue
	a     alias
	notes *[]string
}

func (a *aliasFlag) String() string {
	if a == nil || a.f == nil {
		return ""
	}
	return a.f.String()
}

func (a *aliasFlag) Set(v string) error {
	if a.a.conv != nil {
		var err error
		if v, err = a.a.conv(v); err != nil {
			return err
		}
	}
	if a.a.deprecated {
		*a.notes = append(*a.notes, fmt.Sprintf("flag -%s is deprecated: it is -%s now (same value)", a.a.name, a.f.s.flag))
	}
	a.f.name = a.a.name
	return a.f.set(v)
}

// source says where a setting's value came from, for errors.
type source map[*setting]string

// where is the setting's source, or its default.
func (src source) where(s *setting) string {
	if w, ok := src[s]; ok {
		return w
	}
	return "default -" + s.flag
}

// argName is what the help calls the setting's value.
func (s *setting) argName() string {
	if s.arg != "" {
		return s.arg
	}
	switch v := s.value(&config{}); v.Interface().(type) {
	case time.Duration:
		return "DURATION"
	case *bool, bool:
		return "on|off"
	case logFormat:
		return "text|json"
	case logLevel:
		return "LEVEL"
	case server.ModelControl:
		return "none|explicit|poll"
	default:
		if v.Kind() == reflect.String {
			return "STRING"
		}
		return "N"
	}
}

// printHelp writes serve -h: every setting with its variable and
// default, then the actions. Each flag starts a line, indented, with its
// dash (deploy's tests read the flags so).
func printHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: serve [flags]

Serves rnnserve's models over REST (KServe v2, with Triton's extensions)
and gRPC. Each setting comes from its flag, else its environment variable,
else the configuration file (-config), else its default.
docs/configuration.md lists them with their configuration file keys.

Settings:
`)
	for i := range settings {
		s := &settings[i]
		fmt.Fprintf(w, "  -%s %s    %s, default %s\n", s.flag, s.argName(), s.env(), s.defaultText())
		writeWrapped(w, s.usage)
		for _, a := range s.aliases {
			fmt.Fprintf(w, "  -%s %s\n", a.name, s.argName())
			writeWrapped(w, a.note+" of -"+s.flag)
		}
	}
	fmt.Fprint(w, "\nActions:\n")
	for _, a := range actions {
		fmt.Fprintf(w, "  -%s\n", a.flag)
		writeWrapped(w, a.usage)
	}
}

// writeWrapped writes text indented, in lines of at most about 80
// columns.
func writeWrapped(w io.Writer, text string) {
	const indent, width = "        ", 80
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	fmt.Fprintln(w, line)
}

// parseConfig reads serve's configuration from the defaults, the file
// (-config, or RNNSERVE_CONFIG), the environment (environ, as
// os.Environ gives it) and the flags in args. It returns the notes to log
// once logging is set up: RNNSERVE_ variables that are no setting. -h
// gives flag.ErrHelp once the help is printed on stderr.
func parseConfig(args, environ []string, stderr io.Writer) (config, []string, error) {
	cfg := defaultConfig()
	var flagNotes []string
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(io.Discard) // errors are returned; the help is printHelp's
	fl.Usage = func() {}
	flags := make([]*flagValue, len(settings))
	for i := range settings {
		s := &settings[i]
		flags[i] = &flagValue{s: s}
		fl.Var(flags[i], s.flag, s.usage+" ("+s.env()+")")
		for _, a := range s.aliases {
			fl.Var(&aliasFlag{f: flags[i], a: a, notes: &flagNotes}, a.name, a.note+" of -"+s.flag)
		}
	}
	fl.BoolVar(&cfg.PrintSpec, actions[0].flag, false, actions[0].usage)
	fl.BoolVar(&cfg.ShowVersion, actions[1].flag, false, actions[1].usage)
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		printHelp(stderr)
		return cfg, nil, err
	} else if err != nil {
		return cfg, nil, fmt.Errorf("%w (serve -h lists the flags)", err)
	}
	if fl.NArg() > 0 {
		return cfg, nil, fmt.Errorf("unexpected arguments %q", fl.Args())
	}

	env := map[string]string{}
	var notes []string
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) {
			env[name] = v
		}
	}
	// Not a setting of the config: the kernels read it as the process
	// starts (internal/host). Refused here, not ignored.
	if err := host.CheckEnv(env[host.EnvCaches]); err != nil {
		return cfg, nil, err
	}
	for name, v := range env {
		if name == host.EnvCaches {
			continue
		}
		known := slices.ContainsFunc(settings, func(s setting) bool {
			return s.env() == name || slices.ContainsFunc(s.aliases, func(a alias) bool { return a.env && envName(a.name) == name })
		})
		if !known && !serviceLink(name, v) {
			notes = append(notes, fmt.Sprintf("environment variable %s is not a setting of serve (serve -h lists them)", name))
		}
	}
	slices.Sort(notes)
	notes = append(notes, flagNotes...)

	// Apply each layer in turn: the file's path, the file, the
	// environment, the flags.
	src := source{}
	apply := func(s *setting, values []string, where string) error {
		v := s.value(&cfg)
		if s.list() {
			v.Set(reflect.Zero(v.Type()))
		}
		for _, x := range values {
			if err := s.set(v, x); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		src[s] = where
		return nil
	}
	fromEnv := func(s *setting) error {
		name := s.env()
		v := env[name]
		for _, a := range s.aliases {
			if old := envName(a.name); a.env && env[old] != "" {
				if v == "" {
					name, v = old, env[old]
				}
				notes = append(notes, fmt.Sprintf("environment variable %s is deprecated: it is %s now (same value)", old, s.env()))
			}
		}
		if v == "" { // unset, or set empty: both leave the setting alone
			return nil
		}
		values := []string{v}
		if s.list() {
			values = slices.DeleteFunc(filepath.SplitList(v), func(p string) bool { return p == "" })
		}
		return apply(s, values, "environment variable "+name)
	}
	fromFlag := func(i int) error {
		if f := flags[i]; f.given != nil {
			return apply(f.s, f.given, "flag -"+f.name)
		}
		return nil
	}
	fileSetting := &settings[0]
	if err := fromEnv(fileSetting); err != nil {
		return cfg, notes, err
	}
	if err := fromFlag(0); err != nil {
		return cfg, notes, err
	}
	if cfg.File != "" {
		keys, fileNotes, err := readFile(&cfg, cfg.File)
		if err != nil {
			return cfg, notes, err
		}
		notes = append(notes, fileNotes...)
		for i := range settings[1:] {
			if s := &settings[i+1]; keys[s.key()] {
				src[s] = fmt.Sprintf("config file %s (%s)", cfg.File, s.key())
			}
		}
	}
	for i := range settings[1:] {
		if err := fromEnv(&settings[i+1]); err != nil {
			return cfg, notes, err
		}
	}
	for i := range settings[1:] {
		if err := fromFlag(i + 1); err != nil {
			return cfg, notes, err
		}
	}
	return cfg, notes, validate(&cfg, src)
}

// serviceLink reports whether an RNNSERVE_ variable is one Kubernetes gives
// every pod for a Service named rnnserve or rnnserve-anything
// (enableServiceLinks; KServe names its Services after the
// InferenceService: rnnserve-predictor): X_SERVICE_HOST,
// X_SERVICE_PORT[_NAME], X_PORT=tcp://..., X_PORT_N_PROTO[_ADDR|_PORT|_PROTO].
// They are not settings, and serve says nothing of them; a misspelt
// setting such as RNNSERVE_GRPC_PORT=9001 is still noted.
func serviceLink(name, value string) bool {
	return serviceLinkName.MatchString(name) ||
		serviceLinkPort.MatchString(name) && serviceLinkURL.MatchString(value)
}

var (
	serviceLinkName = regexp.MustCompile(`^RNNSERVE_([A-Z0-9_]+_)?(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_ADDR|_PORT|_PROTO)?)$`)
	serviceLinkPort = regexp.MustCompile(`^RNNSERVE_([A-Z0-9_]+_)?PORT$`)
	serviceLinkURL  = regexp.MustCompile(`^(tcp|udp|sctp)://`)
)

// maxConfigFileBytes bounds serve's configuration file.
const maxConfigFileBytes = 1 << 20

// readFile decodes the YAML file at path over cfg, strictly: an unknown
// key, a second document or more than maxConfigFileBytes is an error. It
// returns the keys the file sets (dotted). An empty file is an empty
// configuration. The file may be a pipe (-config <(...)).
func readFile(cfg *config, path string) (map[string]bool, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config file: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileBytes+1))
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("config file: %w", err)
	}
	if len(data) > maxConfigFileBytes {
		return nil, nil, fmt.Errorf("config file %s: more than %d bytes", path, maxConfigFileBytes)
	}
	var doc yaml.Node
	docs := yaml.NewDecoder(bytes.NewReader(data))
	if err := docs.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var extra yaml.Node
	if err := docs.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("config file %s: more than one YAML document", path)
	}
	// Renamed keys take their new names, and sizes with units become
	// byte counts, before the strict decoding below.
	var notes []string
	changed := false
	keys := map[string]bool{}
	var walk func(n *yaml.Node, prefix string) error
	walk = func(n *yaml.Node, prefix string) error {
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			return walk(n.Content[0], prefix)
		}
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if to, ok := deprecatedKeys[prefix+kn.Value]; ok {
				if keys[prefix+to] || slices.ContainsFunc(n.Content, func(c *yaml.Node) bool { return c.Value == to && c != vn }) {
					return fmt.Errorf("config file %s: both %s and its old name %s", path, prefix+to, prefix+kn.Value)
				}
				notes = append(notes, fmt.Sprintf("config file %s: key %s is deprecated: it is %s now (same value)", path, prefix+kn.Value, prefix+to))
				kn.Value, changed = to, true
			}
			k := prefix + kn.Value
			keys[k] = true
			if s := settingOfKey(k); s != nil && s.size() && vn.Kind == yaml.ScalarNode {
				n, err := parseSize(vn.Value)
				if err != nil {
					return fmt.Errorf("config file %s (%s, line %d): %w", path, k, vn.Line, err)
				}
				if v := strconv.FormatInt(n, 10); v != vn.Value {
					vn.Value, vn.Tag, vn.Style, changed = v, "!!int", 0, true
				}
			} else if s != nil {
				// Decoded alone first, so that a bad value is told with its
				// key and line: the decoder below names the line only, and
				// for a word such as a mode (UnmarshalText) neither.
				var probe config
				if err := vn.Decode(s.value(&probe).Addr().Interface()); err != nil {
					return fmt.Errorf("config file %s (%s, line %d): %s", path, k, vn.Line, nodeError(err))
				}
			}
			if err := walk(vn, k+"."); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(&doc, ""); err != nil {
		return nil, nil, err
	}
	if changed {
		if data, err = yaml.Marshal(&doc); err != nil {
			return nil, nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return keys, notes, nil
}

// nodeError is the message of an error decoding one value: a type
// error's without the "line N:" its caller names.
func nodeError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = lineTag.ReplaceAllString(m, "")
	}
	return strings.Join(msgs, "; ")
}

var lineTag = regexp.MustCompile(`^line \d+: `)

// settingOfKey is the setting of a configuration file key, or nil.
func settingOfKey(key string) *setting {
	for i := range settings {
		if settings[i].key() == key {
			return &settings[i]
		}
	}
	return nil
}

// settingOf is the setting of a field (a dotted path of Go field names).
func settingOf(field string) *setting {
	for i := range settings {
		if settings[i].field == field {
			return &settings[i]
		}
	}
	panic("serve: no setting of field " + field)
}

// validate checks the whole configuration, naming the source of a bad
// value.
func validate(cfg *config, src source) error {
	if len(cfg.Models) > 0 && cfg.ModelRepository != "" {
		return fmt.Errorf("%s and %s: serve either single models or a repository", src.where(settingOf("Models")), src.where(settingOf("ModelRepository")))
	}
	if len(cfg.LoadModel) > 0 && cfg.Server.ModelControlMode != server.ControlExplicit {
		return fmt.Errorf("%s: models to load at start are named only with model control explicit (-model-control-mode explicit); with %s every model loads",
			src.where(settingOf("LoadModel")), cmp.Or(cfg.Server.ModelControlMode, server.ControlNone))
	}
	if len(cfg.Models) > 0 && cmp.Or(cfg.Server.ModelControlMode, server.ControlNone) != server.ControlNone {
		return fmt.Errorf("%s and %s: model control %s loads from a repository; single models are served with model control none",
			src.where(settingOf("Models")), src.where(settingOf("Server.ModelControlMode")), cfg.Server.ModelControlMode)
	}
	if cfg.DrainTimeout <= 0 {
		return fmt.Errorf("%s: drain timeout %v: want more than 0", src.where(settingOf("DrainTimeout")), cfg.DrainTimeout)
	}
	if cfg.ReadTimeout < 0 {
		return fmt.Errorf("%s: read timeout %v: want 0 (none) or more", src.where(settingOf("ReadTimeout")), cfg.ReadTimeout)
	}
	if _, err := rnn.ParseHeadInput(cfg.HeadInput); err != nil {
		return fmt.Errorf("%s: %w", src.where(settingOf("HeadInput")), err)
	}
	if cfg.Nonlinearity != "" && cfg.Nonlinearity != "tanh" && cfg.Nonlinearity != "relu" {
		return fmt.Errorf("%s: nonlinearity %q, want tanh or relu", src.where(settingOf("Nonlinearity")), cfg.Nonlinearity)
	}
	if cfg.LameDuck < 0 || cfg.LameDuck > 10*time.Minute {
		return fmt.Errorf("%s: lame-duck period %v: want 0..10m", src.where(settingOf("LameDuck")), cfg.LameDuck)
	}
	cfg.Server.EnsureDefaults()
	err := cfg.Server.Validate()
	if oe := (*server.OptionError)(nil); errors.As(err, &oe) {
		for i := range settings {
			if s := &settings[i]; s.key() == "server."+oe.Key {
				return fmt.Errorf("%s: %w", src.where(s), err)
			}
		}
	}
	return err
}
