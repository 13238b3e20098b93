#!/usr/bin/env node
// The BullMQ driver of `make bench-peers` (scripts/bench-peers.sh): the
// scenarios of scripts/peers (memory enqueue bulk process latency delayed)
// with the same job counts, body size and concurrency, printing the same
// JSON lines, so that `peers table` puts BullMQ in the same table.
//
// BullMQ is driven as its documentation shows it: one Queue per queue name
// for the producers (add, addBulk), a Worker with `concurrency` handlers
// whose async processor returning acknowledges (moves the job to completed),
// ioredis connections (maxRetriesPerRequest: null for the Worker, as the
// docs require). Jobs are added with removeOnComplete: true (the docs'
// "Auto-removal of jobs" guide: by default BullMQ keeps every completed job
// in Redis, which production setups restrict). Redis runs with AOF everysec
// and maxmemory-policy noeviction, as the "Going to production" guide asks.
// Every other setting is BullMQ's default (attempts 1, lockDuration 30 s,
// stalledInterval 30 s, drainDelay 5 s, one ioredis connection per Queue).
//
//   node bench.js --redis 127.0.0.1:6390 --store-pid 123 --round 1 memory enqueue
'use strict';

const fs = require('fs');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');
const { performance } = require('perf_hooks');

const VERSION = require('bullmq/package.json').version;

function parseArgs(argv) {
  const cfg = {
    redis: '', storePid: 0, round: 1, jobs: 100000, c: 64, bulkC: 16, batch: 64, body: 100,
    delayedJobs: 20000, memJobs: 20000, latencyDuration: 5, rates: [1000, 4000], scenarios: [],
  };
  const num = (v, name) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name}: bad number ${v}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('-')) { cfg.scenarios.push(a); continue; }
    const name = a.replace(/^-+/, '');
    const v = argv[++i];
    switch (name) {
      case 'redis': cfg.redis = v; break;
      case 'store-pid': cfg.storePid = num(v, name); break;
      case 'round': cfg.round = num(v, name); break;
      case 'jobs': cfg.jobs = num(v, name); break;
      case 'c': cfg.c = num(v, name); break;
      case 'bulk-c': cfg.bulkC = num(v, name); break;
      case 'batch': cfg.batch = num(v, name); break;
      case 'body': cfg.body = num(v, name); break;
      case 'delayed-jobs': cfg.delayedJobs = num(v, name); break;
      case 'mem-jobs': cfg.memJobs = num(v, name); break;
      case 'latency-duration': cfg.latencyDuration = num(String(v).replace(/s$/, ''), name); break;
      case 'rates': cfg.rates = String(v).split(',').map((r) => num(r, name)); break;
      default: throw new Error(`unknown flag ${a}`);
    }
  }
  if (!cfg.redis) throw new Error('--redis is required');
  return cfg;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// nowNs is the wall clock in nanoseconds (microsecond precision), as a BigInt.
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;

// body is the JSON string's content (the JSON text is body+2 bytes with its
// quotes, as the Go harness's): publish and due times in Unix nanoseconds.
function body(n, sentNs, dueNs) {
  let s = `${String(sentNs).padStart(19, '0')}|${String(dueNs || 0n).padStart(19, '0')}|`;
  return s + 'x'.repeat(Math.max(0, n - 2 - s.length));
}
const stamps = (b) => [BigInt(b.slice(0, 19)), BigInt(b.slice(20, 39))];
const msSince = (ns) => Number(nowNs() - ns) / 1e6;

const TICK = 100; // USER_HZ
function treeCpuUs(pid) {
  const read = (p) => {
    try {
      const s = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = s.slice(s.lastIndexOf(')') + 2).split(' '); // f[0] is field 3
      return { self: +f[11] + +f[12], dead: +f[13] + +f[14], ppid: +f[1] };
    } catch { return null; }
  };
  const me = read(pid);
  if (!me) return 0;
  let ticks = me.self + me.dead;
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || +e === pid) continue;
    const c = read(e);
    if (c && c.ppid === pid) ticks += c.self;
  }
  return ticks * 1e6 / TICK;
}

class Bench {
  constructor(cfg) {
    this.cfg = cfg;
    const [host, port] = cfg.redis.split(':');
    this.conn = { host, port: Number(port) };
    this.redis = new IORedis(this.conn);
    this.queues = new Map();
  }

  queue(name) {
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, {
        connection: this.conn,
        defaultJobOptions: { removeOnComplete: true },
      });
      this.queues.set(name, q);
    }
    return q;
  }

  cpu() {
    const u = process.cpuUsage();
    const m = { client: u.user + u.system };
    if (this.cfg.storePid) m.store = treeCpuUs(this.cfg.storePid);
    return m;
  }

  result(scenario, jobs, seconds, c0, c1) {
    const cpu = {};
    for (const k of Object.keys(c1)) cpu[k] = jobs ? Math.round((c1[k] - c0[k]) / jobs * 10) / 10 : 0;
    return { peer: 'bullmq', version: VERSION, scenario, round: this.cfg.round, jobs, seconds, rate: jobs / seconds, cpu_us: cpu };
  }

  async enqueue(queue, b, dueNs) {
    const opts = {};
    if (dueNs) opts.delay = Math.max(0, Math.round(Number(dueNs - nowNs()) / 1e6));
    await this.queue(queue).add('bench', { b }, opts);
  }

  async batch(queue, bodies, dueNs) {
    const jobs = bodies.map((b) => {
      const j = { name: 'bench', data: { b } };
      if (dueNs) j.opts = { delay: Math.max(0, Math.round(Number(dueNs - nowNs()) / 1e6)) };
      return j;
    });
    await this.queue(queue).addBulk(jobs);
  }

  async work(queue, concurrency, h) {
    const connection = new IORedis({ ...this.conn, maxRetriesPerRequest: null });
    const w = new Worker(queue, async (job) => { h(job.data.b); }, { connection, concurrency });
    w.on('error', (err) => console.error('bullmq worker:', err));
    await w.waitUntilReady();
    return async () => { await w.close(); connection.disconnect(); };
  }

  async clean() {
    await this.redis.flushall();
  }

  async usedMemory() {
    const info = await this.redis.info('memory');
    const m = /used_memory:(\d+)/.exec(info);
    if (!m) throw new Error('INFO memory has no used_memory');
    return Number(m[1]);
  }
}

// parallel runs n tasks over c async loops.
async function parallel(c, n, f) {
  let next = 0;
  const loop = async () => { for (let i = next++; i < n; i = next++) await f(i); };
  await Promise.all(Array.from({ length: Math.min(c, n) }, loop));
}

function quantiles(r, v) {
  if (!v.length) return r;
  v.sort((a, b) => a - b);
  const q = (p) => Math.round(v[Math.min(v.length - 1, Math.floor(p * v.length))] * 1000) / 1000;
  r.p50_ms = q(0.5); r.p99_ms = q(0.99);
  r.max_ms = Math.round(v[v.length - 1] * 1000) / 1000; r.min_ms = Math.round(v[0] * 1000) / 1000;
  return r;
}

const scenarios = {
  async memory(b) {
    const n = b.cfg.memJobs;
    await sleep(500);
    const m0 = await b.usedMemory();
    const due = nowNs() + 3600n * 1000000000n;
    await parallel(b.cfg.bulkC, Math.ceil(n / b.cfg.batch), (i) => {
      const k = Math.min(b.cfg.batch, n - i * b.cfg.batch);
      return b.batch('mem', Array.from({ length: k }, () => body(b.cfg.body, nowNs(), due)), due);
    });
    await sleep(500);
    const m1 = await b.usedMemory();
    return [{ peer: 'bullmq', version: VERSION, scenario: 'memory', round: b.cfg.round, jobs: n, bytes_per_job: Math.round((m1 - m0) / n * 10) / 10 }];
  },

  async enqueue(b) {
    const n = b.cfg.jobs;
    const c0 = b.cpu(); const t0 = performance.now();
    await parallel(b.cfg.c, n, () => b.enqueue('enq', body(b.cfg.body, nowNs(), 0n), 0n));
    const s = (performance.now() - t0) / 1000;
    return [b.result('enqueue', n, s, c0, b.cpu())];
  },

  async bulk(b) {
    const bs = b.cfg.batch; const n = Math.floor(b.cfg.jobs / bs) * bs;
    const c0 = b.cpu(); const t0 = performance.now();
    await parallel(b.cfg.bulkC, n / bs, () => b.batch('bulk', Array.from({ length: bs }, () => body(b.cfg.body, nowNs(), 0n)), 0n));
    const s = (performance.now() - t0) / 1000;
    return [b.result('bulk', n, s, c0, b.cpu())];
  },

  async process(b) {
    const n = b.cfg.jobs; const bs = b.cfg.batch;
    await parallel(b.cfg.bulkC, Math.ceil(n / bs), (i) => {
      const k = Math.min(bs, n - i * bs);
      return b.batch('proc', Array.from({ length: k }, () => body(b.cfg.body, nowNs(), 0n)), 0n);
    });
    await sleep(1000);
    let count = 0; let done;
    const all = new Promise((r) => { done = r; });
    const c0 = b.cpu(); const t0 = performance.now();
    const stop = await b.work('proc', b.cfg.c, () => { if (++count === n) done(); });
    const timeout = sleep(n + 60000).then(() => { throw new Error(`process: ${count} of ${n} jobs handled in time`); });
    await Promise.race([all, timeout]);
    const s = (performance.now() - t0) / 1000; const c1 = b.cpu();
    await stop();
    return [b.result('process', n, s, c0, c1)];
  },

  async latency(b) {
    const out = [];
    for (const rate of b.cfg.rates) {
      const queue = `lat${rate}`;
      const v = [];
      const stop = await b.work(queue, b.cfg.c, (body) => { v.push(msSince(stamps(body)[0])); });
      await sleep(1000);
      const n = Math.round(rate * b.cfg.latencyDuration);
      const c0 = b.cpu(); const t0 = performance.now();
      // The pacer: every millisecond, start the adds now due; at most c in flight.
      let sent = 0; let inflight = 0; const pending = [];
      while (sent < n) {
        const due = Math.min(n, Math.floor((performance.now() - t0) / 1000 * rate));
        while (sent < due && inflight < b.cfg.c) {
          sent++; inflight++;
          pending.push(b.enqueue(queue, body(b.cfg.body, nowNs(), 0n), 0n).finally(() => { inflight--; }));
        }
        await sleep(1);
      }
      await Promise.all(pending);
      const sendEnd = (performance.now() - t0) / 1000;
      const deadline = performance.now() + 15000;
      while (v.length < n && performance.now() < deadline) await sleep(5);
      const s = (performance.now() - t0) / 1000; const c1 = b.cpu();
      const r = b.result('latency', v.length, s, c0, c1);
      r.target = rate; r.rate = n / sendEnd;
      if (v.length < n) r.note = `${v.length} of ${n} jobs handled within 15 s of the last publish`;
      out.push(quantiles(r, v));
      await stop();
      await b.clean();
    }
    return out;
  },

  async delayed(b) {
    const n = b.cfg.delayedJobs;
    const v = [];
    const stop = await b.work('delayed', b.cfg.c, (body) => { v.push(msSince(stamps(body)[1])); });
    await sleep(1000);
    const c0 = b.cpu(); const t0 = performance.now();
    await parallel(b.cfg.c, n, () => {
      const now = nowNs();
      const due = now + 1000000000n + BigInt(Math.floor(Math.random() * 4e9));
      return b.enqueue('delayed', body(b.cfg.body, now, due), due);
    });
    const deadline = performance.now() + 40000;
    while (v.length < n && performance.now() < deadline) await sleep(5);
    const s = (performance.now() - t0) / 1000; const c1 = b.cpu();
    await stop();
    const r = b.result('delayed', v.length, s, c0, c1);
    if (v.length < n) r.note = `${v.length} of ${n} jobs handled`;
    return [quantiles(r, v)];
  },
};

async function main() {
  if (process.argv[2] === '--version') {
    // make test's check that the locked packages load: prints the versions.
    console.log(`bullmq ${VERSION}, ioredis ${require('ioredis/package.json').version}, node ${process.versions.node}`);
    return;
  }
  const cfg = parseArgs(process.argv.slice(2));
  const b = new Bench(cfg);
  for (const sc of cfg.scenarios) {
    const f = scenarios[sc];
    if (!f) throw new Error(`unknown scenario ${sc}`);
    for (const r of await f(b)) console.log(JSON.stringify(r));
    await b.clean();
  }
  for (const q of b.queues.values()) await q.close();
  b.redis.disconnect();
}

main().catch((err) => { console.error('bullmq bench:', err); process.exit(1); });
