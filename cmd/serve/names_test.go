package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneName: each setting has one name across flag, variable and file:
// the flag is the key (the server. section left out) with dashes for dots
// and underscores, and the variable is the flag's.
func TestOneName(t *testing.T) {
	for i := range settings {
		s := &settings[i]
		key := s.key()
		if key == "" {
			continue
		}
		want := strings.NewReplacer(".", "-", "_", "-").Replace(strings.TrimPrefix(key, "server."))
		if s.flag != want {
			t.Errorf("setting %s: flag -%s, but its key %s says -%s", s.field, s.flag, key, want)
		}
	}
}

// TestOldNames: an old spelling still sets its setting, from the flag, the
// variable or the file, with a note that names the new one; KServe's flags
// map to theirs without a note.
func TestOldNames(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(file, []byte("models: [x.pt]\n"), 0o644)
	for _, c := range []struct {
		args, env []string
		check     func(config) bool
		note      string
	}{
		{[]string{"-models", "/m"}, nil, func(c config) bool { return c.ModelRepository == "/m" }, "flag -models is deprecated: it is -model-repository now"},
		{[]string{"-repository", "/m"}, nil, func(c config) bool { return c.ModelRepository == "/m" }, "flag -repository is deprecated"},
		{nil, []string{"RNNSERVE_REPOSITORY=/m"}, func(c config) bool { return c.ModelRepository == "/m" }, "RNNSERVE_REPOSITORY is deprecated: it is RNNSERVE_MODEL_REPOSITORY now"},
		{[]string{"-grpc", "off"}, nil, func(c config) bool { return c.GRPCListen == "off" }, "flag -grpc is deprecated: it is -grpc-listen now"},
		{nil, []string{"RNNSERVE_GRPC=off"}, func(c config) bool { return c.GRPCListen == "off" }, "RNNSERVE_GRPC is deprecated"},
		{[]string{"-access-log", "off"}, nil, func(c config) bool { return !c.Log.Access }, "flag -access-log is deprecated: it is -log-access now"},
		{[]string{"-batching", "off"}, nil, func(c config) bool { return !*c.Server.Batching.Enabled }, "flag -batching is deprecated: it is -batching-enabled now"},
		{[]string{"-config", file}, nil, func(c config) bool { return len(c.Models) == 1 && c.Models[0] == "x.pt" }, "key models is deprecated: it is model now"},
		{[]string{"--model_dir=/mnt/models", "--model_name=iris", "--http_port=8085", "--grpc_port", "8086"}, nil, func(c config) bool {
			return c.ModelRepository == "/mnt/models" && c.ModelName == "iris" && c.Listen == "0.0.0.0:8085" && c.GRPCListen == "0.0.0.0:8086"
		}, ""},
		// The new name wins over the old one in the environment.
		{nil, []string{"RNNSERVE_GRPC=off", "RNNSERVE_GRPC_LISTEN=127.0.0.1:9"}, func(c config) bool { return c.GRPCListen == "127.0.0.1:9" }, "RNNSERVE_GRPC is deprecated"},
	} {
		cfg, notes, err := parseConfig(c.args, c.env, io.Discard)
		if err != nil || !c.check(cfg) {
			t.Errorf("%q %q: %v, the setting not set", c.args, c.env, err)
		}
		joined := strings.Join(notes, "\n")
		if c.note == "" && len(notes) > 0 || !strings.Contains(joined, c.note) {
			t.Errorf("%q %q: notes %q, want %q", c.args, c.env, notes, c.note)
		}
	}
	os.WriteFile(file, []byte("models: [x.pt]\nmodel: [y.pt]\n"), 0o644)
	if _, _, err := parseConfig([]string{"-config", file}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "both model and its old name models") {
		t.Errorf("both names in the file: %v", err)
	}
}

// TestSizes: sizes take units in flags, variables and the file, and are
// shown with the largest unit that divides them.
func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{
		"8388608": 8 << 20, "8MiB": 8 << 20, "8Mi": 8 << 20, "8mib": 8 << 20, "8M": 8e6, "8MB": 8e6, "512KiB": 512 << 10,
		"1GiB": 1 << 30, "2kB": 2000, "64B": 64, " 3 GiB ": 3 << 30, "0": 0,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5MiB", "8 XB", "0x10", "99999999999999999999", "9223372036854775807KiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): no error", bad)
		}
	}
	for n, want := range map[int64]string{8 << 20: "8MiB", 1 << 30: "1GiB", 1000: "1000", 0: "0", 1536: "1536", 3072: "3KiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
	file := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(file, []byte("server:\n  max_body_bytes: 4MiB\n  budget:\n    bytes: 64Mi\n  cache_bytes: 33554432\n"), 0o644)
	cfg, notes, err := parseConfig([]string{"-config", file, "-private-cache-bytes", "1MiB"}, []string{"RNNSERVE_MAX_BODY_BYTES=2MiB"}, io.Discard)
	if err != nil || len(notes) > 0 || cfg.Server.MaxBodyBytes != 2<<20 || cfg.Server.Budget.Bytes != 64<<20 ||
		cfg.Server.CacheBytes != 32<<20 || cfg.Server.PrivateCacheBytes != 1<<20 {
		t.Errorf("sizes: %v %q %+v", err, notes, cfg.Server)
	}
	os.WriteFile(file, []byte("server:\n  max_body_bytes: lots\n"), 0o644)
	if _, _, err := parseConfig([]string{"-config", file}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "(server.max_body_bytes, line 2): \"lots\" is not a size") {
		t.Errorf("a bad size in the file: %v", err)
	}
}

// TestLogDurations: durations are written as Go writes them, in JSON too
// (not as nanoseconds).
func TestLogDurations(t *testing.T) {
	for _, format := range []logFormat{"json", "text"} {
		var buf bytes.Buffer
		newLogger(&buf, logConfig{Format: format, Level: logLevel(slog.LevelInfo)}).Info("x", "lame_duck", 5*time.Second, "took", 1500*time.Microsecond)
		if !strings.Contains(buf.String(), "5s") || !strings.Contains(buf.String(), "1.5ms") {
			t.Errorf("%s: %s", format, buf.String())
		}
		if format == "json" {
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["lame_duck"] != "5s" {
				t.Errorf("json: %v %v", err, m)
			}
		}
	}
}
