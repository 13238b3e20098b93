package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A CPUMeter reads a cumulative CPU time (user + system): of the load
// generator, of a server, of Redis. Scenarios read their meters at the start
// and the end of their measured phase and report the difference per job.
type CPUMeter func(ctx context.Context) (time.Duration, error)

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times
// (100 on every architecture Go supports).
const clockTicks = 100

// ProcessCPU returns a meter of a local process's CPU time, read from
// /proc/PID/stat (utime + stime; Linux only, 10 ms resolution).
func ProcessCPU(pid int) CPUMeter {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	return func(context.Context) (time.Duration, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
		}
		return parseProcStat(b)
	}
}

// parseProcStat returns utime + stime of a /proc/PID/stat line.
func parseProcStat(b []byte) (time.Duration, error) {
	// "pid (comm) state ppid …": comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'; utime and stime are fields
	// 14 and 15, the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("bench: malformed /proc/PID/stat")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: malformed /proc/PID/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// RedisProbe reads a Redis server's INFO for the benchmark: the CPU time
// its main thread has spent, and whether a fork of it (a snapshot or an AOF
// rewrite) is running.
type RedisProbe struct {
	rdb *redis.Client
}

// NewRedisProbe connects a probe to addr, HOST:PORT or a redis:// URL.
func NewRedisProbe(addr string) (*RedisProbe, error) {
	opt := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		var err error
		if opt, err = redis.ParseURL(addr); err != nil {
			return nil, fmt.Errorf("bench: redis address: %w", err)
		}
	}
	opt.PoolSize = 1
	return &RedisProbe{rdb: redis.NewClient(opt)}, nil
}

// Close closes the probe's connection.
func (p *RedisProbe) Close() error { return p.rdb.Close() }

// CPU is a CPUMeter: used_cpu_sys + used_cpu_user of INFO cpu.
func (p *RedisProbe) CPU(ctx context.Context) (time.Duration, error) {
	info, err := p.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: redis INFO cpu: %w", err)
	}
	return parseRedisCPU(info)
}

// quietFor is how long Quiet wants Redis without a fork before it returns:
// more than a serverCron period (100 ms at the default hz 10), in which
// Redis starts an AOF rewrite that the writes before have made due.
const quietFor = 250 * time.Millisecond

// Quiet waits until Redis runs no snapshot or AOF rewrite, and has run
// none for quietFor, and returns how long it waited for one to end (0 when
// there was none). A fork's child competes with the server, Redis and the
// load generator for the machine's cores, and its copy-on-write faults
// slow Redis itself; a measured phase that starts inside a rewrite that
// its set-up (a preload, a fill) set off measures the rewrite.
func (p *RedisProbe) Quiet(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var busy time.Duration
	var quietSince time.Time
	for {
		info, err := p.rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return busy, fmt.Errorf("bench: redis INFO persistence: %w", err)
		}
		now := time.Now()
		switch {
		case redisForking(info):
			quietSince = time.Time{}
			busy = now.Sub(start)
		case quietSince.IsZero():
			quietSince = now
		case now.Sub(quietSince) >= quietFor:
			return busy, nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return busy, ctx.Err()
		case <-t.C:
		}
	}
}

// redisForking reports whether an INFO persistence reply shows a snapshot,
// an AOF rewrite (running or scheduled) or a module's fork in progress.
func redisForking(info string) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || v == "0" {
			continue
		}
		switch k {
		case "rdb_bgsave_in_progress", "aof_rewrite_in_progress", "aof_rewrite_scheduled", "module_fork_in_progress":
			return true
		}
	}
	return false
}

// parseRedisCPU returns used_cpu_sys + used_cpu_user of an INFO reply.
func parseRedisCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: redis INFO %s: %w", k, err)
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, errors.New("bench: redis INFO cpu lacks used_cpu_sys or used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}

// cpuMark is one reading of a run's meters.
type cpuMark struct {
	self, server, redis time.Duration
	err                 error // the first meter error
}

func (cfg *Config) cpuMark(ctx context.Context) cpuMark {
	var m cpuMark
	var err error
	if m.self, err = selfCPU(); err != nil {
		m.err = err
	}
	read := func(meter CPUMeter, d *time.Duration) {
		if meter == nil {
			return
		}
		v, err := meter(ctx)
		if err != nil && m.err == nil {
			m.err = err
		}
		*d = v
	}
	read(cfg.ServerCPU, &m.server)
	read(cfg.RedisCPU, &m.redis)
	return m
}

// setCPU reads the meters again and records in r the CPU each spent per job
// (r.Ops) since start.
func (r *Result) setCPU(ctx context.Context, cfg *Config, start cpuMark) {
	end := cfg.cpuMark(ctx)
	if err := errors.Join(start.err, end.err); err != nil {
		r.Note = addNote(r.Note, "CPU not measured: "+err.Error())
		return
	}
	if r.Ops <= 0 {
		return
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(r.Ops) }
	r.LoadgenCPUUS = per(end.self - start.self)
	if cfg.ServerCPU != nil {
		r.ServerCPUUS = per(end.server - start.server)
	}
	if cfg.RedisCPU != nil {
		r.RedisCPUUS = per(end.redis - start.redis)
	}
}
