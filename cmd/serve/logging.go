package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
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

// logWriter is serve's log on stderr. The access log's lines (Access)
// are buffered and written in batches: at most accessFlush after the
// first one waiting, as soon as accessBuffer bytes wait, before any other
// log line, and when serve stops (Close). Every other line is written at
// once, after the access lines before it, so the log keeps its order. A
// line per request would otherwise be a write system call per request,
// which at thousands of requests a second is a measurable share of the
// server's CPU (docs/load.md).
type logWriter struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	timer  *time.Timer // writes buf out accessFlush after its first line
	closed bool        // Close was called: lines go out at once
}

const (
	accessFlush  = 100 * time.Millisecond
	accessBuffer = 32 << 10
)

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w}
	l.timer = time.AfterFunc(time.Hour, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.flush()
	})
	l.timer.Stop()
	return l
}

// Write writes p, a log line, at once, after the access lines waiting.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.flush(); err != nil {
		return 0, err
	}
	return l.w.Write(p)
}

// Access is the writer of the access log: its lines wait in the buffer.
func (l *logWriter) Access() io.Writer { return accessWriter{l} }

type accessWriter struct{ l *logWriter }

func (a accessWriter) Write(p []byte) (int, error) {
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.w.Write(p)
	}
	if len(l.buf) == 0 {
		l.timer.Reset(accessFlush)
	}
	l.buf = append(l.buf, p...)
	if len(l.buf) >= accessBuffer {
		if err := l.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush writes the waiting lines; called with mu held.
func (l *logWriter) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}

// Close writes the waiting lines; lines written after it go out at once.
func (l *logWriter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer.Stop()
	l.closed = true
	return l.flush()
}
