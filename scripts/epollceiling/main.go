//go:build linux

// Command epollceiling is a measuring instrument, not part of Kairos: a
// do-nothing HTTP/1.1 server on raw epoll loops (no goroutine per
// connection), answering every request with lmstfy's publish reply (201
// and a fixed job ID). Measured with `kairos bench` like the net/http
// ceiling of `kairos bench --ceiling`, it shows what this machine allows
// when the HTTP layer is not net/http (doc/performance.md):
//
//	go run ./scripts/epollceiling -addr 127.0.0.1:7790 -loops 2 &
//	kairos bench --addr 127.0.0.1:7790 --token x -n bench --server-pid $! --ceiling publish
//
// It parses only what it needs (the end of the headers and Content-Length),
// so it serves well-formed keep-alive requests and nothing else.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
)

// epollExclusive is EPOLLEXCLUSIVE: each new connection wakes one loop.
const epollExclusive = 1 << 28

func main() {
	addr := flag.String("addr", "127.0.0.1:7790", "listen address (IPv4)")
	loops := flag.Int("loops", 2, "event loops, one OS thread each")
	flag.Parse()
	ap, err := netip.ParseAddrPort(*addr)
	if err != nil || !ap.Addr().Is4() {
		log.Fatalf("epollceiling: -addr %q: an IPv4 HOST:PORT is needed", *addr)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Listen(lfd, 1024); err != nil {
		log.Fatal(err)
	}
	errs := make(chan error)
	for range *loops {
		go func() { errs <- loop(lfd) }()
	}
	log.Fatal(<-errs)
}

// loop serves the connections it accepts until an epoll call fails.
func loop(lfd int) error {
	runtime.LockOSThread()
	ep, err := syscall.EpollCreate1(0)
	if err != nil {
		return err
	}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive, Fd: int32(lfd)}); err != nil {
		return err
	}
	body := `{"job_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","msg":"published"}`
	resp := []byte(fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	pending := map[int][]byte{} // per connection: bytes of an incomplete request
	events := make([]syscall.EpollEvent, 128)
	rbuf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				accept(ep, lfd, pending)
				continue
			}
			m, err := syscall.Read(fd, rbuf)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			if m <= 0 {
				_ = syscall.Close(fd)
				delete(pending, fd)
				continue
			}
			buf := append(pending[fd], rbuf[:m]...)
			for {
				size := requestSize(buf)
				if size == 0 || size > len(buf) {
					break
				}
				buf = buf[size:]
				if _, err := syscall.Write(fd, resp); err != nil {
					break
				}
			}
			pending[fd] = buf
		}
	}
}

func accept(ep, lfd int, pending map[int][]byte) {
	for {
		fd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK)
		if err != nil {
			return
		}
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			_ = syscall.Close(fd)
			continue
		}
		pending[fd] = nil
	}
}

// requestSize returns the length of the request at the start of buf
// (headers and Content-Length body), or 0 while its headers are incomplete.
func requestSize(buf []byte) int {
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return 0
	}
	size := end + 4
	for _, line := range bytes.Split(buf[:end], []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err == nil && n > 0 {
				size += n
			}
		}
	}
	return size
}
