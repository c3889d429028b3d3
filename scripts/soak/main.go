// Command soak holds an rnnserve server under abuse and reports how it
// held: it starts the server binary itself (so it can read the process's
// memory and its exit code), drives it with many concurrent clients and
// prints Markdown tables. scripts/soak.sh runs the measurements docs/load.md
// quotes.
//
//	go run ./scripts/soak -serve ./serve -clients 300 -duration 60s            # load
//	go run ./scripts/soak -serve ./serve -clients 64 -sigterm-after 10s        # SIGTERM under load
//
// Load: each client sends requests back to back, drawn at random (seeded)
// from a mix of infer (one sequence of bytelm tokens), generate (a short
// prompt, half of them streamed as Server-Sent Events), a stateful
// sequence (start, continue, end: three requests with one sequence_id)
// and a share (-near) of near-limit bodies: a valid infer request padded
// with JSON white space inside the object to 16 KiB under the server's
// body limit, which the server must read and hold whole. It reports
// throughput, the status of every answer and every client-side error by
// kind (connection reset, refused, EOF, timeout), p50 and p99 latency per
// kind, and the server's peak resident memory (VmHWM). A client answered
// 503 waits as its Retry-After says before its next request, as a polite
// client does (-retry-after=false sends at once).
//
// Attacks (-attack all, or a list): each attack in attack.go runs for
// -attack-for against one server process (gRPC on, bytelm and a GRU on
// 256-wide features), beside normal REST and gRPC clients, and a row
// reports what the attacker got, the server's peak resident memory during
// the attack, its resident memory three seconds after, and how the normal
// clients fared. -attack sigterm-streams sends SIGTERM with
// ModelStreamInfer streams kept open and reports how they end, how long
// the process takes to exit and its exit code.
//
//	go run ./scripts/soak -serve ./serve -attack all -attack-for 15s
//	go run ./scripts/soak -serve ./serve -attack sigterm-streams
//
// SIGTERM: after -sigterm-after the process gets SIGTERM while the clients
// keep sending. A poller watches readiness. Every request is classed by
// when it was sent: before SIGTERM plus the lame-duck period (-lame-duck,
// the server's setting), which must all succeed, or after (these may meet
// a closed listener: refused connections are expected then). It reports
// the client-side errors of each class, the streams that ended with an
// error line, the time readiness turned 503 and the exit code.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type config struct {
	serve      string
	args       []string
	addr       string
	clients    int
	duration   time.Duration
	near       float64
	limit      int
	sigterm    time.Duration
	lameDuck   time.Duration
	seed       uint64
	timeout    time.Duration
	label      string
	header     bool
	serveLog   string
	retryAfter bool
	attacks    string        // attack mode: the attacks to run, "all", or sigterm-streams
	attackFor  time.Duration // how long each attack runs
	grpcAddr   string
	models     string // the bundled models' folder
	maxRSS     int64  // kill serve past this resident memory, MiB
}

func run() error {
	var c config
	var extra string
	flag.StringVar(&c.serve, "serve", "", "the serve binary to run (required)")
	flag.StringVar(&extra, "args", "", "more arguments for serve, space-separated (e.g. -config x.yaml)")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:18480", "address serve listens on")
	flag.IntVar(&c.clients, "clients", 300, "concurrent clients")
	flag.DurationVar(&c.duration, "duration", 60*time.Second, "how long the clients send (load); with -sigterm-after, the longest the run may take")
	flag.Float64Var(&c.near, "near", 0.1, "share of requests that are near-limit bodies")
	flag.IntVar(&c.limit, "limit", 8<<20, "the server's body limit (max_body_bytes)")
	flag.DurationVar(&c.sigterm, "sigterm-after", 0, "send SIGTERM this long into the run and report the shutdown (0: a load run)")
	flag.DurationVar(&c.lameDuck, "lame-duck", 5*time.Second, "the server's lame-duck period, to class requests by when they were sent")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed of the request mix")
	flag.DurationVar(&c.timeout, "timeout", 120*time.Second, "client timeout per request")
	flag.StringVar(&c.label, "label", "", "first column of the table")
	flag.BoolVar(&c.header, "header", true, "print the table header")
	flag.StringVar(&c.serveLog, "serve-log", "", "write serve's log here (default: discard; printed on failure)")
	flag.BoolVar(&c.retryAfter, "retry-after", true, "after a 503, wait as its Retry-After says before the next request (false: send at once)")
	flag.StringVar(&c.attacks, "attack", "", "run attacks instead of a load: a comma-separated list of names, all, or sigterm-streams (attack.go lists them)")
	flag.DurationVar(&c.attackFor, "attack-for", 15*time.Second, "how long each attack runs")
	flag.StringVar(&c.grpcAddr, "grpc-addr", "127.0.0.1:18481", "address serve's gRPC listens on, in attack mode")
	flag.StringVar(&c.models, "models", "models/bundled", "the bundled models' folder (attack mode serves bytelm from it)")
	flag.Int64Var(&c.maxRSS, "max-rss", 6144, "kill serve if its resident memory passes this many MiB (protects a shared machine from a server without bounds); 0: never")
	flag.Parse()
	if c.serve == "" {
		return errors.New("-serve is required")
	}
	if extra != "" {
		c.args = strings.Fields(extra)
	}
	if c.clients < 1 || c.near < 0 || c.near > 1 {
		return errors.New("-clients must be positive and -near in 0..1")
	}
	switch c.attacks {
	case "":
	case "sigterm-streams":
		return sigtermStreams(c)
	default:
		return attackRun(c)
	}
	srv, err := startServe(c)
	if err != nil {
		return err
	}
	defer srv.kill()
	base := "http://" + c.addr
	if c.sigterm > 0 {
		return sigtermRun(c, srv, base)
	}
	return loadRun(c, srv, base)
}

// serveProc is the server process under test.
type serveProc struct {
	cmd    *exec.Cmd
	log    *bytes.Buffer
	exited chan struct{}
	err    error // Wait's error, once exited is closed
	mu     sync.Mutex
	rss    int64 // highest VmRSS sampled, bytes
	maxRSS int64 // kill the process past this resident memory (0: never)
	killed bool  // killed for its memory
}

func startServe(c config) (*serveProc, error) {
	args := append([]string{"-listen", c.addr}, c.args...)
	cmd := exec.Command(c.serve, args...)
	p := &serveProc{cmd: cmd, log: &bytes.Buffer{}, exited: make(chan struct{})}
	var w io.Writer = &lockedWriter{w: p.log}
	if c.serveLog != "" {
		f, err := os.Create(c.serveLog)
		if err != nil {
			return nil, err
		}
		w = io.MultiWriter(w, f)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + c.addr + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("serve exited before it was ready: %v\n%s", p.err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("serve not ready after 60s\n%s", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.maxRSS = c.maxRSS << 20
	go p.sample()
	return p, nil
}

func (p *serveProc) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// sample records the process's resident memory every 50 ms.
func (p *serveProc) sample() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
			if v, ok := procStatus(p.cmd.Process.Pid, "VmRSS"); ok {
				p.mu.Lock()
				p.rss = max(p.rss, v)
				if p.maxRSS > 0 && v > p.maxRSS && !p.killed {
					p.killed = true
					p.cmd.Process.Kill()
					fmt.Fprintf(os.Stderr, "serve killed: resident memory %d MiB, over -max-rss\n", v>>20)
				}
				p.mu.Unlock()
			}
		}
	}
}

// peak is the process's resident high-water mark (VmHWM, exact), or the
// highest sample when the kernel does not report it.
func (p *serveProc) peak() int64 {
	if v, ok := procStatus(p.cmd.Process.Pid, "VmHWM"); ok {
		return v
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rss
}

// procStatus reads a kB field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err == nil
			}
		}
	}
	return 0, false
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// kinds of requests in the mix.
const (
	kindInfer    = "infer"
	kindGenerate = "generate"
	kindStream   = "generate_stream"
	kindSequence = "sequence"
	kindNear     = "near-limit"
)

var kinds = []string{kindInfer, kindGenerate, kindStream, kindSequence, kindNear}

// result is one request's outcome.
type result struct {
	kind    string
	sent    time.Time
	took    time.Duration
	status  int    // 0 when the request failed on the client's side
	errKind string // connection reset, refused, EOF, timeout, other
	// streamErr is set when a stream ended with an error line.
	streamErr bool
	// retryAfter is the Retry-After of a 503, 0 otherwise.
	retryAfter time.Duration
}

// mix draws requests.
type mix struct {
	base string
	near []byte
	p    float64
}

func newMix(base string, limit int, near float64) *mix {
	return &mix{base: base, near: nearLimitBody(limit - 16<<10), p: near}
}

// nearLimitBody is a valid bytelm infer request of size bytes: 64 tokens
// and JSON white space inside the object.
func nearLimitBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 64], "data": [`)
	for i := range 64 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(32 + i))
	}
	b.WriteString(`]}], "outputs": [{"name": "top_k", "parameters": {"k": 1, "last_step": true}}]`)
	for b.Len() < size-1 {
		b.WriteString("                                                               \n")
	}
	b.Truncate(size - 1)
	b.WriteByte('}')
	return b.Bytes()
}

// do sends one request of a kind drawn from rng and returns its results
// (a sequence is three).
func (m *mix) do(ctx context.Context, hc *http.Client, rng *rand.Rand, client int, n int) []result {
	var kind string
	switch x := rng.Float64(); {
	case x < m.p:
		kind = kindNear
	default:
		kind = kinds[rng.IntN(4)]
	}
	tokens := func(k int) string {
		parts := make([]string, k)
		for i := range parts {
			parts[i] = strconv.Itoa(32 + rng.IntN(90))
		}
		return strings.Join(parts, ",")
	}
	switch kind {
	case kindNear:
		return []result{m.post(ctx, hc, kind, "/v2/models/bytelm/infer", m.near, false)}
	case kindInfer:
		body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 32], "data": [%s]}], "outputs": [{"name": "top_k", "parameters": {"k": 3, "last_step": true}}]}`, tokens(32))
		return []result{m.post(ctx, hc, kind, "/v2/models/bytelm/infer", []byte(body), false)}
	case kindGenerate:
		body := fmt.Sprintf(`{"text_input": "The quick brown fox %d", "parameters": {"max_tokens": 16, "seed": %d}}`, n, n)
		return []result{m.post(ctx, hc, kind, "/v2/models/bytelm/generate", []byte(body), false)}
	case kindStream:
		body := fmt.Sprintf(`{"text_input": "Once upon a time %d", "parameters": {"max_tokens": 32, "temperature": 0.8, "seed": %d}}`, n, n)
		return []result{m.post(ctx, hc, kind, "/v2/models/bytelm/generate_stream", []byte(body), true)}
	default:
		id := fmt.Sprintf("soak-%d-%d", client, n)
		var out []result
		for _, ctl := range []string{`"sequence_start": true`, ``, `"sequence_end": true`} {
			params := fmt.Sprintf(`"sequence_id": %q`, id)
			if ctl != "" {
				params += ", " + ctl
			}
			body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 8], "data": [%s]}], "outputs": [{"name": "top_k", "parameters": {"k": 1, "last_step": true}}], "parameters": {%s}}`, tokens(8), params)
			r := m.post(ctx, hc, kind, "/v2/models/bytelm/infer", []byte(body), false)
			out = append(out, r)
			if r.status != http.StatusOK {
				break // the rest of the sequence would fail too
			}
		}
		return out
	}
}

// post sends one request and reads the whole answer.
func (m *mix) post(ctx context.Context, hc *http.Client, kind, path string, body []byte, stream bool) result {
	r := result{kind: kind, sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.base+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		r.took, r.errKind = time.Since(r.sent), classify(err)
		return r
	}
	defer resp.Body.Close()
	if stream && resp.StatusCode == http.StatusOK {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.HasPrefix(line, `{"error"`) {
				r.streamErr = true
			}
		}
		err = sc.Err()
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	r.took = time.Since(r.sent)
	if err != nil {
		r.errKind = "body: " + classify(err)
		return r
	}
	r.status = resp.StatusCode
	if sec, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		r.retryAfter = time.Duration(sec) * time.Second
	}
	return r
}

// classify names a client-side error.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other: " + err.Error()
}

// drive runs the clients until ctx ends and returns every result.
func drive(ctx context.Context, c config, m *mix) []result {
	tr := &http.Transport{MaxIdleConns: c.clients, MaxIdleConnsPerHost: c.clients, MaxConnsPerHost: 0,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: c.timeout}
	var mu sync.Mutex
	var all []result
	var wg sync.WaitGroup
	for i := range c.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(c.seed, uint64(i)))
			var mine []result
			for n := 0; ctx.Err() == nil; n++ {
				res := m.do(context.Background(), hc, rng, i, n)
				mine = append(mine, res...)
				if last := res[len(res)-1]; c.retryAfter && last.retryAfter > 0 {
					select { // a polite client waits as told
					case <-time.After(last.retryAfter):
					case <-ctx.Done():
					}
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

func loadRun(c config, srv *serveProc, base string) error {
	m := newMix(base, c.limit, c.near)
	load0 := loadavg()
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	start := time.Now()
	res := drive(ctx, c, m)
	cancel()
	elapsed := time.Since(start)
	peak := srv.peak()
	refused := metric(base, "rnnserve_request_budget_refused_total")
	load1 := loadavg()
	if c.header {
		fmt.Println("| run | clients | requests/s | statuses | client errors | p50 / p99 (ms) by kind | peak RSS | budget refusals |")
		fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	}
	fmt.Printf("| %s | %d | %.0f | %s | %s | %s | %.0f MiB | %s |\n", c.label, c.clients, float64(len(res))/elapsed.Seconds(),
		statuses(res, nil), clientErrors(res, nil), latencies(res), float64(peak)/(1<<20), refused)
	fmt.Fprintf(os.Stderr, "loadavg before %s, after %s; %d requests in %v\n", load0, load1, len(res), elapsed.Round(time.Millisecond))
	return nil
}

func sigtermRun(c config, srv *serveProc, base string) error {
	m := newMix(base, c.limit, c.near)
	load0 := loadavg()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readyAt time.Time // when readiness first answered 503
	pollDone := make(chan struct{})
	sig := make(chan time.Time, 1)
	go func() {
		defer close(pollDone)
		hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		t0 := <-sig
		for time.Since(t0) < 10*time.Second {
			resp, err := hc.Get(base + "/v2/health/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					readyAt = time.Now()
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var sentSig time.Time
	go func() {
		time.Sleep(c.sigterm)
		sentSig = time.Now()
		sig <- sentSig
		srv.cmd.Process.Signal(syscall.SIGTERM)
		<-srv.exited
		time.Sleep(200 * time.Millisecond) // the clients see the listener gone
		cancel()
	}()
	go func() {
		select {
		case <-time.After(c.duration):
			cancel()
		case <-ctx.Done():
		}
	}()
	res := drive(ctx, c, m)
	<-pollDone
	select {
	case <-srv.exited:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("serve still running after the run\n%s", srv.log)
	}
	code := 0
	if srv.err != nil {
		var ee *exec.ExitError
		if !errors.As(srv.err, &ee) {
			return srv.err
		}
		code = ee.ExitCode()
	}
	if sentSig.IsZero() {
		return errors.New("the run ended before SIGTERM")
	}
	cutoff := sentSig.Add(c.lameDuck)
	before := func(r result) bool { return r.sent.Before(cutoff) }
	after := func(r result) bool { return !r.sent.Before(cutoff) }
	var streamErrs int
	for _, r := range res {
		if r.streamErr {
			streamErrs++
		}
	}
	ready := "never seen"
	if !readyAt.IsZero() {
		ready = fmt.Sprintf("%.1f ms after SIGTERM", float64(readyAt.Sub(sentSig).Microseconds())/1000)
	}
	if c.header {
		fmt.Println("| run | clients | requests sent before SIGTERM + lame duck | their client errors | statuses | sent after | their client errors | streams ended by an error line | readiness 503 | exit code |")
		fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	}
	fmt.Printf("| %s | %d | %d | %s | %s | %d | %s | %d | %s | %d |\n", c.label, c.clients, count(res, before), clientErrors(res, before),
		statuses(res, before), count(res, after), clientErrors(res, after), streamErrs, ready, code)
	for _, r := range res {
		if r.errKind != "" && before(r) {
			fmt.Fprintf(os.Stderr, "client error on a request sent %.1f ms after SIGTERM (%.1f ms before the cutoff): %s %s, after %.1f ms\n",
				ms(r.sent.Sub(sentSig)), ms(cutoff.Sub(r.sent)), r.kind, r.errKind, ms(r.took))
		}
	}
	fmt.Fprintf(os.Stderr, "loadavg before %s, after %s\n", load0, loadavg())
	if lines := shutdownLog(srv.log.String()); lines != "" {
		fmt.Fprintf(os.Stderr, "serve's shutdown log:\n%s", lines)
	}
	return nil
}

// shutdownLog picks serve's log lines from the signal on.
func shutdownLog(log string) string {
	i := strings.Index(log, "lame duck")
	if i < 0 {
		i = strings.Index(log, "shutting down")
	}
	if i < 0 {
		return ""
	}
	if j := strings.LastIndexByte(log[:i], '\n'); j >= 0 {
		i = j + 1
	}
	return log[i:]
}

func count(res []result, keep func(result) bool) int {
	n := 0
	for _, r := range res {
		if keep == nil || keep(r) {
			n++
		}
	}
	return n
}

// statuses is "200: n, 503: m" over the results keep selects.
func statuses(res []result, keep func(result) bool) string {
	by := map[int]int{}
	for _, r := range res {
		if r.status != 0 && (keep == nil || keep(r)) {
			by[r.status]++
		}
	}
	codes := make([]int, 0, len(by))
	for code := range by {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	var parts []string
	for _, code := range codes {
		parts = append(parts, fmt.Sprintf("%d: %d", code, by[code]))
	}
	return strings.Join(parts, ", ")
}

// clientErrors is "0" or "connection reset: n, ..." over the results.
func clientErrors(res []result, keep func(result) bool) string {
	by := map[string]int{}
	for _, r := range res {
		if r.errKind != "" && (keep == nil || keep(r)) {
			by[r.errKind]++
		}
	}
	if len(by) == 0 {
		return "0"
	}
	var parts []string
	for k, n := range by {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// latencies is "kind p50/p99" for each kind, over answered requests.
func latencies(res []result) string {
	var parts []string
	for _, k := range kinds {
		var d []time.Duration
		for _, r := range res {
			if r.kind == k && r.status != 0 {
				d = append(d, r.took)
			}
		}
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
		parts = append(parts, fmt.Sprintf("%s %.1f / %.0f", k, ms(0.5), ms(0.99)))
	}
	return strings.Join(parts, "; ")
}

// metric reads one unlabelled series from the server's /metrics.
func metric(base, name string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return "?"
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}
