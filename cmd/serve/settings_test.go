package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"rnnserve/server"
)

var update = flag.Bool("update", false, "rewrite the settings table of docs/configuration.md")

const configurationDoc = "../../docs/configuration.md"

// The generated table sits between these lines of docs/configuration.md.
const (
	tableStart = "<!-- settings table: generated from cmd/serve/settings.go by go test ./cmd/serve -run TestSettingsTable -update; do not edit -->"
	tableEnd   = "<!-- end of the settings table -->"
)

// settingsTable is the table of docs/configuration.md: every setting and
// action, in Markdown.
func settingsTable() string {
	var b strings.Builder
	row := func(cells ...string) {
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	code := func(s string) string { return "`" + s + "`" }
	b.WriteString("| Flag | Environment variable | Configuration file key | Default | Meaning |\n| --- | --- | --- | --- | --- |\n")
	for i := range settings {
		s := &settings[i]
		fl := code("-" + s.flag + " " + s.argName())
		var old, kserve []string
		for _, a := range s.aliases {
			if a.deprecated {
				old = append(old, code("-"+a.name))
			} else {
				kserve = append(kserve, code("--"+a.name))
			}
		}
		if len(kserve) > 0 {
			fl += " (KServe's " + strings.Join(kserve, ", ") + ")"
		}
		if len(old) > 0 {
			fl += " (formerly " + strings.Join(old, ", ") + ")"
		}
		key, def := "none", s.defaultText()
		if s.key() != "" {
			key = code(s.key())
		}
		if s.def == "" {
			def = code(def)
		}
		row(fl, code(s.env()), key, def, s.usage)
	}
	for _, a := range actions {
		row(code("-"+a.flag), "none", "none", "", a.usage)
	}
	return b.String()
}

// TestSettingsTable: the table in docs/configuration.md is the one the
// settings give (-update rewrites it).
func TestSettingsTable(t *testing.T) {
	doc, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), tableStart+"\n")
	table, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the lines around the table:\n%s\n%s", configurationDoc, tableStart, tableEnd)
	}
	want := settingsTable()
	if table == want {
		return
	}
	if *update {
		if err := os.WriteFile(configurationDoc, []byte(before+tableStart+"\n"+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table differs from the settings; run go test ./cmd/serve -run TestSettingsTable -update\nwant:\n%s", configurationDoc, want)
}

// leaves lists the dotted Go field paths of every leaf the configuration
// file can set.
func leaves(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, leaves(f.Type, prefix+f.Name+".")...)
			continue
		}
		out = append(out, prefix+f.Name)
	}
	return out
}

// TestSettingsComplete: every key of the configuration file is a setting,
// once; every setting's field exists; flags and variables are unique, and
// no variable is one Kubernetes gives pods for a Service named rnnserve.
func TestSettingsComplete(t *testing.T) {
	fields := map[string]bool{}
	for _, f := range leaves(reflect.TypeFor[config](), "") {
		fields[f] = true
	}
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, a := range actions {
		flags[a.flag] = true
	}
	for i := range settings {
		s := &settings[i]
		if f, ok := reflect.TypeFor[config]().FieldByName(strings.Split(s.field, ".")[0]); !ok || !s.value(&config{}).IsValid() {
			t.Errorf("setting -%s: config has no field %s (%v)", s.flag, s.field, f.Name)
			continue
		}
		if s.field != "File" && !fields[s.field] {
			t.Errorf("setting -%s: field %s is not a key of the configuration file", s.flag, s.field)
		}
		delete(fields, s.field)
		names := []string{s.flag}
		for _, a := range s.aliases {
			names = append(names, a.name)
		}
		for _, name := range names {
			if flags[name] {
				t.Errorf("flag -%s twice", name)
			}
			flags[name] = true
		}
		if envs[s.env()] || serviceLink(s.env(), "tcp://10.0.0.1:80") {
			t.Errorf("variable %s: twice, or a Kubernetes service link's name", s.env())
		}
		envs[s.env()] = true
		s.argName()     // panics on a type the settings cannot parse
		s.defaultText() // likewise
	}
	for f := range fields {
		t.Errorf("configuration file field %s has no setting: add it to settings (cmd/serve/settings.go)", f)
	}
	// serve -h shows exactly these flags.
	var help strings.Builder
	if _, _, err := parseConfig([]string{"-h"}, nil, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	var shown []string
	for _, m := range regexp.MustCompile(`(?m)^\s+-([\w-]+)`).FindAllStringSubmatch(help.String(), -1) {
		shown = append(shown, m[1])
		if !flags[m[1]] {
			t.Errorf("serve -h shows -%s, which is no setting or action", m[1])
		}
	}
	if len(shown) != len(flags) {
		t.Errorf("serve -h shows %d flags, want %d:\n%s", len(shown), len(flags), help.String())
	}
}

// samples are three valid values per setting (for the file, the
// environment and the flags), by the setting's type; a few settings
// whose range the type's values miss have their own.
func samples(s *setting) [3]string {
	switch s.flag {
	case "max-body-bytes", "max-response-bytes":
		return [3]string{"4KiB", "8KiB", "16KiB"}
	case "budget-bytes": // at least max-body-bytes
		return [3]string{"16MiB", "32MiB", "64MiB"}
	case "cache-bytes", "private-cache-bytes":
		return [3]string{"1MiB", "2MiB", "4MiB"}
	case "model":
		return [3]string{"a.pt", "b.pt:c.pt", "d.pt"}
	case "head-input":
		return [3]string{"h_n", "last_step", "every_step"}
	case "nonlinearity":
		return [3]string{"tanh", "relu", "tanh"}
	case "load-model":
		return [3]string{"a", "b:c", "d"}
	case "model-control-mode":
		return [3]string{"explicit", "poll", "explicit"}
	case "repository-poll-interval":
		return [3]string{"1s", "2s", "3s"}
	}
	switch s.argName() {
	case "N":
		return [3]string{"128", "256", "512"}
	case "DURATION":
		return [3]string{"10ms", "20ms", "30ms"}
	case "on|off":
		if s.defaultText() == "off" {
			return [3]string{"on", "off", "on"}
		}
		return [3]string{"off", "on", "off"}
	case "text|json":
		return [3]string{"json", "text", "json"}
	case "LEVEL":
		return [3]string{"debug", "warn", "error"}
	}
	return [3]string{"/a", "/b", "/c"}
}

// yamlDoc is a configuration file setting only key (dotted) to v,
// written as a person would: plain scalars, a list in brackets, YAML's
// true and false for on and off.
func yamlDoc(key string, v string, list bool) string {
	switch {
	case list:
		v = "[" + strings.Join(filepath.SplitList(v), ", ") + "]"
	case v == "on":
		v = "true"
	case v == "off":
		v = "false"
	}
	var b strings.Builder
	parts := strings.Split(key, ".")
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" " + v + "\n")
	return b.String()
}

// TestPrecedence sets every setting from each combination of the file,
// the environment and the flags, and checks that the flag wins over the
// environment, which wins over the file, which wins over the default.
func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	for i := range settings {
		s := &settings[i]
		if s.field == "File" {
			continue // TestConfigFileFromEnvironment
		}
		v := samples(s)
		for mask := range 8 {
			inFile, inEnv, inFlag := mask&1 != 0, mask&2 != 0, mask&4 != 0
			if inFile && s.key() == "" {
				continue
			}
			args, environ := []string{}, []string{"HOME=/nowhere", "RNNSERVE_SERVICE_HOST=10.0.0.1"}
			if s.flag == "load-model" { // named only with explicit model control
				environ = append(environ, "RNNSERVE_MODEL_CONTROL_MODE=explicit")
			}
			want := s.defaultText()
			if inFile {
				if err := os.WriteFile(file, []byte(yamlDoc(s.key(), v[0], s.list())), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "-config", file)
				want = v[0]
			}
			if inEnv {
				environ = append(environ, s.env()+"="+v[1])
				want = v[1]
			}
			if inFlag {
				if s.list() {
					for p := range strings.SplitSeq(v[2], string(filepath.ListSeparator)) {
						args = append(args, "-"+s.flag, p)
					}
				} else {
					args = append(args, "-"+s.flag, v[2])
				}
				want = v[2]
			}
			cfg, notes, err := parseConfig(args, environ, io.Discard)
			if err != nil || len(notes) > 0 {
				t.Errorf("-%s from file %v, environment %v, flag %v: %v %q", s.flag, inFile, inEnv, inFlag, err, notes)
				continue
			}
			got := s.show(&cfg)
			if mask == 0 {
				want = s.show(ptr(defaultConfig()))
			}
			if got != want {
				t.Errorf("-%s from file %v, environment %v, flag %v: %q, want %q", s.flag, inFile, inEnv, inFlag, got, want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestConfigFileFromEnvironment: RNNSERVE_CONFIG names the file, and
// -config overrides it.
func TestConfigFileFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	os.WriteFile(a, []byte("listen: 127.0.0.1:1\n"), 0o644)
	os.WriteFile(b, []byte("listen: 127.0.0.1:2\n"), 0o644)
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{nil, []string{"RNNSERVE_CONFIG=" + a}, "127.0.0.1:1"},
		{[]string{"-config", b}, []string{"RNNSERVE_CONFIG=" + a}, "127.0.0.1:2"},
		{nil, []string{"RNNSERVE_CONFIG="}, "127.0.0.1:8080"}, // empty: unset
	} {
		cfg, _, err := parseConfig(c.args, c.env, io.Discard)
		if err != nil || cfg.Listen != c.want {
			t.Errorf("%q %q: %v %s, want %s", c.args, c.env, err, cfg.Listen, c.want)
		}
	}
}

// TestConfigFileShape: the configuration file is one YAML document of at
// most maxConfigFileBytes, which may come through a pipe; an empty file is
// no setting.
func TestConfigFileShape(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// padTo is tail after a comment line, n bytes in all.
	padTo := func(n int, tail string) string { return "#" + strings.Repeat("x", n-len(tail)-2) + "\n" + tail }
	for file, want := range map[string]string{
		write("two.yaml", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n"):    "more than one YAML document",
		write("big.yaml", padTo(maxConfigFileBytes+1, "listen: 127.0.0.1:1\n")): fmt.Sprintf("more than %d bytes", maxConfigFileBytes),
	} {
		if _, _, err := parseConfig([]string{"-config", file}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), file+": "+want) {
			t.Errorf("%s: %v, want an error saying %q", filepath.Base(file), err, want)
		}
	}
	for file, want := range map[string]string{
		write("empty.yaml", ""):                                                 "127.0.0.1:8080",
		write("start.yaml", "---\nlisten: 127.0.0.1:3\n"):                       "127.0.0.1:3",
		write("limit.yaml", padTo(maxConfigFileBytes, "listen: 127.0.0.1:4\n")): "127.0.0.1:4",
	} {
		if cfg, _, err := parseConfig([]string{"-config", file}, nil, io.Discard); err != nil || cfg.Listen != want {
			t.Errorf("%s: %v %s, want %s", filepath.Base(file), err, cfg.Listen, want)
		}
	}
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.WriteString("listen: 127.0.0.1:5\n")
			f.Close()
		}
	}()
	if cfg, _, err := parseConfig([]string{"-config", fifo}, nil, io.Discard); err != nil || cfg.Listen != "127.0.0.1:5" {
		t.Errorf("through a pipe: %v %s", err, cfg.Listen)
	}
}

// TestBadSettings: a bad value is refused with an error naming where it
// came from: the variable, the flag, or the file and its key.
func TestBadSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(file, []byte("server:\n  cache_bytes: 1000\n"), 0o644)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"RNNSERVE_MAX_STEPS=abc"}, nil, `environment variable RNNSERVE_MAX_STEPS: "abc" is not an integer`},
		{[]string{"RNNSERVE_MAX_STEPS=99999999999999999999"}, nil, `environment variable RNNSERVE_MAX_STEPS: "99999999999999999999" is not an integer`},
		{[]string{"RNNSERVE_DRAIN_TIMEOUT=30"}, nil, `environment variable RNNSERVE_DRAIN_TIMEOUT: "30" is not a duration`},
		{[]string{"RNNSERVE_BATCHING_ENABLED=maybe"}, nil, `environment variable RNNSERVE_BATCHING_ENABLED: "maybe": want on or off`},
		{[]string{"RNNSERVE_MAX_BODY_BYTES=8XB"}, nil, `environment variable RNNSERVE_MAX_BODY_BYTES: "8XB" is not a size`},
		{nil, []string{"-max-body-bytes", "99999999999TiB"}, `"99999999999TiB" is too large a size`},
		{[]string{"RNNSERVE_MODEL_CONTROL_MODE=sometimes"}, nil, `environment variable RNNSERVE_MODEL_CONTROL_MODE: model control mode "sometimes": want none, explicit or poll`},
		{nil, []string{"-load-model", "a"}, "flag -load-model: models to load at start are named only with model control explicit"},
		{nil, []string{"-model", "a.pt", "-model-control-mode", "explicit"}, "flag -model and flag -model-control-mode: model control explicit loads from a repository"},
		{nil, []string{"--http_port", "http"}, `invalid value "http" for flag -http_port: "http" is not a port number`},
		{nil, []string{"-repository-poll-interval", "1ms"}, "flag -repository-poll-interval: server: invalid options: repository_poll_interval = 1ms, want 100ms..1h"},
		{[]string{"RNNSERVE_LOG_FORMAT=xml"}, nil, `environment variable RNNSERVE_LOG_FORMAT: log format "xml": want text or json`},
		{[]string{"RNNSERVE_LOG_LEVEL=loud"}, nil, `environment variable RNNSERVE_LOG_LEVEL: log level "loud": want debug, info, warn or error`},
		{[]string{"RNNSERVE_MAX_STEPS=-1"}, nil, "environment variable RNNSERVE_MAX_STEPS: server: invalid options: max_steps = -1"},
		{[]string{"RNNSERVE_CACHE_BYTES=1000"}, nil, "environment variable RNNSERVE_CACHE_BYTES: server: invalid options: cache_bytes = 1000, want a multiple of the 64-byte cache line"},
		{[]string{"RNNSERVE_SEQUENCES_IDLE_TIMEOUT=500us"}, nil, "environment variable RNNSERVE_SEQUENCES_IDLE_TIMEOUT: server: invalid options: sequences.idle_timeout = 500µs, want at least 1ms"},
		{[]string{"RNNSERVE_DRAIN_TIMEOUT=0s"}, nil, "environment variable RNNSERVE_DRAIN_TIMEOUT: drain timeout 0s: want more than 0"},
		{[]string{"RNNSERVE_READ_TIMEOUT=-1s"}, nil, "environment variable RNNSERVE_READ_TIMEOUT: read timeout -1s"},
		{[]string{"RNNSERVE_CONFIG=/nonexistent/serve.yaml"}, nil, "config file: open /nonexistent/serve.yaml"},
		{[]string{"RNNSERVE_MODEL=a.pt", "RNNSERVE_MODEL_REPOSITORY=/models"}, nil, "environment variable RNNSERVE_MODEL and environment variable RNNSERVE_MODEL_REPOSITORY: serve either single models or a repository"},
		{[]string{"RNNSERVE_MODEL=a.pt"}, []string{"-model-repository", "/models"}, "environment variable RNNSERVE_MODEL and flag -model-repository"},
		{[]string{"RNNSERVE_MODEL=a.pt"}, []string{"-models", "/models"}, "environment variable RNNSERVE_MODEL and flag -models"},
		{nil, []string{"-max-steps", "-5"}, "flag -max-steps: server: invalid options: max_steps = -5"},
		{nil, []string{"-config", file}, "config file " + file + " (server.cache_bytes): server: invalid options: cache_bytes = 1000"},
		{[]string{"RNNSERVE_HOST_CACHES=l3=32"}, nil, `environment variable RNNSERVE_HOST_CACHES: l3="32", want a size from 4K to 1024G`},
		{[]string{"RNNSERVE_HOST_CACHES=l9=1M"}, nil, `environment variable RNNSERVE_HOST_CACHES: "l9=1M", want l1d=, l2= or l3=`},
		// A good value in the environment over a bad one in the file.
		{[]string{"RNNSERVE_CACHE_BYTES=1024"}, []string{"-config", file, "-max-steps", "x"}, `invalid value "x" for flag -max-steps: "x" is not an integer`},
	} {
		_, _, err := parseConfig(c.args, c.env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %q: %v, want an error with %q", c.env, c.args, err, c.want)
		}
	}
	if cfg, _, err := parseConfig([]string{"-config", file}, []string{"RNNSERVE_CACHE_BYTES=1024"}, io.Discard); err != nil || cfg.Server.CacheBytes != 1024 {
		t.Errorf("a good variable over a bad file value: %v %d", err, cfg.Server.CacheBytes)
	}
}

// TestConfigFileBadValues: a value of the configuration file that its
// setting refuses is refused naming the key and the line, whichever
// parses it (a size, or a word such as a mode or a log level).
func TestConfigFileBadValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	for data, want := range map[string]string{
		"listen: 127.0.0.1:1\nserver:\n  model_control_mode: everyone\n": `(server.model_control_mode, line 3): model control mode "everyone": want none, explicit or poll`,
		"server: {model_control_mode: 12}\n":                             `(server.model_control_mode, line 1): model control mode "12"`,
		"log:\n  format: text\n  level: loud\n":                          `(log.level, line 3): log level "loud"`,
		"log: {format: xml}\n":                                           `(log.format, line 1): log format "xml"`,
		"\nserver:\n  max_body_bytes: 8 potatoes\n":                      `(server.max_body_bytes, line 3): "8 potatoes" is not a size`,
		"drain_timeout: 30s\nread_timeout: 1y\n":                         "(read_timeout, line 2): cannot unmarshal !!str `1y` into time.Duration",
		"server: {strict_readiness: maybe}\n":                            "(server.strict_readiness, line 1): cannot unmarshal !!str `maybe` into bool",
		"load_model: a\n":                                                "(load_model, line 1): cannot unmarshal !!str `a` into []string",
	} {
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := parseConfig([]string{"-config", file}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "config file "+file+" "+want) {
			t.Errorf("%q: %v, want an error with %q", data, err, want)
		}
	}
}

// TestUnknownVariables: an RNNSERVE_ variable that is no setting is
// noted (a misspelt name does nothing otherwise), except the ones
// Kubernetes gives pods for a Service named rnnserve.
func TestUnknownVariables(t *testing.T) {
	_, notes, err := parseConfig(nil, []string{"RNNSERVE_MAX_STEP=5", "RNNSERVE_GRPC_PORT=9001", "RNNSERVE_SERVICE_HOST=10.0.0.1", "RNNSERVE_SERVICE_PORT_HTTP=8080",
		"RNNSERVE_PORT=tcp://10.0.0.1:8080", "RNNSERVE_PORT_8080_TCP_ADDR=10.0.0.1", "RNNSERVE_PREDICTOR_SERVICE_HOST=10.0.0.2",
		"RNNSERVE_PREDICTOR_PORT_80_TCP=tcp://10.0.0.2:80", "OTHER=1", "RNNSERVE_LISTEN=127.0.0.1:3", "RNNSERVE_HOST_CACHES=l3=1024G"}, io.Discard)
	if err != nil || len(notes) != 2 || !strings.Contains(notes[0], "RNNSERVE_GRPC_PORT is not a setting") || !strings.Contains(notes[1], "RNNSERVE_MAX_STEP is not a setting") {
		t.Errorf("notes %q, %v", notes, err)
	}
}

// TestServeYAML: configs/serve.yaml, which says it holds the defaults,
// does: it decodes strictly to the default configuration, and names every
// key of the file.
func TestServeYAML(t *testing.T) {
	const path = "../../configs/serve.yaml"
	cfg := defaultConfig()
	keys, notes, err := readFile(&cfg, path)
	if err != nil || len(notes) > 0 {
		t.Fatal(err, notes)
	}
	want := defaultConfig()
	cfg.Server.EnsureDefaults()
	for i := range settings {
		s := &settings[i]
		if k := s.key(); k != "" && !keys[k] {
			t.Errorf("%s does not show %s", path, k)
		}
		if got, d := s.show(&cfg), s.show(&want); got != d {
			t.Errorf("%s sets %s to %q, but its default is %q", path, s.key(), got, d)
		}
	}
}

// TestDescribeBuild: the version and commit come from the Go build
// information, else from -ldflags, else the defaults.
func TestDescribeBuild(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}}
	for _, c := range []struct {
		info             *debug.BuildInfo
		ldVersion, ldRev string
		want             server.BuildInfo
	}{
		{vcs, "v9", "def", server.BuildInfo{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.99"}},
		{devel, "v9", "def", server.BuildInfo{Version: "v9", Commit: "def", GoVersion: "go1.99"}},
		{devel, "", "", server.BuildInfo{Version: server.Version, Commit: "unknown", GoVersion: "go1.99"}},
		{nil, "", "", server.BuildInfo{Version: server.Version, Commit: "unknown", GoVersion: runtime.Version()}},
	} {
		if got := describeBuild(c.info, c.ldVersion, c.ldRev); got != c.want {
			t.Errorf("%+v %q %q: %+v, want %+v", c.info, c.ldVersion, c.ldRev, got, c.want)
		}
	}
}

// TestSamplesDiffer keeps TestPrecedence honest: each layer's value
// differs from the one below it (the file's from the default), so a layer
// that did not apply shows.
func TestSamplesDiffer(t *testing.T) {
	for i := range settings {
		s := &settings[i]
		v := samples(s)
		if d := s.show(ptr(defaultConfig())); v[0] == d || v[1] == v[0] || v[2] == v[1] {
			t.Errorf("-%s: samples %q over the default %q", s.flag, v, d)
		}
	}
}
