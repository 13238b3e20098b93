package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kairos-dev/kairos/client/bench"
)

func main() {
	addr := flag.String("addr", "http://127.0.0.1:7801", "")
	tok := flag.String("token", "", "")
	sc := flag.String("s", "publish", "")
	conc := flag.Int("c", 64, "")
	dur := flag.Duration("d", 5*time.Second, "")
	jobs := flag.Int("jobs", 20000, "")
	ceiling := flag.Bool("ceiling", false, "")
	flag.Parse()
	if *ceiling {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go http.Serve(ln, &bench.Ceiling{})
		*addr = "http://" + ln.Addr().String()
	}
	cfg := bench.Config{Addr: *addr, Token: *tok, Concurrency: *conc, Duration: *dur, Jobs: *jobs}
	var r bench.Result
	var err error
	ctx := context.Background()
	switch *sc {
	case "publish":
		r, err = bench.Publish(ctx, cfg)
	case "bulk":
		cfg.Concurrency = 16
		r, err = bench.BulkPublish(ctx, cfg)
	case "consume":
		r, err = bench.ConsumeAck(ctx, cfg)
	case "latency":
		r, err = bench.Latency(ctx, cfg)
	case "delayed":
		r, err = bench.Delayed(ctx, cfg)
	case "burst":
		r, err = bench.Burst(ctx, cfg)
	case "idle":
		r, err = bench.Idle(ctx, cfg)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b), err)
}
