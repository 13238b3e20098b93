// Browser test of the dashboard's quota views (issue #31): a namespace's
// usage against its quota on the overview and on the namespace's page,
// and the live refresh of both when consumers make room. Started by the Go
// test TestDashboardQuotaBrowser (server/app), which sets the quota,
// publishes until the quota refuses, and passes the fixtures in KAIROS_E2E.
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
  const file = join(shots, `quota-${String(n).padStart(2, '0')}-${name}.png`);
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
    try { await page.screenshot({ path: join(shots, `FAILED-quota-${name.replace(/\W+/g, '-')}.png`), fullPage: true }); } catch {}
    await browser.close();
    process.exit(1);
  }
}

const max = env.max_jobs;
const held = env.jobs; // at or above max: the quota refused the last publish
const row = page.locator(`#pool-default tr[data-ns="${env.ns}"]`);

await step('the overview shows the namespace at its quota, marked full', async () => {
  await page.goto(`${ADMIN}/ui/`);
  await row.waitFor();
  await waitText(row.locator('td.usage-jobs'), `${held} / ${max}`, 10000);
  assert.equal(await row.locator('td.usage-jobs meter.quota').getAttribute('value'), '100');
  assert.equal(await row.locator('[data-quota-full]').count(), 1, 'the quota-full badge');
  // No bytes quota: the bytes held, without a limit.
  assert.match((await row.locator('td.usage-bytes').textContent()).trim(), /^\d+ B$/);
  // A namespace without a quota: its usage, no limit, no badge.
  const other = page.locator(`#pool-default tr[data-ns="${env.other_ns}"]`);
  await waitText(other.locator('td.usage-jobs'), '1', 10000);
  assert.equal(await other.locator('[data-quota-full]').count(), 0);
  await shot('overview');
});

await step('the namespace page shows the usage against its own quota', async () => {
  await row.locator(`a:text-is("${env.ns}")`).click();
  await page.waitForURL(`${ADMIN}/ui/ns/default/${env.ns}`);
  await waitText(page.locator('#usage-jobs'), String(held), 10000);
  await waitText(page.locator('#quota-jobs'), String(max), 1000);
  await waitText(page.locator('#quota-source'), 'own', 1000);
  assert.equal(await page.locator('#quota [data-quota-full]').count(), 1);
  await shot('namespace-full');
});

await step('consumers make room: the page refreshes to the new usage', async () => {
  // Consume and ACK down to one job, through the API.
  for (let i = 0; i < held - 1; i++) {
    const c = await fetch(`${API}/api/${env.ns}/${env.queue}?ttr=30&timeout=0`, { headers: { 'X-Token': env.token } });
    assert.equal(c.status, 200, `consume ${i}`);
    const job = await c.json();
    const d = await fetch(`${API}/api/${env.ns}/${env.queue}/job/${job.job_id}`, { method: 'DELETE', headers: { 'X-Token': env.token } });
    assert.equal(d.status, 204, `ACK ${i}`);
  }
  await waitText(page.locator('#usage-jobs'), '1', 20000); // the live refresh, every second
  assert.equal(await page.locator('#quota [data-quota-full]').count(), 0, 'no longer full');
  await shot('namespace-room');
  await page.goto(`${ADMIN}/ui/`);
  await waitText(row.locator('td.usage-jobs'), `1 / ${max}`, 10000);
  assert.equal(await row.locator('[data-quota-full]').count(), 0);
});

assert.deepEqual(consoleErrors, [], 'no console errors');
assert.deepEqual(badResponses, [], 'no failed loads');
console.log('RESULTS ' + JSON.stringify({ ok: true }));
await browser.close();
