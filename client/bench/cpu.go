package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
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

// cpuMark is one reading of a run's meters.
type cpuMark struct {
	self, server, redis time.Duration
	nodes               []NodeCPU // with Config.RedisNodes
	err                 error     // the first meter error
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
	if cfg.RedisNodes != nil {
		m.nodes, err = cfg.RedisNodes(ctx)
		if err != nil && m.err == nil {
			m.err = err
		}
		m.redis = mastersCPU(m.nodes)
	} else {
		read(cfg.RedisCPU, &m.redis)
	}
	return m
}

// redisMetered reports whether the run meters Redis's CPU.
func (cfg *Config) redisMetered() bool { return cfg.RedisCPU != nil || cfg.RedisNodes != nil }

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
	if cfg.RedisNodes != nil {
		r.setNodesCPU(start.nodes, end.nodes, per)
	} else if cfg.RedisCPU != nil {
		r.RedisCPUUS = per(end.redis - start.redis)
	}
}

// setNodesCPU records Redis's CPU per job from two readings of every node:
// the masters' total and each master's part, and the replicas' total (on a
// cluster). A node found in one reading only (a failover, a node added
// during the run) is left out and named in the note.
func (r *Result) setNodesCPU(start, end []NodeCPU, per func(time.Duration) float64) {
	before := make(map[string]NodeCPU, len(start))
	for _, n := range start {
		before[n.Addr] = n
	}
	var masters []MasterCPU
	var total, replicas time.Duration
	var changed []string
	cluster := false
	for _, n := range end {
		b, ok := before[n.Addr]
		delete(before, n.Addr)
		if n.Slots > 0 || !n.Master {
			cluster = true
		}
		if !ok || b.Master != n.Master {
			changed = append(changed, n.Addr)
			continue
		}
		d := n.CPU - b.CPU
		if !n.Master {
			replicas += d
			continue
		}
		total += d
		masters = append(masters, MasterCPU{Addr: n.Addr, Slots: n.Slots, CPUUS: per(d)})
	}
	for a := range before {
		changed = append(changed, a)
	}
	r.RedisCPUUS = per(total)
	if cluster {
		for i := range masters {
			if total > 0 {
				masters[i].Share = masters[i].CPUUS / r.RedisCPUUS
			}
		}
		r.RedisMasters = masters
		r.RedisReplicasCPUUS = per(replicas)
	}
	if len(changed) > 0 {
		sort.Strings(changed)
		r.Note = addNote(r.Note, "Redis nodes that changed role or came or went during the run, left out of its CPU: "+strings.Join(changed, ", "))
	}
}
