// Browser test of the queue page's groups panel (issue #32): ready and in
// flight per group, biggest first, the limit, the live refresh when
// consumers take more, and a grouped job's page. Started by the Go test
// TestDashboardGroupsBrowser (server/app), which sets group_max_in_flight 2,
// publishes 5 jobs of acct-1 and 2 of acct-2, consumes one of each and
// passes the fixtures in KAIROS_E2E.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const env = JSON.parse(process.env.KAIROS_E2E || '{}');
const shots = process.env.KAIROS_SCREENSHOTS;
mkdirSync(shots, { recursive: true });
const ADMIN = env.admin;
const API = env.api;

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
page.setDefaultTimeout(30000);
const consoleErrors = [];
page.on('console', (m) => {
  if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
});
page.on('pageerror', (e) => consoleErrors.push(String(e)));
const badResponses = [];
page.on('response', (r) => { if (r.status() >= 400) badResponses.push(`${r.status()} ${new URL(r.url()).pathname}`); });

async function waitText(loc, want, timeout) {
  const end = Date.now() + timeout;
  let got;
  while (Date.now() < end) {
    got = (await loc.textContent()).trim();
    if (want instanceof RegExp ? want.test(got) : got === want) return;
    await page.waitForTimeout(100);
  }
  throw new Error(`text ${JSON.stringify(got)} after ${timeout} ms, want ${JSON.stringify(want)}`);
}

let n = 0;
async function shot(name) {
  n++;
  const file = join(shots, `groups-${String(n).padStart(2, '0')}-${name}.png`);
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
    try { await page.screenshot({ path: join(shots, `FAILED-groups-${name.replace(/\W+/g, '-')}.png`), fullPage: true }); } catch {}
    await browser.close();
    process.exit(1);
  }
}

const queueURL = `${ADMIN}/ui/queue/default/${env.ns}/${env.queue}`;
const rows = page.locator('#groups-table tbody tr');

await step('the queue page shows the groups, biggest first, and the limit', async () => {
  await page.goto(queueURL);
  await waitText(page.locator('#groups-inflight'), '2', 10000);
  await waitText(page.locator('#group-max-in-flight'), '2', 1000);
  assert.equal(await rows.count(), 2);
  assert.equal(await rows.nth(0).getAttribute('data-group'), 'acct-1');
  assert.deepEqual(await rows.nth(0).locator('td.num').allTextContents(), ['4', '1', '1']);
  assert.equal(await rows.nth(1).getAttribute('data-group'), 'acct-2');
  assert.deepEqual(await rows.nth(1).locator('td.num').allTextContents(), ['1', '1', '1']);
  assert.equal(await page.locator('#groups-table .badge').count(), 0, 'no group at its limit yet');
  await shot('groups');
});

await step('consumers take more: the live refresh shows both groups at their limit', async () => {
  for (let i = 0; i < 3; i++) {
    const c = await fetch(`${API}/api/${env.ns}/${env.queue}?ttr=600&timeout=0`, { headers: { 'X-Token': env.token } });
    if (i < 2) assert.equal(c.status, 200, `consume ${i}`);
    else assert.equal(c.status, 404, 'every group at its limit: nothing more');
  }
  await waitText(page.locator('#groups-inflight'), '4', 20000); // the live refresh, every second
  assert.equal(await page.locator('#groups-table .badge').count(), 2);
  assert.deepEqual(await rows.nth(0).locator('td.num').allTextContents(), ['3', '2', '1']);
  await shot('groups-limited');
});

await step("a grouped job's page names its group", async () => {
  await page.goto(`${ADMIN}/ui/job/default/${env.ns}/${env.queue}/${env.held}`);
  await waitText(page.locator('#job-group'), /^acct-[12]$/, 10000);
});

assert.deepEqual(consoleErrors, [], 'no console errors');
assert.deepEqual(badResponses, [], 'no failed loads');
console.log('RESULTS ' + JSON.stringify({ ok: true }));
await browser.close();
