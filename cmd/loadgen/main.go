// Command loadgen drives an rnnserve server with concurrent clients and
// reports throughput and latency, beside the engine's own time for the same
// work measured in-process on the same model.
//
//	go run ./cmd/loadgen -url http://127.0.0.1:8080 -model bytelm -clients 1,8,64 -steps 32
//
// Each client sends infer requests of one sequence of -steps random tokens
// back to back for -duration, asking only for the final hidden state.
// With -repo (a model repository directory, or "bundled") it also times
// the same request's plan in-process, with no HTTP, to show what the server
// adds, and the HTTP floor: the median round trip of the cheapest request
// there is (GET /v2/health/live) on the same machine, which no server can
// go below. Output is one Markdown table row per client count.
//
// With -server-pid PID (Linux) each row also gives the server's CPU time
// per successful request: the user and system time of that process, every
// thread, from /proc/PID/stat read just before the clients start and just
// after the last one's request returns, so the floor's requests and the
// setup are outside it. The load generator shares the cores, so its own
// CPU time counts against the server's throughput but not there: the next
// column gives it, the load generator's own user and system time over the
// same window per successful request.
//
// With -grpc ADDR the requests go to the server's gRPC API instead
// (ModelInfer, typed INT64 input, the output as raw_output_contents, each
// client on a connection of its own) and the floor is the round trip of
// ServerLive; -url still reads the model's metadata. With -binary the REST
// requests ask for the output as binary tensor data instead of JSON.
//
// Any server that speaks the same REST calls can be driven (the serving
// peers of scripts/loadtest_peers.sh): one whose model metadata has no
// rnnserve "rnn" section shows "-" as its schedule.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
	"rnnserve/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("url", "http://127.0.0.1:8080", "server address")
	model := flag.String("model", "bytelm", "model name")
	clients := flag.String("clients", "1,8,64", "comma-separated client counts")
	steps := flag.Int("steps", 32, "tokens per request")
	vocab := flag.Int("vocab", 256, "token ids are drawn from [0, vocab)")
	dur := flag.Duration("duration", 5*time.Second, "how long each client count runs")
	repo := flag.String("repo", "", `model repository for the in-process engine time ("bundled" for the embedded one; empty: skip)`)
	label := flag.String("label", "", "a label for the table's first column (e.g. batching on)")
	header := flag.Bool("header", true, "print the table header")
	grpcAddr := flag.String("grpc", "", "send the requests over gRPC to this address (default: REST at -url)")
	binaryOut := flag.Bool("binary", false, "REST: ask for the output as binary tensor data")
	serverPID := flag.Int("server-pid", 0, "the server's process id: report its CPU time per request (Linux /proc; 0: not reported)")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return fmt.Errorf("-clients: bad count %q", f)
		}
		counts = append(counts, n)
	}
	if *steps < 1 || *vocab < 1 || *dur <= 0 {
		return errors.New("-steps, -vocab and -duration must be positive")
	}
	var tick time.Duration
	if *serverPID != 0 {
		var err error
		if tick, err = clockTick(); err != nil {
			return err
		}
		if _, err := procCPU("/", *serverPID, tick); err != nil {
			return fmt.Errorf("-server-pid: %w", err)
		}
	}
	engine := "-"
	sched, workers, err := servedSchedule(*url, *model)
	if err != nil {
		return err
	}
	if workers > 1 {
		sched = fmt.Sprintf("%s (%d cores)", sched, workers)
	}
	if *repo != "" {
		if sched == "-" {
			return fmt.Errorf("-repo: %s/v2/models/%s has no rnn.schedule in its metadata: not an rnnserve server", *url, *model)
		}
		d, err := engineTime(*repo, *model, sched, workers, *steps, *vocab)
		if err != nil {
			return err
		}
		engine = fmt.Sprintf("%.0f", float64(d.Microseconds()))
	}
	var fl time.Duration
	if *grpcAddr != "" {
		fl, err = grpcFloor(*grpcAddr, min(*dur, 2*time.Second))
	} else {
		fl, err = httpFloor(*url, min(*dur, 2*time.Second))
	}
	if err != nil {
		return err
	}
	if *header {
		cols, align := "", ""
		if *serverPID != 0 {
			cols, align = " server CPU µs/request | loadgen CPU µs/request |", " ---: | ---: |"
		}
		fmt.Println("| setup | model | plan schedule | clients | requests/s | tokens/s | p50 µs | p90 µs | p99 µs | engine µs | floor µs | p50 - engine - floor µs | errors |" + cols)
		fmt.Println("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + align)
	}
	for _, c := range counts {
		var r *result
		var cpu0, self0 time.Duration
		if *serverPID != 0 {
			if cpu0, err = procCPU("/", *serverPID, tick); err != nil {
				return fmt.Errorf("-server-pid: %w", err)
			}
			if self0, err = procCPU("/", os.Getpid(), tick); err != nil {
				return err
			}
		}
		if *grpcAddr != "" {
			r, err = driveGRPC(*grpcAddr, *model, c, *steps, *vocab, *dur)
			if err != nil {
				return err
			}
		} else {
			if r, err = driveHTTP(*url, *model, c, *steps, *vocab, *dur, *binaryOut); err != nil {
				return err
			}
		}
		cpu := ""
		if *serverPID != 0 {
			cpu1, err := procCPU("/", *serverPID, tick)
			if err != nil {
				return fmt.Errorf("-server-pid: %w", err)
			}
			self1, err := procCPU("/", os.Getpid(), tick)
			if err != nil {
				return err
			}
			cpu = " " + perRequest(cpu1-cpu0, len(r.lat)) + " | " + perRequest(self1-self0, len(r.lat)) + " |"
		}
		if r.first != nil {
			fmt.Fprintf(os.Stderr, "loadgen: %d clients: %d errors, the first: %v\n", c, r.errors, r.first)
		}
		p50 := r.pct(0.5)
		over := "-"
		if engine != "-" {
			e, _ := strconv.ParseFloat(engine, 64)
			over = fmt.Sprintf("%.0f", float64(p50.Microseconds()-fl.Microseconds())-e)
		}
		fmt.Printf("| %s | %s | %s | %d | %.1f | %.0f | %d | %d | %d | %s | %d | %s | %d |%s\n", *label, *model, sched, c,
			r.rate(), r.rate()*float64(*steps), p50.Microseconds(), r.pct(0.9).Microseconds(), r.pct(0.99).Microseconds(), engine, fl.Microseconds(), over, r.errors, cpu)
	}
	return nil
}

// perRequest is CPU time cpu spread over n successful requests, in µs
// ("-" when none succeeded).
func perRequest(cpu time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(cpu.Nanoseconds())/1e3/float64(n))
}

// httpFloor is the median time of GET /v2/health/live, one client, back to
// back for d: the round trip every request pays (loopback, wake-ups, HTTP
// parsing) before the server does any work.
func httpFloor(url string, d time.Duration) (time.Duration, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end) || len(lat) < 5; {
		t0 := time.Now()
		resp, err := client.Get(url + "/v2/health/live")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET /v2/health/live: %s", resp.Status)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}

type result struct {
	lat     []time.Duration
	errors  int
	first   error // the first error, for the log
	elapsed time.Duration
}

func (r *result) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

func (r *result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// drive runs n clients for d and collects every successful request's
// latency; each client sends with the function newClient gives it.
func drive(n int, d time.Duration, newClient func(i int) func(ctx context.Context) error) *result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	res := &result{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		send := newClient(i)
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				err := send(ctx)
				lat := time.Since(t0)
				mu.Lock()
				if err == nil {
					res.lat = append(res.lat, lat)
				} else if ctx.Err() == nil {
					res.errors++
					if res.first == nil {
						res.first = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.lat)
	return res
}

// driveHTTP drives the REST API with n clients for d, each on a
// connection of its own (conn).
func driveHTTP(base, model string, n, steps, vocab int, d time.Duration, binaryOut bool) (*result, error) {
	if _, _, err := newConn(base, time.Minute); err != nil {
		return nil, err
	}
	return drive(n, d, func(i int) func(context.Context) error {
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		c, host, _ := newConn(base, time.Minute)
		path := "/v2/models/" + model + "/infer"
		return func(ctx context.Context) error {
			if ctx.Err() != nil {
				c.close()
				return ctx.Err()
			}
			status, msg, err := c.do(postRequest(host, path, requestBody(rng, steps, vocab, binaryOut)))
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return statusError(status, msg)
			}
			return nil
		}
	}), nil
}

// requestBody is a REST infer request of one sequence of random tokens
// asking for the final hidden state, as JSON or binary tensor data.
func requestBody(rng *rand.Rand, steps, vocab int, binaryOut bool) []byte {
	data, _ := json.Marshal(randomTokens(rng, steps, vocab))
	return []byte(fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": %s}], "outputs": [{"name": "hidden", "parameters": {"binary_data": %v}}]}`, steps, data, binaryOut))
}

func randomTokens(rng *rand.Rand, steps, vocab int) []int64 {
	ids := make([]int64, steps)
	for i := range ids {
		ids[i] = rng.Int64N(int64(vocab))
	}
	return ids
}

// servedSchedule is the schedule the server runs a lone request's
// whole-request plan with, and on how many cores, from its metadata.
func servedSchedule(url, model string) (string, int, error) {
	resp, err := http.Get(url + "/v2/models/" + model)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var meta struct {
		RNN struct {
			Schedule  string `json:"schedule"`
			WideCores int    `json:"wide_cores"`
			Traffic   []struct {
				Schedule string `json:"schedule"`
				Workers  int    `json:"workers"`
			} `json:"traffic"`
		} `json:"rnn"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("GET /v2/models/%s: %s", model, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return "", 0, fmt.Errorf("GET /v2/models/%s: %w", model, err)
	}
	if meta.RNN.Schedule == "" {
		// Not rnnserve (a peer serving the same model): no schedule to show.
		return "-", 1, nil
	}
	workers := 1
	for _, t := range meta.RNN.Traffic {
		if t.Schedule == meta.RNN.Schedule {
			workers = max(t.Workers, 1)
		}
	}
	// A lone request (the engine column's case) runs across every core
	// when the model has a wide form.
	workers = max(workers, meta.RNN.WideCores)
	return meta.RNN.Schedule, workers, nil
}

// engineTime is the median in-process time of the plan a one-sequence
// request runs under the schedule the server uses (no HTTP, no JSON).
func engineTime(repo, model, sched string, workers, steps, vocab int) (time.Duration, error) {
	var fsys fs.FS = bundled.FS
	if repo != "bundled" {
		fsys = os.DirFS(repo)
	}
	entries, err := server.LoadRepository(fsys)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name != model {
			continue
		}
		pools := server.Pools{}
		if workers > 1 {
			pool, err := schedule.NewPool(schedule.PoolOptions{Workers: workers})
			if err != nil {
				return 0, err
			}
			defer pool.Close()
			pools[workers] = pool
		}
		prog, err := server.ProgramFor(e.Model.Net, strings.Fields(sched)[0], workers, pools)
		if err != nil {
			return 0, err
		}
		rng := rand.New(rand.NewPCG(1, 1))
		var times []time.Duration
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) || len(times) < 5; {
			ids := make([]int64, steps)
			for i := range ids {
				ids[i] = rng.Int64N(int64(vocab))
			}
			t0 := time.Now()
			p, err := prog.Plan(schedule.Input{T: steps, B: 1, Tokens: ids}, schedule.PlanOptions{})
			if err != nil {
				return 0, err
			}
			if _, err := p.Run(); err != nil {
				return 0, err
			}
			times = append(times, time.Since(t0))
		}
		slices.Sort(times)
		return times[len(times)/2], nil
	}
	return 0, fmt.Errorf("model %q not in %s", model, repo)
}
