// The shared start of the dashboard's single-page browser tests
// (quota.test.mjs, groups.test.mjs): Chromium with the account's
// credentials, one page whose console errors and failed loads are
// collected, and the helpers every test uses. name prefixes the
// screenshots.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export async function start(name) {
  const env = JSON.parse(process.env.KAIROS_E2E || '{}');
  const shots = process.env.KAIROS_SCREENSHOTS;
  mkdirSync(shots, { recursive: true });
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

  // waitText waits until loc's text is want (a string, or a RegExp it matches).
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
  async function shot(what) {
    n++;
    const file = join(shots, `${name}-${String(n).padStart(2, '0')}-${what}.png`);
    await page.screenshot({ path: file, fullPage: true });
    console.log(`screenshot: ${file}`);
  }

  // step runs one named check; a failure prints it, saves a screenshot and
  // ends the test with exit status 1.
  async function step(what, fn) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok   ${what} (${Date.now() - t0} ms)`);
    } catch (e) {
      console.log(`FAIL ${what}: ${e && e.stack || e}`);
      try { await page.screenshot({ path: join(shots, `FAILED-${name}-${what.replace(/\W+/g, '-')}.png`), fullPage: true }); } catch {}
      await browser.close();
      process.exit(1);
    }
  }

  return { env, ADMIN: env.admin, API: env.api, browser, context, page, consoleErrors, badResponses, waitText, shot, step };
}
