// Browser test of issue #33's overview and small defects: the attention
// list, the sorts by age and rates, charts without their partial last
// point, the stale indicator while Redis does not answer, 390 px, dark
// mode, token scopes, an unknown name's 404, the lookup's message. Started
// by the Go test TestDashboardOverviewBrowser (server/app), which publishes
// the fixtures and passes them in KAIROS_E2E.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import assert from 'node:assert/strict';

const env = JSON.parse(process.env.KAIROS_E2E || '{}');
const shots = process.env.KAIROS_SCREENSHOTS;
mkdirSync(shots, { recursive: true });
const ADMIN = env.admin;
const API = env.api;
const NS = env.ns;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const creds = { username: env.user, password: env.password };
const context = await browser.newContext({ httpCredentials: creds, viewport: { width: 1280, height: 900 }, colorScheme: 'light' });
let page = await context.newPage();
page.setDefaultTimeout(30000);
const consoleErrors = [];
const badResponses = [];
function watch(p) {
  p.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
  });
  p.on('pageerror', (e) => consoleErrors.push(String(e)));
  p.on('response', (r) => { if (r.status() >= 400) badResponses.push(`${r.status()} ${new URL(r.url()).pathname}`); });
}
watch(page);

let n = 0;
async function shot(p, name) {
  n++;
  const file = join(shots, `overview-${String(n).padStart(2, '0')}-${name}.png`);
  await p.screenshot({ path: file, fullPage: true });
  console.log(`screenshot: ${file}`);
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack || e}`);
    try { await page.screenshot({ path: join(shots, `FAILED-overview-${name.replace(/\W+/g, '-')}.png`), fullPage: true }); } catch {}
    await browser.close();
    process.exit(1);
  }
}

async function until(what, fn, timeout) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    await page.waitForTimeout(200);
  }
  throw new Error(`${what}: not within ${timeout} ms (last: ${last})`);
}

const tok = { 'X-Token': env.token };
const attention = (q) => page.locator(`#attention-list tr[data-ns="${NS}"][data-queue="${q}"]`);

await step('the overview lists the unconsumed backlog and the paused queue; a job dying appears by itself', async () => {
  await page.goto(`${ADMIN}/ui/`);
  const stuck = attention('sms-send');
  await stuck.waitFor();
  assert.match(await stuck.getAttribute('data-why'), /not consumed/);
  assert.match(await stuck.locator('td.why').textContent(), /3 ready and nothing consumed since \d\d:\d\d UTC; the oldest has waited (9|10|11)m/);
  assert.match((await stuck.locator('td.oldest').textContent()).trim(), /^1?[019]m\d+s$/);
  assert.equal((await stuck.locator('td.con').textContent()).trim(), '0');
  assert.equal(await stuck.locator('a').getAttribute('href'), `/ui/queue/default/${NS}/sms-send`);
  assert.match(await attention('held').getAttribute('data-why'), /paused/);
  const throttled = attention('throttled');
  assert.match(await throttled.getAttribute('data-why'), /at in-flight limit/);
  assert.match(await throttled.locator('td.why').textContent(), /1 in flight, its max_in_flight is 1: 1 ready wait for a slot/);
  assert.equal(await attention('orders').count(), 0, 'a queue consumed in time (just published) is not listed');
  // A job dies now: nacked with its last try.
  let r = await fetch(`${API}/api/${NS}/failing?tries=1`, { method: 'PUT', headers: tok, body: 'x' });
  assert.equal(r.status, 201);
  r = await fetch(`${API}/api/${NS}/failing?ttr=30&timeout=0`, { headers: { ...tok, 'X-Kairos-Extensions': '1' } });
  const job = await r.json();
  r = await fetch(`${API}/api/${NS}/failing/job/${job.job_id}/release?receipt=${job.receipt}&error=smtp%20refused`, { method: 'PUT', headers: tok });
  assert.equal(r.status, 204);
  const dying = attention('failing');
  await dying.waitFor({ timeout: 20000 }); // the history flush (5 s), then the live refresh
  assert.match(await dying.getAttribute('data-why'), /dead letter growing/);
  assert.match(await dying.locator('td.why').textContent(), /1 job died since/);
  // Most urgent first: the unconsumed backlog, the dying jobs, the
  // throttled queue, the paused one.
  const order = await page.locator('#attention-list tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.queue || r.dataset.ns));
  const listed = ['sms-send', 'failing', 'throttled', 'held'];
  assert.deepEqual(order.filter((q) => listed.includes(q)), listed);
  await shot(page, 'attention');
});

await step('the charts end at the last complete point', async () => {
  const section = page.locator('section[data-charts]');
  await until('charts loaded', async () => (await section.getAttribute('data-loaded')) === '1h', 15000);
  // The chart against the series it was drawn from (GET /history?range=1h:
  // 61 points a minute apart, the last one or two partial).
  const got = await page.evaluate(() => {
    const s = document.querySelector('section[data-charts]');
    const xs = document.querySelector('.chart-throughput')._uplot.data[0];
    const partial = Number(s.dataset.partialFrom);
    return { points: Number(s.dataset.points), partial, drawn: xs.length, last: xs[xs.length - 1] * 1000, first: xs[0] * 1000 };
  });
  assert.ok(got.points === 61 && got.partial > 0, `the series (${JSON.stringify(got)})`);
  const complete = (got.partial - got.first) / 60000; // points from the first up to the partial ones
  assert.equal(got.drawn, complete, `only complete points are drawn (${JSON.stringify(got)})`);
  assert.ok(got.drawn < got.points, 'the partial point is left out');
  assert.ok(got.last < got.partial && got.last + 60000 === got.partial, 'the last point drawn is the last complete one');
});

await step('the queues table sorts by oldest ready and by rates', async () => {
  await page.goto(`${ADMIN}/ui/ns/default/${NS}`);
  await page.locator('th a[data-sort="oldest"]').click();
  await page.waitForURL(/sort=oldest&order=desc|order=desc&sort=oldest/);
  const first = await page.locator('#queues tbody tr').first().getAttribute('data-queue');
  assert.equal(first, 'sms-send', 'the oldest ready job first');
  assert.equal(await page.locator('th a[data-sort="oldest"]').getAttribute('class'), 'sorted desc');
  await page.locator('th a[data-sort="consumed"]').click();
  await page.waitForURL(/sort=consumed/);
  assert.equal(await page.locator('th a[data-sort="consumed"]').getAttribute('class'), 'sorted desc');
  await page.locator('th a[data-sort="published"]').click();
  await page.waitForURL(/sort=published/);
  await shot(page, 'sorted');
});

await step('the page says stale while Redis does not answer, and live again after', async () => {
  await page.goto(`${ADMIN}/ui/queue/default/${NS}/orders`);
  const status = page.locator('#live-status');
  await until('live', async () => /^live · /.test(await status.textContent()), 10000);
  // CLIENT PAUSE: Redis holds every client's commands for 8 s; the page
  // says stale after at most 5 s (no answer) or sooner (an error page).
  await new Promise((resolve, reject) => {
    const [host, port] = env.redis.split(':');
    const s = connect({ host, port: Number(port) }, () => s.write('*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$4\r\n8000\r\n$3\r\nALL\r\n'));
    s.on('data', (d) => { s.end(); String(d).startsWith('+OK') ? resolve() : reject(new Error(String(d))); });
    s.on('error', reject);
  });
  await until('stale', async () => /^stale: .* · data from /.test(await status.textContent()), 10000);
  assert.equal(await page.evaluate(() => document.body.classList.contains('stale')), true, 'the regions dimmed');
  await shot(page, 'stale');
  await until('live again', async () => /^live · /.test(await status.textContent()), 20000);
  assert.equal(await page.evaluate(() => document.body.classList.contains('stale')), false);
  badResponses.length = 0; // the refreshes that failed while Redis was paused
});

await step('the token list shows each token\'s scope', async () => {
  await page.goto(`${ADMIN}/ui/tokens?pool=default&namespace=${NS}`);
  const scoped = page.locator('#tokens tr', { has: page.locator('td.desc', { hasText: /^scoped$/ }) });
  assert.equal((await scoped.locator('td.scope').textContent()).trim(), 'queues orders · publish');
  const all = page.locator('#tokens tr', { has: page.locator('td.desc', { hasText: /^e2e$/ }) });
  assert.equal((await all.locator('td.scope').textContent()).trim(), 'all queues · every role');
});

await step('an unknown namespace is a 404; a lookup says where it searched', async () => {
  const r = await page.goto(`${ADMIN}/ui/ns/default/nope-${NS}`);
  assert.equal(r.status(), 404);
  assert.match(await page.locator('main').textContent(), /no namespace "nope-/);
  await page.goto(`${ADMIN}/ui/queue/default/${NS}/orders`);
  await page.fill('#lookup-id', '01JAAAAAAAAAAAAAAAAAAAAAAA');
  const [resp] = await Promise.all([page.waitForNavigation(), page.locator('form.lookup button').click()]);
  assert.equal(resp.status(), 404);
  assert.match(await page.locator('main').textContent(), new RegExp(`not found in queue ${NS}/orders of pool default`));
  badResponses.length = 0; // the two 404s above were asked for
});

const pages = [['overview', '/ui/'], ['namespace', `/ui/ns/default/${NS}`], ['queue', `/ui/queue/default/${NS}/failing`],
  ['tokens', `/ui/tokens?pool=default&namespace=${NS}`], ['audit', '/ui/audit']];

await step('every page fits 390 px', async () => {
  const phone = await browser.newContext({ httpCredentials: creds, viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const p = await phone.newPage();
  watch(p);
  for (const [name, path] of pages) {
    await p.goto(`${ADMIN}${path}`);
    await p.waitForLoadState('load');
    await p.waitForTimeout(300); // the charts draw
    const w = await p.evaluate(() => document.documentElement.scrollWidth);
    await shot(p, `390-${name}`);
    assert.ok(w <= 390, `${path} is ${w} px wide at 390 px`);
  }
  await phone.close();
});

await step('dark mode follows the system', async () => {
  const lum = (rgb) => {
    const [r, g, b] = rgb.match(/\d+/g).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  };
  const colors = async (p) => p.evaluate(() => {
    const c = (el) => getComputedStyle(el);
    const th = document.querySelector('table.grid th');
    return { bg: c(document.body).backgroundColor, fg: c(document.body).color, th: th && c(th).backgroundColor, card: c(document.querySelector('table.grid')).backgroundColor };
  });
  await page.goto(`${ADMIN}/ui/`);
  const light = await colors(page);
  assert.ok(lum(light.bg) > 0.8 && lum(light.fg) < 0.3, `light: ${JSON.stringify(light)}`);
  const dark = await browser.newContext({ httpCredentials: creds, viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  const p = await dark.newPage();
  watch(p);
  for (const [name, path] of pages.filter(([name]) => name !== 'audit' && name !== 'namespace')) {
    await p.goto(`${ADMIN}${path}`);
    const got = await colors(p);
    assert.ok(lum(got.bg) < 0.2 && lum(got.fg) > 0.7, `dark ${path}: ${JSON.stringify(got)}`);
    assert.ok(lum(got.card) < 0.25 && (!got.th || lum(got.th) < 0.25), `dark ${path}: tables ${JSON.stringify(got)}`);
    if (name === 'overview' || name === 'queue') await shot(p, `dark-${name}`);
  }
  await dark.close();
});

assert.deepEqual(consoleErrors, [], 'no console errors');
assert.deepEqual(badResponses, [], 'no failed loads');
console.log('RESULTS ' + JSON.stringify({ ok: true }));
await browser.close();
