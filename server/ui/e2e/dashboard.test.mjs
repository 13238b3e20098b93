// Browser tests of the Kairos dashboard: playwright-core drives the system
// Chromium (headless) against a real kairos-server on a real redis-server.
// Started by the Go test TestDashboardBrowser (server/app), which runs the
// server, publishes the fixtures and passes them in KAIROS_E2E (JSON); it
// checks the server-side effects of the UI actions afterwards.
//
// Each step is named; the first failure takes a screenshot, prints the
// error and exits 1. Screenshots of every page go to KAIROS_SCREENSHOTS.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const env = JSON.parse(process.env.KAIROS_E2E || '{}');
const shots = process.env.KAIROS_SCREENSHOTS;
mkdirSync(shots, { recursive: true });
const ADMIN = env.admin; // http://127.0.0.1:port
const API = env.api;
const results = {};
const ALLOW_404 = new Set([]); // handed back to the Go test on stdout (last line)

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const context = await browser.newContext({
  httpCredentials: { username: env.user, password: env.password },
  viewport: { width: 1280, height: 900 },
});
const page = await context.newPage();
page.setDefaultTimeout(30000); // generous: CI machines are shared
const consoleErrors = [];
page.on('console', (m) => {
  // failed loads are reported (with their URL) by the response listener
  if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
});
const badResponses = [];
page.on('response', (r) => {
  const u = new URL(r.url());
  if (r.status() >= 400 && !(ALLOW_404.has(u.pathname.split('/')[1]) && r.status() === 404)) badResponses.push(`${r.status()} ${u.pathname}`);
});
page.on('pageerror', (e) => consoleErrors.push(String(e)));
page.on('dialog', (d) => d.accept());
// A script the XSS fixture would run sets this; it must stay undefined.
await context.addInitScript(() => { window.__xss = undefined; });

async function api(method, path, token, body) {
  const r = await fetch(API + path, { method, headers: token ? { 'X-Token': token } : {}, body });
  await r.arrayBuffer();
  return r;
}

// waitText polls a locator until its text is want.
async function waitText(loc, want, timeout) {
  const end = Date.now() + timeout;
  let got;
  while (Date.now() < end) {
    got = await loc.textContent();
    if (want instanceof RegExp ? want.test(got) : got === want) return;
    await page.waitForTimeout(100);
  }
  throw new Error(`text ${JSON.stringify(got)} after ${timeout} ms, want ${JSON.stringify(want)}`);
}

// settle runs an input action until its effect holds: the live refresh
// replaces a region's fields until one of them is changed (app.js keeps a
// changed region), so an action may land on a field just replaced. want
// is the field's value, or for a checkbox selector the number checked.
async function settle(action, selector, want) {
  let got;
  for (let i = 0; i < 10; i++) {
    await action();
    await page.waitForTimeout(150);
    const loc = page.locator(selector);
    got = typeof want === 'number' ? await loc.count() : await loc.inputValue();
    if (got === want) return;
  }
  throw new Error(`${selector}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

let n = 0;
async function shot(name) {
  n++;
  const file = join(shots, `${String(n).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`screenshot: ${file}`);
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack || e}`);
    try { await page.screenshot({ path: join(shots, `FAILED-${name.replace(/\W+/g, '-')}.png`), fullPage: true }); } catch {}
    await browser.close();
    process.exit(1);
  }
}

const nsURL = `${ADMIN}/ui/ns/default/${env.ns}`;
const queueURL = (q) => `${ADMIN}/ui/queue/default/${env.ns}/${q}`;

await step('overview lists the namespace with its totals', async () => {
  const r = await page.goto(`${ADMIN}/ui/`);
  assert.equal(r.status(), 200);
  const csp = r.headers()['content-security-policy'];
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  await page.locator(`#pool-default a:text-is("${env.ns}")`).waitFor();
  // the throughput chart is drawn from GET /history
  await page.locator('.chart-throughput canvas').waitFor();
  await waitText(page.locator(".chart-status"), /^updated /, 30000);
  await shot('overview');
});

await step('namespace page shows the published queue in the table', async () => {
  await page.locator(`#pool-default a:text-is("${env.ns}")`).click();
  await page.waitForURL(nsURL);
  const row = page.locator(`#queues tr[data-queue="${env.queue}"]`);
  await row.waitFor();
  assert.equal(await row.locator('td.ready').textContent(), String(env.ready));
  await shot('namespace');
});

await step('the queue filter narrows the table', async () => {
  await page.fill('#queue-filter', 'xs');
  await page.waitForURL(/filter=xs/);
  await page.locator('#queues tr[data-queue="xss"]').waitFor();
  assert.equal(await page.locator(`#queues tr[data-queue="${env.queue}"]`).count(), 0);
  await page.goto(nsURL);
});

await step('sorting by ready puts the fullest queue first', async () => {
  await page.goto(`${nsURL}?sort=ready&order=desc`);
  const first = await page.locator('#queues tbody tr').first().getAttribute('data-queue');
  assert.equal(first, env.queue);
});

await step('the table refreshes by itself when jobs are published', async () => {
  await page.goto(nsURL);
  const cell = page.locator(`#queues tr[data-queue="${env.queue}"] td.ready`);
  assert.equal(await cell.textContent(), String(env.ready));
  await api('PUT', `/api/${env.ns}/${env.queue}`, env.token, 'one more');
  // no page.waitForFunction: the CSP (rightly) forbids its eval
  await waitText(cell, String(env.ready + 1), 30000);
});

await step('queue page shows counts and the next ready job; its job page opens', async () => {
  await page.goto(queueURL(env.queue));
  assert.equal(await page.locator('#q-ready').textContent(), String(env.ready + 1));
  await page.locator('.chart-latency canvas').waitFor();
  await shot('queue');
  assert.equal(await page.locator('#ready-jobs tbody tr').count(), env.ready + 1);
  await page.locator('#ready-jobs a').first().click();
  await page.waitForURL(/\/ui\/job\//);
  assert.equal(await page.locator('#job-id').textContent(), env.first_job);
  assert.match(await page.locator('#job-state').textContent(), /ready/);
  // a JSON body is shown indented
  assert.equal(await page.locator('#job-body').textContent(), '{\n  "order": 1\n}');
  await page.click('a[href="?as=base64"]');
  assert.equal(await page.locator('#job-body').textContent(), Buffer.from('{"order":1}').toString('base64'));
  await shot('job');
});

await step('delayed and in-flight jobs are listed with their due time', async () => {
  await page.goto(nsURL);
  assert.equal(await page.locator('#queues tr[data-queue="later"] td.delayed').textContent(), '1');
  assert.equal(await page.locator('#queues tr[data-queue="busy"] td.inflight').textContent(), '1');
  await page.goto(queueURL('later'));
  assert.equal(await page.locator('#q-delayed').textContent(), '1');
  const row = page.locator(`#delayed-jobs tr[data-job="${env.later_job}"]`);
  assert.match(await row.textContent(), /in 59m\d+s|in 1h0m0s/);
  await page.goto(queueURL('busy'));
  assert.equal(await page.locator('#q-inflight').textContent(), '1');
  const busy = page.locator(`#in_flight-jobs tr[data-job="${env.busy_job}"]`);
  assert.match(await busy.textContent(), /in \d+m\d+s/);
  await busy.locator('a').click();
  assert.match(await page.locator('#job-state').textContent(), /in_flight/);
  await shot('job-in-flight');
});

await step('a mistyped namespace or queue URL is a 404 page, an empty queue is not', async () => {
  for (const [url, text] of [
    [`${ADMIN}/ui/ns/default/${env.ns}-typo`, `no namespace "${env.ns}-typo" in pool "default"`],
    [queueURL('no-such-queue'), `no queue "no-such-queue" in namespace "${env.ns}"`],
  ]) {
    const r = await page.goto(url);
    assert.equal(r.status(), 404, url);
    assert.match(await page.locator('main').textContent(), new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    const i = badResponses.indexOf(`404 ${new URL(url).pathname}`);
    if (i >= 0) badResponses.splice(i, 1);
  }
  await shot('queue-not-found');
});

await step('a job is found by ID from the header of any page', async () => {
  await page.goto(`${ADMIN}/ui/`);
  await page.fill('#lookup-id', env.xss_job);
  await page.press('#lookup-id', 'Enter');
  await page.waitForURL(new RegExp(`/ui/job/default/${env.ns}/xss/${env.xss_job}`));
});

await step('XSS: a <script> body and attribute show as text and do not run', async () => {
  await page.goto(`${ADMIN}/ui/job/default/${env.ns}/xss/${env.xss_job}?as=text`);
  assert.equal(await page.locator('#job-body').textContent(), env.xss_body);
  assert.equal(await page.locator('#job-body img').count(), 0);
  assert.equal(await page.locator('#job-body script').count(), 0);
  assert.match(await page.locator('#job-attributes').textContent(), /<b>bold<\/b>/);
  assert.equal(await page.locator('#job-attributes b').count(), 0);
  await page.waitForTimeout(300); // an onerror handler would have fired by now
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await page.goto(queueURL('xss'));
  assert.match(await page.locator('#ready-jobs td.body').textContent(), /<script>/);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await shot('xss-job-as-text');
});

await step('dead letter: jobs listed with reasons; respawn one, delete one', async () => {
  await page.goto(queueURL(env.dead_queue));
  const rows = page.locator('#dead-jobs tbody tr');
  assert.equal(await rows.count(), 2);
  assert.match(await rows.first().textContent(), /ttr_expired/);
  await shot('dead-letter');
  const respawned = await rows.nth(0).getAttribute('data-job');
  const deleted = await rows.nth(1).getAttribute('data-job');
  await rows.nth(0).locator('button.respawn').click();
  await page.locator('#flash').waitFor();
  assert.equal(await page.locator('#flash').textContent(), `job ${respawned} respawned`);
  await page.locator(`#dead-jobs tr[data-job="${deleted}"] button.delete`).click();
  await page.locator('#no-dead').waitFor();
  assert.equal(await page.locator('#flash').textContent(), `dead job ${deleted} deleted`);
  results.respawned = respawned;
  results.deleted = deleted;
});

await step('dead letter: newest first, paged both ways to the oldest, filtered by reason', async () => {
  await page.goto(queueURL('dead-pages'));
  const rows = page.locator('#dead-jobs tbody tr');
  assert.equal(await rows.count(), 20);
  assert.equal(await rows.first().getAttribute('data-job'), env.dead_pages_newest);
  assert.match(await rows.first().textContent(), /nacked/);
  assert.equal(await page.locator('#dead-newer').count(), 0);
  await shot('dead-letter-newest');
  await page.click('#dead-older');
  await page.waitForURL(/dead_offset=20/);
  assert.equal(await rows.count(), 5);
  assert.equal(await rows.first().getAttribute('data-job'), env.dead_pages_21st);
  assert.equal(await rows.last().getAttribute('data-job'), env.dead_pages_oldest);
  assert.equal(await page.locator('#dead-older').count(), 0);
  await page.click('#dead-newest');
  await page.waitForURL((u) => !u.search.includes('dead_offset'));
  assert.equal(await rows.first().getAttribute('data-job'), env.dead_pages_newest);
  await page.click('#dead-oldest');
  await page.waitForURL(/dead_order=oldest/);
  assert.equal(await rows.count(), 20);
  assert.equal(await rows.last().getAttribute('data-job'), env.dead_pages_oldest);
  assert.equal(await page.locator('#dead-older').count(), 0);
  assert.equal(await page.locator('#dead-oldest').count(), 0);
  await shot('dead-letter-oldest');
  await settle(() => page.selectOption('#dead-reason', 'ttr_expired'), '#dead-reason', 'ttr_expired');
  await page.click('#dead-filter button[type=submit]');
  await page.waitForURL(/dead_reason=ttr_expired/);
  assert.match(await page.locator('#no-dead').textContent(), /No dead job ttr_expired/);
  await settle(() => page.selectOption('#dead-reason', 'nacked'), '#dead-reason', 'nacked');
  await page.click('#dead-filter button[type=submit]');
  await page.waitForURL(/dead_reason=nacked/);
  assert.equal(await rows.count(), 20);
  assert.equal(await rows.first().getAttribute('data-job'), env.dead_pages_newest);
  assert.match(await page.locator('#dead-older').getAttribute('href'), /dead_reason=nacked/);
});

await step('why: a job nacked with an error shows it on its job page and in the dead letter, newest first', async () => {
  const [oldest, card, newest] = env.why_ids;
  await page.goto(`${ADMIN}/ui/job/default/${env.ns}/why/${newest}`);
  const rows = page.locator('#job-attempts tbody tr');
  assert.equal(await rows.count(), 1);
  const row = await rows.first().textContent();
  assert.match(row, /nacked/);
  assert.match(row, /billing-1/);
  assert.equal(await rows.first().locator('pre.error').textContent(), env.why_errors[2] + '\n\tat charge (billing.go:42)');
  await shot('job-attempts');
  await page.goto(queueURL('why'));
  const dead = page.locator('#dead-jobs tbody tr');
  assert.equal(await dead.count(), 3);
  assert.deepEqual(await dead.evaluateAll((rs) => rs.map((r) => r.dataset.job)), [newest, card, oldest]);
  assert.equal(await dead.first().locator('td.error').textContent(), env.why_errors[2]);
  assert.equal(await dead.first().locator('td.error').getAttribute('title'), env.why_errors[2] + '\n\tat charge (billing.go:42)');
  await shot('dead-letter-errors');
});

await step('why: filter the dead letter by error; delete a checked job; respawn all matching', async () => {
  const [oldest, card, newest] = env.why_ids;
  await settle(() => page.fill('#dead-error', 'db timeout'), '#dead-error', 'db timeout');
  await page.click('#dead-filter button[type=submit]');
  await page.waitForURL(/dead_error=db\+timeout/);
  const dead = page.locator('#dead-jobs tbody tr');
  assert.deepEqual(await dead.evaluateAll((rs) => rs.map((r) => r.dataset.job)), [newest, oldest]);
  // "check all" checks both; unchecking the oldest leaves the newest.
  await settle(() => page.check('#dead-check-all'), 'input.dead-check:checked', 2);
  await page.locator(`#dead-jobs tr[data-job="${oldest}"] input.dead-check`).uncheck();
  await shot('dead-letter-selected');
  await page.click('#delete-selected');
  await page.waitForURL((u) => u.search === '' && u.hash === '#dead');
  assert.equal(await page.locator('#flash').textContent(), '1 dead jobs deleted');
  await page.goto(queueURL('why') + '?dead_error=card');
  assert.deepEqual(await dead.evaluateAll((rs) => rs.map((r) => r.dataset.job)), [card]);
  await page.click('#respawn-matching');
  await page.waitForURL((u) => u.search === '' && u.hash === '#dead');
  assert.equal(await page.locator('#flash').textContent(), '1 dead jobs respawned');
  assert.deepEqual(await dead.evaluateAll((rs) => rs.map((r) => r.dataset.job)), [oldest]);
});

await step('dead letter: respawn all, delete all', async () => {
  await page.goto(queueURL('failing-all'));
  assert.equal(await page.locator('#dead-jobs tbody tr').count(), 3);
  await page.click('#respawn-all');
  await page.locator('#no-dead').waitFor();
  assert.equal(await page.locator('#flash').textContent(), '3 dead jobs respawned');
  assert.equal(await page.locator('#ready-jobs tbody tr').count(), 3);
  await page.goto(queueURL('failing-del'));
  assert.equal(await page.locator('#dead-jobs tbody tr').count(), 2);
  await page.click('#delete-all');
  await page.locator('#no-dead').waitFor();
  assert.equal(await page.locator('#flash').textContent(), '2 dead jobs deleted');
  assert.equal(await page.locator('#no-ready').count(), 1);
});

await step('a ready job is deleted from its job page', async () => {
  await page.goto(`${ADMIN}/ui/job/default/${env.ns}/${env.queue}/${env.delete_job}`);
  await page.click('#delete');
  await page.waitForURL(queueURL(env.queue));
  assert.equal(await page.locator('#flash').textContent(), `job ${env.delete_job} deleted`);
  const r = await api('GET', `/api/${env.ns}/${env.queue}/job/${env.delete_job}`, env.token);
  assert.equal(r.status, 404);
});

await step('pause and resume a queue', async () => {
  await page.goto(queueURL(env.queue));
  await page.click('#pause');
  await page.locator('#paused-badge').waitFor();
  assert.equal(await page.locator('#flash').textContent(), 'queue paused');
  let r = await api('GET', `/api/${env.ns}/${env.queue}`, env.token);
  assert.equal(r.status, 404, 'a paused queue hands out no job');
  await shot('queue-paused');
  await page.click('#resume');
  await page.locator('#pause').waitFor();
  assert.equal(await page.locator('#paused-badge').count(), 0);
  r = await api('GET', `/api/${env.ns}/${env.queue}`, env.token);
  assert.equal(r.status, 200, 'a resumed queue hands out jobs');
});

await step('schedules: one made through the API shows by itself; pause and delete it from the page; create one with the form', async () => {
  const q = 'cron-ui';
  const sched = `/api/${env.ns}/${q}/schedule/nightly`;
  // Nothing was published to it: its page is a 404 whose link sets it up.
  const nf = await page.goto(queueURL(q));
  assert.equal(nf.status(), 404);
  const bad = badResponses.indexOf(`404 ${new URL(queueURL(q)).pathname}`);
  if (bad >= 0) badResponses.splice(bad, 1);
  await page.click('#error-link');
  await page.locator('#no-schedules').waitFor();
  let r = await api('PUT', `${sched}?cron=${encodeURIComponent('30 2 * * *')}&tz=Europe/Paris&missed=last`, env.token, 'report');
  assert.equal(r.status, 200);
  // the live refresh brings the new schedule in, without a reload
  const row = page.locator('#schedules-table tr[data-schedule="nightly"]');
  await row.waitFor({ timeout: 15000 });
  const text = await row.textContent();
  assert.match(text, /30 2 \* \* \*/);
  assert.match(text, /Europe\/Paris/);
  assert.match(text, /active/);
  await shot('schedules');
  await row.locator('button.pause').click();
  await page.locator('#flash').waitFor();
  assert.equal(await page.locator('#flash').textContent(), 'schedule nightly paused');
  await page.locator('#schedules-table tr[data-schedule="nightly"] button.resume').waitFor();
  r = await fetch(API + sched, { headers: { 'X-Token': env.token } });
  const body = await r.json();
  assert.equal(r.status, 200);
  assert.equal(body.paused, true, 'the schedule is paused through the API');
  assert.equal(body.next_at, null);
  await page.locator('#schedules-table tr[data-schedule="nightly"] button.delete').click();
  await page.locator('#no-schedules').waitFor();
  assert.equal(await page.locator('#flash').textContent(), 'schedule nightly deleted');
  r = await api('GET', sched, env.token);
  assert.equal(r.status, 404, 'the schedule is gone');
  // the page's form makes one (the body is stored as typed, never run)
  await page.fill('#schedule-name', 'from-ui');
  await page.fill('#schedule-cron', '@daily');
  await page.fill('#schedule-tz', 'Asia/Tokyo');
  await page.fill('#schedule-body', '<img src=x onerror="window.__xss=3">');
  await page.click('#schedule-create');
  await page.locator('#schedules-table tr[data-schedule="from-ui"]').waitFor();
  assert.equal(await page.locator('#flash').textContent(), 'schedule from-ui created');
  r = await fetch(API + `/api/${env.ns}/${q}/schedule/from-ui`, { headers: { 'X-Token': env.token } });
  const made = await r.json();
  assert.equal(made.tz, 'Asia/Tokyo');
  assert.equal(Buffer.from(made.job.data, 'base64').toString(), '<img src=x onerror="window.__xss=3">');
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await page.locator('#schedules-table tr[data-schedule="from-ui"] button.delete').click();
  await page.locator('#no-schedules').waitFor();
  results.ui_schedule = `${q}/nightly`;
});

await step('create a scoped, rate-limited token; it is shown once (a reload creates nothing), then only its fingerprint', async () => {
  await page.goto(`${ADMIN}/ui/tokens?pool=default&namespace=${env.ns}`);
  await page.fill('#token-desc', 'made in the UI');
  await page.fill('#token-queues', env.queue);
  await page.check('input[name=roles][value=publish]');
  await page.fill('#token-write', '100');
  await page.click('#token-create');
  const token = (await page.locator('#new-token').textContent()).trim();
  const fp = (await page.locator('#new-fingerprint').textContent()).trim();
  assert.match(token, /^[0-9A-Z]{26}$/);
  assert.match(fp, /^sha256-[0-9a-f]{12}$/);
  await shot('token-created');
  let r = await api('PUT', `/api/${env.ns}/${env.queue}`, token, 'with the new token');
  assert.equal(r.status, 201);
  r = await api('PUT', `/api/${env.ns}/other`, token, 'outside its scope');
  assert.equal(r.status, 403);
  // Post/redirect/get: the page shows the token once; reloading it shows
  // nothing and creates nothing.
  assert.equal(new URL(page.url()).pathname, '/ui/tokens/created');
  const again = await page.reload();
  assert.equal(again.status(), 404);
  assert.equal(await page.locator('#new-token').count(), 0);
  assert.match(await page.content(), /no new token to show/);
  const i = badResponses.indexOf('404 /ui/tokens/created');
  assert.notEqual(i, -1);
  badResponses.splice(i, 1); // that 404 is the point
  await page.goto(`${ADMIN}/ui/tokens?pool=default&namespace=${env.ns}`);
  assert.equal(await page.locator('#tokens td.desc:text-is("made in the UI")').count(), 1, 'one token, not two');
  const row = page.locator(`#tokens tr[data-fingerprint="${fp}"]`);
  await row.waitFor();
  assert.match(await row.textContent(), /made in the UI/);
  assert.match(await row.textContent(), /per 1 s: consumes unlimited, 100 publishes/);
  const html = await page.content();
  assert.ok(!html.includes(token), 'the token list never shows a token in full');
  assert.ok(!html.includes(env.token), 'nor the tokens made through the API');
  await shot('tokens');
  results.ui_token = token;
  await row.locator('button.revoke').click();
  await page.locator('#flash').waitFor();
  assert.equal(await page.locator('#flash').textContent(), `token ${fp} revoked`);
  assert.equal(await page.locator(`#tokens tr[data-fingerprint="${fp}"]`).count(), 0);
  for (let i = 0; ; i++) { // other caches forget it within 500 ms
    r = await api('PUT', `/api/${env.ns}/${env.queue}`, token, 'revoked');
    if (r.status === 401 || i > 30) break;
    await page.waitForTimeout(100);
  }
  assert.equal(r.status, 401, 'a revoked token is refused');
});

await step('state changes without the CSRF token, or from another origin, are refused', async () => {
  const target = `${queueURL(env.queue)}/pause`;
  let r = await page.request.post(target, { form: { _csrf: 'x'.repeat(43) } });
  assert.equal(r.status(), 403);
  const cookies = await context.cookies();
  const csrf = cookies.find((c) => c.name === 'kairos_csrf').value;
  r = await page.request.post(target, { form: { _csrf: csrf }, headers: { Origin: 'http://evil.example' }, maxRedirects: 0 });
  assert.equal(r.status(), 403);
  r = await page.request.post(target, { form: { _csrf: csrf }, headers: { 'Sec-Fetch-Site': 'cross-site' }, maxRedirects: 0 });
  assert.equal(r.status(), 403);
  r = await page.request.post(target, { form: { _csrf: csrf }, maxRedirects: 0 });
  assert.equal(r.status(), 303, 'the same request with the token passes');
  await page.request.post(`${queueURL(env.queue)}/resume`, { form: { _csrf: csrf }, maxRedirects: 0 });
});

await step('destroy asks for the queue name', async () => {
  await page.goto(queueURL(env.queue));
  await page.click('#destroy');
  assert.equal(await page.locator('#flash').textContent(), 'not destroyed: type the queue\'s name to confirm');
  assert.notEqual(await page.locator('#q-ready').textContent(), '0');
  await page.fill('#destroy-confirm', env.queue);
  await page.click('#destroy');
  await page.locator('#flash').waitFor();
  assert.match(await page.locator('#flash').textContent(), /^queue destroyed \(\d+ jobs deleted\)$/);
  assert.equal(await page.locator('#q-ready').textContent(), '0');
});

await step('the audit log lists the dashboard actions with the account, and no token', async () => {
  await page.goto(`${ADMIN}/ui/`);
  await page.click('#nav-audit');
  await page.waitForURL(`${ADMIN}/ui/audit`);
  const rows = page.locator('#audit tbody tr');
  const pause = rows.filter({ hasText: 'POST /ui/queue/:pool/:namespace/:queue/:action' })
    .filter({ hasText: 'action=pause' }).filter({ hasText: `queue=${env.queue}` });
  assert.ok(await pause.count() >= 1, 'the queue pause is in the audit log');
  const first = pause.first();
  assert.equal((await first.locator('td.account').textContent()).trim(), env.user);
  assert.match(await first.locator('td.outcome').textContent(), /^303 ok$/);
  // The CSRF step's refused posts are there too, as refused.
  assert.ok(await rows.filter({ hasText: 'action=pause' }).filter({ hasText: '403 refused' }).count() >= 1,
    'a refused dashboard post is in the audit log');
  // The token revoked from the page is named by its fingerprint only.
  const text = await page.locator('main').textContent();
  assert.ok(text.includes('POST /ui/tokens/revoke'), 'the revoke is in the audit log');
  assert.ok(!text.includes(results.ui_token.split(':').pop()), 'no token value on the audit page');
  assert.ok(!text.includes(env.token), 'no token value on the audit page');
  await shot('audit');
  // Filtered by account: only that account's entries.
  await page.fill('#audit-account', env.user);
  await page.click('#audit-filter button');
  await page.waitForURL(/\/ui\/audit\?account=/);
  const accounts = await page.locator('#audit tbody td.account').allTextContents();
  assert.ok(accounts.length > 0 && accounts.every((a) => a.trim() === env.user), `accounts ${accounts}`);
});

assert.deepEqual(consoleErrors, [], 'no console errors');
// pages answer 4xx on purpose in some steps (job deleted: 404 page); only
// the resources the pages load themselves are checked here
assert.deepEqual(badResponses.filter((r) => !r.includes('/ui/job/') && !r.includes('/ui/lookup')), [], 'no failed loads');
console.log('RESULTS ' + JSON.stringify(results));
await browser.close();
