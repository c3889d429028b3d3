package main

import (
	"strings"
	"testing"
	"time"
)

// TestOpenControlWarning: with model control explicit and no token, serve
// warns when an address that serves load and unload is one other hosts
// reach: the gRPC one too, or the management listener's.
func TestOpenControlWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	const warning = "model control is explicit with no token on an address other hosts reach"
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"-listen", "127.0.0.1:0", "-grpc-listen", "0.0.0.0:0"}, true},
		{[]string{"-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0", "-management-listen", "0.0.0.0:0"}, true},
		{[]string{"-listen", "0.0.0.0:0", "-grpc-listen", "0.0.0.0:0", "-management-listen", "127.0.0.1:0"}, false},
		{[]string{"-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0"}, false},
	} {
		srv := startServe(t, bin, nil, append([]string{"-model-control-mode", "explicit", "-cache-bytes", "1048576"}, c.args...)...)
		// The warning, when there is one, follows the serving line.
		time.Sleep(200 * time.Millisecond)
		if got := strings.Contains(srv.log.String(), warning); got != c.warn {
			t.Errorf("%q: warned %v, want %v:\n%s", c.args, got, c.warn, srv.log.String())
		}
		stopServe(t, srv)
	}
}
