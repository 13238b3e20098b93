//go:build linux

package main

import "testing"

func TestRequestSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"PUT /api/ns/q HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 59},
		{"PUT /api/ns/q HTTP/1.1\r\nHost: x\r\ncontent-length:5\r\n\r\nhel", 58}, // the whole request, body not all read yet,
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n", 27},
		{"GET / HTTP/1.1\r\nHost: x\r\n", 0},
	} {
		if got := requestSize([]byte(c.in)); got != c.want {
			t.Errorf("requestSize(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}
