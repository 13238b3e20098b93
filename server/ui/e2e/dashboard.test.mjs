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
const results = {}; // handed back to the Go test on stdout (last line)

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
page.setDefaultTimeout(15000);
const consoleErrors = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push(String(e)));
page.on('dialog', (d) => d.accept());
// A script the XSS fixture would run sets this; it must stay undefined.
await context.addInitScript(() => { window.__xss = undefined; });

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

if (process.env.KAIROS_E2E_SLICE) {
  await browser.close();
  process.exit(0);
}

assert.deepEqual(consoleErrors, [], 'no console errors');
console.log('RESULTS ' + JSON.stringify(results));
await browser.close();
