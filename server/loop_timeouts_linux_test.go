//go:build linux

package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestLoopHandedOverHalfClose: a connection the loop handed to net/http
// half-closes as net/http's own do: after a 413 for a body it will not
// read, the client reads the answer and then EOF, not a reset.
func TestLoopHandedOverHalfClose(t *testing.T) {
	_, _, addr := serveLoops(t)
	body := strings.Repeat("b", engine.MaxBodySize+1)
	for i := range 5 {
		conn := dialLoop(t, addr, 10*time.Second)
		go func() {
			_, _ = fmt.Fprintf(conn, "PUT /api/ns/q HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n%s", goodToken, len(body), body)
		}()
		br := bufio.NewReader(conn)
		a := readAnswers(t, br, 1)
		if a[0].status != 413 {
			t.Fatalf("try %d: %d %s, want 413", i, a[0].status, a[0].body)
		}
		_, err := io.Copy(io.Discard, br)
		if errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("try %d: reset after the 413, want EOF", i)
		}
		if err != nil {
			t.Fatalf("try %d: after the 413: %v", i, err)
		}
		conn.Close()
	}
}

var _ net.Conn = (*prefixConn)(nil)
