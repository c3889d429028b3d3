package main

import (
	"bytes"
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
// names), its flag and its help text.
type setting struct {
	field string
	flag  string
	alias string // another flag name for it, or ""
	arg   string // what the help calls its value; "" names it after its type
	usage string
	// def is the default as help and documentation show it; "" shows the
	// default value of defaultConfig.
	def string
}

var settings = []setting{
	{field: "File", flag: "config", arg: "FILE", usage: "YAML configuration file; configs/serve.yaml documents every key", def: "none"},
	{field: "Listen", flag: "listen", arg: "ADDR", usage: "REST listen address (0.0.0.0:PORT serves other hosts too)"},
	{field: "GRPCListen", flag: "grpc", arg: "ADDR", usage: "gRPC listen address; off turns gRPC off (so does an empty flag)"},
	{field: "ModelRepository", flag: "repository", arg: "DIR", alias: "models", usage: "model repository directory: its models load at start, and the repository endpoints load and unload from it", def: "the bundled models"},
	{field: "Models", flag: "model", arg: "PATH", usage: "serve this model folder or weights file (safetensors, PyTorch checkpoint, ONNX) instead of a repository; repeat the flag for more, or list them in the variable separated by colons", def: "none"},
	{field: "HeadInput", flag: "head-input", arg: "WHERE", usage: "where the head of each -model weights file reads, which no state_dict records: every_step (fc(out)), last_step (fc(out[:, -1])) or h_n (fc(h_n[-1]), or fc(cat(h_n[-2], h_n[-1])) for two directions); needed for a head over a bidirectional RNN", def: "unset (every_step over a unidirectional RNN; a bidirectional one is refused)"},
	{field: "LameDuck", flag: "lame-duck", usage: "on SIGINT or SIGTERM, how long serve goes on serving with its readiness failing (each REST response closing its connection) before it stops accepting; 0 stops at once; a second signal ends it"},
	{field: "DrainTimeout", flag: "drain-timeout", usage: "after the lame-duck period, how long the requests in flight may take to finish; what is left then is cut short and serve exits 1"},
	{field: "ReadTimeout", flag: "read-timeout", usage: "a request's headers and body must arrive within this (slow clients get 400); 0 waits forever"},
	{field: "Log.Format", flag: "log-format", usage: "log lines as text (key=value) or json"},
	{field: "Log.Level", flag: "log-level", usage: "least level logged: debug, info, warn or error"},
	{field: "Log.Access", flag: "access-log", usage: "log a line per request (at level info, with its request id): on or off"},
	{field: "Server.MaxBodyBytes", flag: "max-body-bytes", usage: "largest request body (inflated, if compressed) or gRPC message, in bytes"},
	{field: "Server.MaxResponseBytes", flag: "max-response-bytes", usage: "largest response, in its encoding (JSON, binary tensor data, gRPC), sized before the request runs; a larger one is refused (400, gRPC RESOURCE_EXHAUSTED)"},
	{field: "Server.WriteTimeout", flag: "write-timeout", usage: "a REST response (a streamed one: each of its events) must be written within this, else the connection closes"},
	{field: "Server.MaxSteps", flag: "max-steps", usage: "most time steps in one request"},
	{field: "Server.MaxRequestRows", flag: "max-request-rows", usage: "largest batch B of one request"},
	{field: "Server.MaxGenerateTokens", flag: "max-generate-tokens", usage: "largest max_tokens of a generate request"},
	{field: "Server.Budget.Bytes", flag: "budget-bytes", usage: "memory budget: request bytes (bodies, gRPC messages and their decoded tensors) in flight at once, every protocol together; at least max-body-bytes", def: "0 (an eighth of the memory serve may use, at most 256 MiB)"},
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
	{field: "Server.CacheBytes", flag: "cache-bytes", usage: "last-level cache size for the schedule choice and the modelled traffic; 0 reads the host's", def: "0 (the host's)"},
	{field: "Server.PrivateCacheBytes", flag: "private-cache-bytes", usage: "one core's private (L2) cache size for the schedule choice; 0 reads the host's", def: "0 (the host's)"},
	{field: "Server.TrafficSteps", flag: "traffic-steps", usage: "input length of the reference inference of the modelled traffic and DRE"},
	{field: "Server.ScheduleTiming", flag: "schedule-timing", usage: "per model, time spent at load timing the best-modelled schedules to run the fastest; 0 lets the model decide alone"},
	{field: "Server.Batching.Enabled", flag: "batching", usage: "cellular batching of unidirectional models: on or off"},
	{field: "Server.Batching.MaxRows", flag: "batching-max-rows", usage: "most sequences in a model's running batch"},
	{field: "Server.Batching.MaxQueueDelay", flag: "batching-max-queue-delay", usage: "how long an empty batch waits for more requests before its first step"},
	{field: "Server.Batching.QueueLength", flag: "batching-queue-length", usage: "requests that may wait for a place; one more gets 503 and Retry-After"},
	{field: "Server.Batching.Workers", flag: "batching-workers", usage: "per model, requests run at once: batches (one core each) when batched, whole-request plans when not; 0 is GOMAXPROCS", def: "0 (GOMAXPROCS)"},
	{field: "Server.Sequences.IdleTimeout", flag: "sequences-idle-timeout", usage: "a sequence with no request for this long expires"},
	{field: "Server.Sequences.MaxLive", flag: "sequences-max-live", usage: "live sequences per model; one more gets 429"},
}

// actions are the flags that do something instead of setting something:
// they have no environment variable and no file key.
var actions = []struct{ flag, usage string }{
	{"print-spec", "print every model's spec (inferred from the weights where the folder has none) as YAML and exit"},
	{"version", "print the version, VCS commit and Go release, and exit"},
	{"h", "print this help and exit"},
}

// env is the setting's environment variable.
func (s *setting) env() string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(s.flag, "-", "_"))
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
	return formatValue(s.value(&d))
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
}

func (f *flagValue) String() string {
	if f == nil || f.s == nil { // flag.PrintDefaults' zero value
		return ""
	}
	return f.s.defaultText()
}

func (f *flagValue) Set(v string) error {
	var probe config
	if err := setValue(f.s.value(&probe), v); err != nil {
		return err
	}
	if f.s.list() {
		f.given = append(f.given, v)
	} else {
		f.given = []string{v}
	}
	return nil
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
		if s.alias != "" {
			fmt.Fprintf(w, "  -%s %s\n", s.alias, s.argName())
			writeWrapped(w, "the same as -"+s.flag)
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
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(io.Discard) // errors are returned; the help is printHelp's
	fl.Usage = func() {}
	flags := make([]*flagValue, len(settings))
	for i := range settings {
		s := &settings[i]
		flags[i] = &flagValue{s: s}
		fl.Var(flags[i], s.flag, s.usage+" ("+s.env()+")")
		if s.alias != "" {
			fl.Var(flags[i], s.alias, "the same as -"+s.flag)
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
	for name, v := range env {
		if !slices.ContainsFunc(settings, func(s setting) bool { return s.env() == name }) && !serviceLink(name, v) {
			notes = append(notes, fmt.Sprintf("environment variable %s is not a setting of serve (serve -h lists them)", name))
		}
	}
	slices.Sort(notes)

	// Apply each layer in turn: the file's path, the file, the
	// environment, the flags.
	src := source{}
	apply := func(s *setting, values []string, where string) error {
		v := s.value(&cfg)
		if s.list() {
			v.Set(reflect.Zero(v.Type()))
		}
		for _, x := range values {
			if err := setValue(v, x); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		src[s] = where
		return nil
	}
	fromEnv := func(s *setting) error {
		v := env[s.env()]
		if v == "" { // unset, or set empty: both leave the setting alone
			return nil
		}
		values := []string{v}
		if s.list() {
			values = slices.DeleteFunc(filepath.SplitList(v), func(p string) bool { return p == "" })
		}
		return apply(s, values, "environment variable "+s.env())
	}
	fromFlag := func(i int) error {
		if f := flags[i]; f.given != nil {
			return apply(f.s, f.given, "flag -"+f.s.flag)
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
		keys, err := readFile(&cfg, cfg.File)
		if err != nil {
			return cfg, notes, err
		}
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

// readFile decodes the YAML file at path over cfg, strictly: an unknown
// key is an error. It returns the keys the file sets (dotted). An empty
// file is an empty configuration.
func readFile(cfg *config, path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	keys := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			walk(n.Content[0], prefix)
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := prefix + n.Content[i].Value
			keys[k] = true
			walk(n.Content[i+1], k+".")
		}
	}
	walk(&doc, "")
	return keys, nil
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
	if cfg.DrainTimeout <= 0 {
		return fmt.Errorf("%s: drain timeout %v: want more than 0", src.where(settingOf("DrainTimeout")), cfg.DrainTimeout)
	}
	if cfg.ReadTimeout < 0 {
		return fmt.Errorf("%s: read timeout %v: want 0 (none) or more", src.where(settingOf("ReadTimeout")), cfg.ReadTimeout)
	}
	if _, err := rnn.ParseHeadInput(cfg.HeadInput); err != nil {
		return fmt.Errorf("%s: %w", src.where(settingOf("HeadInput")), err)
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
