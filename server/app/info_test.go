package app

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redis62 serves the commands readyCheck and checkDurable send, answering
// INFO as Redis 6.2 does: one section at a time, a syntax error for more.
func redis62(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve62(conn)
		}
	}()
	return ln.Addr().String()
}

func serve62(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		args := make([]string, n)
		for i := range args {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			a, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args[i] = strings.TrimSpace(a)
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "PING":
			reply = "+PONG\r\n"
		case "INFO":
			if len(args) != 2 {
				reply = "-ERR syntax error\r\n"
				break
			}
			body := "# " + args[1] + "\r\nrole:master\r\nloading:0\r\naof_enabled:1\r\nmaxmemory_policy:noeviction\r\n"
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(body), body)
		default:
			reply = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// TestReadyOnRedis62: readiness reads INFO one section per command, so a
// Redis before 7.0 (which refuses an INFO of several sections) is ready.
func TestReadyOnRedis62(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redis62(t), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := readyCheck("pool default", client, false).Check(ctx); err != nil {
		t.Errorf("readyCheck on Redis 6.2: %v, want ready", err)
	}
	info, err := infoSections(ctx, client, "persistence", "memory")
	if err != nil || infoField(info, "aof_enabled") != "1" || infoField(info, "maxmemory_policy") != "noeviction" {
		t.Errorf("infoSections = %q, %v", info, err)
	}
}

// TestClusterVersion: a Redis Cluster pool needs Redis 7.0 (sharded
// Pub/Sub); an older node is refused by address and version, a newer one
// or a reply without a version passes.
func TestClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		info string
		want string
	}{
		{"# Server\r\nredis_version:6.2.14\r\nredis_mode:cluster\r\n", "the Redis Cluster node 10.0.0.1:7000 runs Redis 6.2.14: a Redis Cluster needs Redis 7.0 or later (sharded Pub/Sub); upgrade it, or use a standalone or Sentinel-managed Redis 6.2"},
		{"# Server\r\nredis_version:7.0.0\r\n", ""},
		{"# Server\r\nredis_version:7.2.4\r\n", ""},
		{"# Server\r\nredis_version:8.0.1\r\n", ""},
		{"# Server\r\n", ""},
	} {
		err := clusterVersion("10.0.0.1:7000", tc.info)
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("clusterVersion(%q) = %v, want %q", tc.info, err, tc.want)
		}
	}
}
