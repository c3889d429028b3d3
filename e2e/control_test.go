package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	triton "github.com/sunhailin-Leo/triton-service-go/v2/nvidia_inferenceserver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestModelControl runs the server binary in each model control mode,
// with and without a bearer token and a management listener, and drives
// the model repository API over REST (plain HTTP) and gRPC (the
// third-party Triton client's generated stub): what each answers, that
// the answer to a caller without the token is the same whether the model
// exists or not, and that a failed model at start is fatal by default and
// UNAVAILABLE (the server unready) with -exit-on-error off.
func TestModelControl(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*runTimeout)
	defer cancel()
	_, dir, bin := builtServer(t)
	const spec = "cell: gru\ninput_size: 8\nhidden_size: 16\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: 3\n"
	repo := filepath.Join(dir, "models")
	writeFile(t, filepath.Join(repo, "a", "model.yaml"), spec)
	writeFile(t, filepath.Join(repo, "b", "model.yaml"), spec)
	const token = "0123456789abcdef0123456789abcdef"
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, token+"\n")

	start := func(name, readyPath string, args ...string) (rest, grpcAddr string) {
		t.Helper()
		_, rest = startOnFreePort(ctx, t, name, dir, bin, func(addr string) []string {
			grpcAddr = freeAddr(t)
			return append([]string{"-listen", addr, "-grpc-listen", grpcAddr, "-model-repository", repo}, args...)
		}, readyPath)
		return rest, grpcAddr
	}
	call := func(base, path, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+base+path, strings.NewReader("{}"))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	grpcCall := func(addr, op, model, auth string) error {
		t.Helper()
		stub := triton.NewGRPCInferenceServiceClient(dialGRPC(t, addr))
		c := ctx
		if auth != "" {
			c = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		var err error
		switch op {
		case "load":
			_, err = stub.RepositoryModelLoad(c, &triton.RepositoryModelLoadRequest{ModelName: model})
		case "unload":
			_, err = stub.RepositoryModelUnload(c, &triton.RepositoryModelUnloadRequest{ModelName: model})
		default:
			_, err = stub.RepositoryIndex(c, &triton.RepositoryIndexRequest{})
		}
		return err
	}

	t.Run("none", func(t *testing.T) {
		rest, g := start("none", "/v2/health/ready")
		for _, op := range []string{"load", "unload"} {
			if code, body := call(rest, "/v2/repository/models/a/"+op, ""); code != 403 || !strings.Contains(body, "model_control_mode") {
				t.Errorf("REST %s: %d %s", op, code, body)
			}
			if err := grpcCall(g, op, "a", ""); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "model_control_mode") {
				t.Errorf("gRPC %s: %v", op, err)
			}
		}
		if code, _ := call(rest, "/v2/repository/index", ""); code != 200 {
			t.Errorf("REST index: %d", code)
		}
		if err := grpcCall(g, "index", "", ""); err != nil {
			t.Errorf("gRPC index: %v", err)
		}
	})

	t.Run("explicit_token", func(t *testing.T) {
		rest, g := start("token", "/v2/health/ready", "-model-control-mode", "explicit", "-load-model", "a", "-management-token-file", tokenFile)
		for _, auth := range []string{"", "Bearer nope"} {
			var first string
			for _, model := range []string{"a", "zzz"} {
				code, body := call(rest, "/v2/repository/models/"+model+"/unload", auth)
				if code != 401 {
					t.Errorf("REST unload %s with %q: %d %s", model, auth, code, body)
				}
				if first == "" {
					first = body
				} else if body != first {
					t.Errorf("with %q the answers differ for a model that exists and one that does not: %s / %s", auth, first, body)
				}
				if err := grpcCall(g, "unload", model, auth); status.Code(err) != codes.Unauthenticated {
					t.Errorf("gRPC unload %s with %q: %v", model, auth, err)
				}
			}
		}
		if code, body := call(rest, "/v2/repository/models/b/load", "Bearer "+token); code != 200 {
			t.Fatalf("REST load with the token: %d %s", code, body)
		}
		if err := grpcCall(g, "unload", "a", "Bearer "+token); err != nil {
			t.Errorf("gRPC unload with the token: %v", err)
		}
		if r, err := http.Get("http://" + rest + "/v2/models/b/ready"); err != nil || r.StatusCode != 200 {
			t.Errorf("model b after the load: %v %v", r, err)
		}
		resp, err := http.Get("http://" + rest + "/v2/models/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("model a after the unload: %d", resp.StatusCode)
		}
		// An explicit unload is on purpose: the server stays ready.
		if r, err := http.Get("http://" + rest + "/v2/health/ready"); err != nil || r.StatusCode != 200 {
			t.Errorf("ready after an explicit unload: %v %v", r, err)
		}
	})

	t.Run("management_listener", func(t *testing.T) {
		mgmt := freeAddr(t)
		rest, g := start("mgmt", "/v2/health/ready", "-model-control-mode", "explicit", "-management-listen", mgmt)
		if code, body := call(rest, "/v2/repository/models/a/load", ""); code != 403 || !strings.Contains(body, "management.listen") {
			t.Errorf("REST load on the inference address: %d %s", code, body)
		}
		if err := grpcCall(g, "load", "a", ""); status.Code(err) != codes.PermissionDenied {
			t.Errorf("gRPC load: %v", err)
		}
		if code, body := call(mgmt, "/v2/repository/models/a/load", ""); code != 200 {
			t.Errorf("load on the management address: %d %s", code, body)
		}
		if code, body := call(mgmt, "/v2/repository/index", ""); code != 200 || !strings.Contains(body, `"name":"a","version":"1","state":"READY"`) {
			t.Errorf("index on the management address: %d %s", code, body)
		}
	})

	t.Run("poll", func(t *testing.T) {
		polled := filepath.Join(dir, "polled")
		writeFile(t, filepath.Join(polled, "a", "model.yaml"), spec)
		_, g := func() (string, string) {
			var rest, grpcAddr string
			_, rest = startOnFreePort(ctx, t, "poll", dir, bin, func(addr string) []string {
				grpcAddr = freeAddr(t)
				return []string{"-listen", addr, "-grpc-listen", grpcAddr, "-model-repository", polled,
					"-model-control-mode", "poll", "-repository-poll-interval", "200ms"}
			}, "/v2/health/ready")
			return rest, grpcAddr
		}()
		if err := grpcCall(g, "load", "a", ""); status.Code(err) != codes.PermissionDenied {
			t.Errorf("gRPC load in poll mode: %v", err)
		}
		stub := triton.NewGRPCInferenceServiceClient(dialGRPC(t, g))
		ready := func(name string) bool {
			r, err := stub.ModelReady(ctx, &triton.ModelReadyRequest{Name: name})
			return err == nil && r.Ready
		}
		writeFile(t, filepath.Join(polled, "c", "model.yaml"), spec)
		if err := poll(ctx, 50*time.Millisecond, func() (bool, error) { return ready("c"), nil }); err != nil {
			t.Fatalf("the new folder c never loaded: %v", err)
		}
		os.RemoveAll(filepath.Join(polled, "a"))
		if err := poll(ctx, 50*time.Millisecond, func() (bool, error) { return !ready("a"), nil }); err != nil {
			t.Fatalf("the removed folder a never unloaded: %v", err)
		}
	})

	t.Run("exit_on_error", func(t *testing.T) {
		broken := filepath.Join(dir, "broken")
		writeFile(t, filepath.Join(broken, "a", "model.yaml"), spec)
		writeFile(t, filepath.Join(broken, "bad", "model.yaml"), "cell: lstm\nhidden_size: 0\n")
		p, err := startProcess("exit", dir, bin, "-listen", "127.0.0.1:0", "-grpc-listen", "off", "-model-repository", broken, "-exit-on-error", "on")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.exited:
		case <-ctx.Done():
			p.kill()
			t.Fatal("serve did not exit on a broken model")
		}
		if p.err == nil || !strings.Contains(p.tail(), "exit_on_error is on (off, the default, starts with the models that load)") ||
			!strings.Contains(p.tail(), "event=load_failed model=bad") {
			t.Errorf("exit %v, log:\n%s", p.err, p.tail())
		}

		_, g := func() (string, string) {
			var rest, grpcAddr string
			_, rest = startOnFreePort(ctx, t, "keepgoing", dir, bin, func(addr string) []string {
				grpcAddr = freeAddr(t)
				return []string{"-listen", addr, "-grpc-listen", grpcAddr, "-model-repository", broken}
			}, "/v2/health/live")
			return rest, grpcAddr
		}()
		stub := triton.NewGRPCInferenceServiceClient(dialGRPC(t, g))
		if r, err := stub.ServerReady(ctx, &triton.ServerReadyRequest{}); err != nil || r.Ready {
			t.Errorf("ServerReady with a failed model: %v %v", r, err)
		}
		idx, err := stub.RepositoryIndex(ctx, &triton.RepositoryIndexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for _, m := range idx.Models {
			states[m.Name] = m.State + " " + m.Reason
		}
		if !strings.HasPrefix(states["a"], "READY") || !strings.HasPrefix(states["bad"], "UNAVAILABLE") || !strings.Contains(states["bad"], "invalid spec") {
			t.Errorf("index %v", states)
		}
		if _, err := stub.ModelMetadata(ctx, &triton.ModelMetadataRequest{Name: "bad"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "did not load") {
			t.Errorf("metadata of the failed model: %v", err)
		}
		_, err = stub.ModelMetadata(ctx, &triton.ModelMetadataRequest{Name: "zzz"})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "served: [a]") {
			t.Errorf("metadata of an unknown model: %v", err)
		}
	})
}
