package tlscert

import (
	"crypto/tls"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/server/tlscert/tlstest"
)

// BenchmarkHandshake prices a new TLS connection to a Kairos listener
// (the certificate of tlstest: ECDSA P-256) over net.Pipe, client and
// server in this process: cpu-µs/op is both sides' CPU together (the
// process's user and system time, which a loaded machine does not
// inflate as it does ns/op). "full" is a
// first connection, "resumed" a client that kept the session ticket of
// an earlier one (crypto/tls's clients do when given a session cache).
func BenchmarkHandshake(b *testing.B) {
	dir := b.TempDir()
	ca := tlstest.NewCA(b, "bench CA")
	certFile, keyFile := ca.WritePair(b, dir, "server")
	r, err := Load(certFile, keyFile, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, tc := range []struct {
		name    string
		version uint16
		resume  bool
	}{
		{"full/TLS1.3", tls.VersionTLS13, false},
		{"full/TLS1.2", tls.VersionTLS12, false},
		{"resumed/TLS1.3", tls.VersionTLS13, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			server := r.ServerConfig(tls.VersionTLS12)
			client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MaxVersion: tc.version}
			if tc.resume {
				client.ClientSessionCache = tls.NewLRUClientSessionCache(1)
				handshake(b, server, client) // gets the ticket
			}
			b.ResetTimer()
			start := cpuTime(b)
			for range b.N {
				handshake(b, server, client)
			}
			b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func handshake(b *testing.B, server, client *tls.Config) {
	sc, cc := net.Pipe()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(sc, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 tickets are sent after the handshake: read until
			// the client closes, so that the client gets them.
			var buf [1]byte
			_, _ = s.Read(buf[:])
		}
		_ = s.Close()
		done <- err
	}()
	c := tls.Client(cc, client)
	if err := c.Handshake(); err != nil {
		b.Fatal(err)
	}
	if client.ClientSessionCache != nil {
		// Read the ticket: a read that ends when the server closes.
		_ = c.CloseWrite()
		var buf [1]byte
		_, _ = c.Read(buf[:])
	}
	_ = c.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
