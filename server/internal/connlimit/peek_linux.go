package connlimit

import (
	"net"
	"syscall"
)

// pending reports whether bytes have arrived on c that nobody has read
// yet (a request on its way on an idle keep-alive connection): closing c
// then would answer them with a TCP reset.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	var n int
	// Control, not Read: an idle keep-alive connection's goroutine holds
	// the descriptor's read lock, blocked reading the next request, and
	// Read would wait for it (for as long as the idle timeout). The peek
	// never blocks, so it needs no lock.
	rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
