package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	triton "github.com/sunhailin-Leo/triton-service-go/v2/nvidia_inferenceserver"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// debianPython is Debian's Python, which has Debian's python3-grpcio and
// python3-protobuf (a python3 first on PATH may be another).
const debianPython = "/usr/bin/python3"

// needGRPCPython skips the test when Debian's Python cannot import grpc,
// or fails it when CI is set (CI installs python3-grpcio).
func needGRPCPython(t *testing.T) {
	t.Helper()
	if err := exec.Command(debianPython, "-c", "import grpc, google.protobuf").Run(); err == nil {
		return
	}
	msg := debianPython + " cannot import grpc: install Debian's packages python3-grpcio and python3-protobuf (apt-get install -y python3-grpcio python3-protobuf)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, and CI must install them")
	}
	t.Skip(msg)
}

// countingProxy forwards TCP connections to a target and counts the bytes
// each way.
type countingProxy struct {
	ln       net.Listener
	target   string
	up, down atomic.Int64 // client to server, server to client
	conns    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			go p.forward(c)
		}
	}()
	return p
}

func (p *countingProxy) forward(c net.Conn) {
	defer p.conns.Done()
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	copyCount := func(dst, src net.Conn, n *atomic.Int64) {
		k, _ := io.Copy(dst, src)
		n.Add(k)
		dst.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}
	go copyCount(s, c, &p.up)
	go copyCount(c, s, &p.down)
	<-done
	<-done
}

// TestGRPCCompression: Python's grpcio (Debian's python3-grpcio), with
// messages built from Triton's own .proto files, calls ModelInfer,
// ModelStreamInfer and ModelConfig with no compression, gzip and deflate
// (tritonclient.grpc's compression_algorithm values) through a proxy that
// counts the bytes on the wire. Every algorithm gets the same outputs;
// with gzip or deflate both directions carry far fewer bytes than the
// messages hold, so the server inflated the requests and compressed the
// responses. The model facts are read from ModelConfig's parameters, a
// field Triton's protos carry.
func TestGRPCCompression(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server")
	}
	needGRPCPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*runTimeout)
	defer cancel()
	root, dir, bin := builtServer(t)
	var grpcAddr string
	startOnFreePort(ctx, t, "serve", dir, bin, func(addr string) []string {
		grpcAddr = freeAddr(t)
		return []string{"-listen", addr, "-grpc-listen", grpcAddr}
	}, "/v2/health/ready")

	fds := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(triton.File_model_config_proto),
		protodesc.ToFileDescriptorProto(triton.File_grpc_service_proto),
	}}
	raw, err := proto.Marshal(fds)
	if err != nil {
		t.Fatal(err)
	}
	descriptors := filepath.Join(dir, "triton.pb")
	if err := os.WriteFile(descriptors, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, grpcAddr)
	type result struct {
		Infer     string         `json:"infer_sha256"`
		Stream    string         `json:"stream_sha256"`
		Request   int64          `json:"request_bytes"`
		Response  int64          `json:"response_bytes"`
		Params    []string       `json:"config_parameters"`
		RNN       map[string]any `json:"rnn"`
		up, down  int64
		algorithm string
	}
	var results []result
	for _, algorithm := range []string{"none", "gzip", "deflate"} {
		proxy.up.Store(0)
		proxy.down.Store(0)
		cmd := exec.CommandContext(ctx, debianPython, filepath.Join(root, "e2e", "testdata", "grpc_client.py"),
			proxy.ln.Addr().String(), descriptors, algorithm, "4000", "bytelm")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("%s: %v\n%s", algorithm, err, stderr)
		}
		proxy.conns.Wait() // the client's connection has closed
		r := result{up: proxy.up.Load(), down: proxy.down.Load(), algorithm: algorithm}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v: %s", algorithm, err, out)
		}
		t.Logf("%s: request %d B, response %d B (each sent twice: ModelInfer and the stream); on the wire %d B up, %d B down",
			algorithm, r.Request, r.Response, r.up, r.down)
		results = append(results, r)
	}
	plain := results[0]
	if plain.up < 2*plain.Request || plain.down < 2*plain.Response {
		t.Errorf("uncompressed: %d B up and %d B down for two %d-byte requests and two %d-byte responses", plain.up, plain.down, plain.Request, plain.Response)
	}
	for _, r := range results[1:] {
		if r.Infer != plain.Infer || r.Stream != plain.Infer || plain.Stream != plain.Infer {
			t.Errorf("%s: outputs differ from the uncompressed call's", r.algorithm)
		}
		if r.up*4 > plain.up || r.down*2 > plain.down {
			t.Errorf("%s: %d B up, %d B down on the wire against %d and %d uncompressed: not compressed both ways",
				r.algorithm, r.up, r.down, plain.up, plain.down)
		}
	}
	if !slices.Contains(plain.Params, "rnn") || plain.RNN["cell"] != "lstm" || plain.RNN["hidden_size"] == nil {
		t.Errorf("ModelConfig parameters %v, rnn %v: want rnnserve's model facts under parameters[\"rnn\"]", plain.Params, plain.RNN)
	}
}
