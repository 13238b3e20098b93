package server

import (
	"testing"

	"github.com/kairos-dev/kairos/server/evloop"
)

// BenchmarkLoopParse: the loops' parser on the three requests of
// loopRoutes, as a client library sends them.
func BenchmarkLoopParse(b *testing.B) {
	for name, raw := range map[string]string{
		"publish": "PUT /api/bench/q?delay=0&ttl=3600&tries=3 HTTP/1.1\r\nHost: 127.0.0.1:7777\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 100\r\nX-Token: default:01JDB3Q8Z1V7W9X2Y3Z4A5B6C7\r\nAccept-Encoding: gzip\r\n\r\n" + string(make([]byte, 100)),
		"consume": "GET /api/bench/q?ttr=30&timeout=0 HTTP/1.1\r\nHost: 127.0.0.1:7777\r\nUser-Agent: Go-http-client/1.1\r\nX-Token: default:01JDB3Q8Z1V7W9X2Y3Z4A5B6C7\r\nAccept-Encoding: gzip\r\n\r\n",
		"ack":     "DELETE /api/bench/q/job/01JDB3Q8Z1V7W9X2Y3Z4A5B6C7 HTTP/1.1\r\nHost: 127.0.0.1:7777\r\nUser-Agent: Go-http-client/1.1\r\nX-Token: default:01JDB3Q8Z1V7W9X2Y3Z4A5B6C7\r\nAccept-Encoding: gzip\r\n\r\n",
	} {
		b.Run(name, func(b *testing.B) {
			buf := []byte(raw)
			var r evloop.Request
			b.ReportAllocs()
			for b.Loop() {
				if loopParser.Parse(buf, &r) != evloop.Done {
					b.Fatal("not taken")
				}
			}
		})
	}
}
