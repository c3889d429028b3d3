package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestManyHeaderFieldsRefused: a request head of thousands of tiny
// fields (within serve's 64 KiB header limit, each "xNNNN:" line a map
// entry, some 15 times its bytes once net/http has parsed them: about a
// megabyte) is refused at once with 431 and its connection closed, not
// held while its body is awaited: the parsed head is memory no budget
// counts.
func TestManyHeaderFieldsRefused(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(), MaxHeaderBytes: 64 << 10, ConnState: s.ConnState, ConnContext: s.ConnContext} // serve's header limit
	go hs.Serve(s.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	var head strings.Builder
	head.WriteString("POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n")
	for i := 0; head.Len() < 60<<10; i++ {
		fmt.Fprintf(&head, "x%x:\r\n", i)
	}
	head.WriteString("\r\n") // and no body
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, head.String())
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close {
		t.Errorf("a head of %d header fields: %d (close %v), want 431 closing the connection", strings.Count(head.String(), "\n")-1, resp.StatusCode, resp.Close)
	}
}
