package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logConfig configures serve's log (on stderr).
type logConfig struct {
	Format logFormat `yaml:"format"`
	Level  logLevel  `yaml:"level"`
	// Access logs a line per request (server.AccessLog).
	Access bool `yaml:"access"`
	// AccessProbes logs health probes too.
	AccessProbes bool `yaml:"access_probes"`
}

// logFormat is text (slog's key=value lines) or json (one JSON object a
// line).
type logFormat string

func (f *logFormat) UnmarshalText(b []byte) error {
	switch s := string(b); s {
	case "text", "json":
		*f = logFormat(s)
		return nil
	default:
		return fmt.Errorf("log format %q: want text or json", s)
	}
}

// logLevel is the least level logged, by name: debug, info, warn or
// error.
type logLevel slog.Level

func (l *logLevel) UnmarshalText(b []byte) error {
	for _, v := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if strings.EqualFold(string(b), v.String()) {
			*l = logLevel(v)
			return nil
		}
	}
	return fmt.Errorf("log level %q: want debug, info, warn or error", b)
}

func (l logLevel) String() string { return strings.ToLower(slog.Level(l).String()) }

// newLogger is the logger c describes, writing to w.
// Durations are written as Go writes them (1.5s, 300ms) in both formats;
// slog's JSON handler would write nanoseconds.
func newLogger(w io.Writer, c logConfig) *slog.Logger {
	o := &slog.HandlerOptions{Level: slog.Level(c.Level), ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
