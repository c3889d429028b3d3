package connlimit

import (
	"net"
	"testing"
	"time"
)

// TestPendingWhileRead: pending answers at once on a connection whose
// reader is blocked waiting for bytes (an idle keep-alive connection at
// shutdown), and sees bytes that arrive.
func TestPendingWhileRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	go server.Read(make([]byte, 1)) // blocked, holding the read lock
	time.Sleep(50 * time.Millisecond)
	done := make(chan bool, 1)
	go func() { done <- pending(server) }()
	select {
	case got := <-done:
		if got {
			t.Error("pending with nothing sent")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("pending blocked behind the connection's reader")
	}
}
