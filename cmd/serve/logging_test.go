package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingBuffer is a bytes.Buffer safe for the flush timer's goroutine, that
// counts the writes it gets.
type countingBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *countingBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *countingBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *countingBuffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// TestLogWriterKeepsEveryLine: access lines from many goroutines at once,
// other lines among them; after Close every line is there once and
// whole, in far fewer writes than lines, and each other line comes after
// the access lines its goroutine wrote before it.
func TestLogWriterKeepsEveryLine(t *testing.T) {
	var out countingBuffer
	l := newLogWriter(&out)
	access := l.Access()
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(access, "access g=%d i=%d %s\n", g, i, strings.Repeat("x", 100))
				if i%100 == 99 {
					fmt.Fprintf(l, "other g=%d after=%d\n", g, i)
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for n, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if _, dup := pos[line]; dup {
			t.Fatalf("line %q twice", line)
		}
		pos[line] = n
	}
	for g := range writers {
		for i := range lines {
			a := fmt.Sprintf("access g=%d i=%d %s", g, i, strings.Repeat("x", 100))
			if _, ok := pos[a]; !ok {
				t.Fatalf("access line g=%d i=%d lost", g, i)
			}
			if i%100 == 99 {
				o, ok := pos[fmt.Sprintf("other g=%d after=%d", g, i)]
				if !ok {
					t.Fatalf("other line g=%d after=%d lost", g, i)
				}
				if o < pos[a] {
					t.Errorf("other line g=%d after=%d came before the access line it followed", g, i)
				}
			}
		}
	}
	if total := writers * (lines + lines/100); out.Writes() > total/4 {
		t.Errorf("%d lines in %d writes: not batched", total, out.Writes())
	}
	// After Close, a line goes out at once.
	fmt.Fprintln(access, "late")
	if !strings.HasSuffix(out.String(), "late\n") {
		t.Error("an access line after Close waited")
	}
}

// TestLogWriterFlushes: a lone access line waits no longer than
// accessFlush (with slack for a loaded machine), and a full buffer goes
// out without waiting.
func TestLogWriterFlushes(t *testing.T) {
	var out countingBuffer
	l := newLogWriter(&out)
	defer l.Close()
	start := time.Now()
	fmt.Fprintln(l.Access(), "lone")
	for !strings.Contains(out.String(), "lone") {
		if time.Since(start) > 5*time.Second {
			t.Fatal("a lone access line was not written within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d < accessFlush/2 {
		t.Errorf("a lone access line went out after %v: not batched", d)
	}
	before := out.Writes()
	line := strings.Repeat("y", 1000) + "\n"
	for range accessBuffer/len(line) + 1 {
		l.Access().Write([]byte(line))
	}
	if out.Writes() == before {
		t.Errorf("%d bytes of access lines waiting, none written", accessBuffer)
	}
}
