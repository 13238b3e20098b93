package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// table reads the JSON lines of every run and prints one Markdown table:
// a row per scenario, a column per peer, each cell the median of the
// rounds (by rate, or by p99 for latency and lateness, or by bytes) with
// the min-max of that figure.
func table(w io.Writer, files []string) error {
	type key struct{ scenario, peer string }
	runs := map[key][]result{}
	var peers []string
	versions := map[string]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				fh.Close()
				return fmt.Errorf("%s: %w", f, err)
			}
			name := r.Scenario
			if r.Target > 0 {
				name = fmt.Sprintf("latency at %.0f jobs/s", r.Target)
			}
			k := key{name, r.Peer}
			runs[k] = append(runs[k], r)
			if _, ok := versions[r.Peer]; !ok {
				peers = append(peers, r.Peer)
				versions[r.Peer] = r.Version
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	order := []string{"kairos", "asynq", "bullmq", "river", "river-defaults"}
	sort.SliceStable(peers, func(i, j int) bool { return idx(order, peers[i]) < idx(order, peers[j]) })
	rows := []string{"enqueue", "bulk", "process", "latency at 1000 jobs/s", "latency at 4000 jobs/s", "delayed", "memory"}
	for k := range runs {
		if idx(rows, k.scenario) == len(rows) {
			rows = append(rows, k.scenario)
		}
	}
	fmt.Fprint(w, "| |")
	for _, p := range peers {
		fmt.Fprintf(w, " %s %s |", p, versions[p])
	}
	fmt.Fprint(w, "\n|---|")
	for range peers {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		seen := false
		for _, p := range peers {
			seen = seen || len(runs[key{row, p}]) > 0
		}
		if !seen {
			continue
		}
		fmt.Fprintf(w, "| %s |", label(row))
		for _, p := range peers {
			fmt.Fprintf(w, " %s |", cell(runs[key{row, p}]))
		}
		fmt.Fprintln(w)
	}
	return nil
}

func idx(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return len(list)
}

func label(row string) string {
	switch row {
	case "enqueue":
		return "enqueue, one job a call"
	case "bulk":
		return "enqueue, batches of 64"
	case "process":
		return "process (consume + ACK)"
	case "delayed":
		return "delayed jobs due in 1-5 s: lateness"
	case "memory":
		return "store bytes per waiting delayed job"
	}
	return row
}

func cell(rs []result) string {
	if len(rs) == 0 {
		return "—"
	}
	if rs[0].Note == "no batch API" {
		return "— (no batch API)"
	}
	var by func(r result) float64
	switch {
	case rs[0].Scenario == "memory":
		by = func(r result) float64 { return r.BytesPerJob }
	case rs[0].P99 != nil:
		by = func(r result) float64 { return *r.P99 }
	default:
		by = func(r result) float64 { return r.Rate }
	}
	sort.Slice(rs, func(i, j int) bool { return by(rs[i]) < by(rs[j]) })
	m := rs[len(rs)/2]
	lo, hi := by(rs[0]), by(rs[len(rs)-1])
	var s string
	switch {
	case m.Scenario == "memory":
		return fmt.Sprintf("%.0f B (%.0f–%.0f)", m.BytesPerJob, lo, hi)
	case m.Scenario == "latency":
		s = fmt.Sprintf("p50 %s, **p99 %s** (%s–%s), max %s; sent %.2fk/s", msf(*m.P50), msf(*m.P99), msf(lo), msf(hi), msf(*m.Max), m.Rate/1000)
	case m.Scenario == "delayed":
		s = fmt.Sprintf("p50 %s, **p99 %s** (%s–%s), max %s, earliest %s", msf(*m.P50), msf(*m.P99), msf(lo), msf(hi), msf(*m.Max), msf(*m.Min))
	default:
		s = fmt.Sprintf("**%.1fk/s** (%.1f–%.1fk)", m.Rate/1000, lo/1000, hi/1000)
	}
	if len(m.CPU) > 0 {
		var parts []string
		var total float64
		for _, k := range []string{"client", "server", "store"} {
			if v, ok := m.CPU[k]; ok {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, v))
				total += v
			}
		}
		s += fmt.Sprintf("; CPU µs/job %s = %.0f", strings.Join(parts, " + "), total)
	}
	if m.Note != "" {
		s += "; " + m.Note
	}
	return s
}

// msf formats milliseconds: "12 ms", "3.4 ms", "0.82 ms", "5.3 s".
func msf(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case a >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case a >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}
