// Cross-site attacks on the admin listener, in headless Chromium: a page
// of another origin (the attacker's, on another loopback port and under
// another name) tries every state-changing admin route by HTML form and by
// fetch (no-cors and cors, with credentials), once in a browser that has
// logged in to the dashboard (cached basic-auth credentials) and once in
// one that has not; then a page whose name resolves to the admin listener
// (DNS rebinding) tries them as "same-origin". Started by the Go test
// TestAdminCrossSiteBrowser (server/app), which passes the fixtures in
// KAIROS_E2E (JSON) and checks afterwards, through the API, that nothing
// changed. A control request from the dashboard's own origin must work,
// so that a broken harness cannot pass for a refusal.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';

const env = JSON.parse(process.env.KAIROS_E2E || '{}');
const ADMIN = env.admin; // http://127.0.0.1:port
const results = { attempts: 0, answered: {} };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  // evil.test is the attacker's name for the admin listener's address
  // (DNS rebinding); nothing leaves the machine.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--host-resolver-rules=MAP evil.test 127.0.0.1'],
});

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack || e}`);
    await browser.close();
    process.exit(1);
  }
}

// attack runs, in the page's own origin, every attack of env.attacks
// against base: a form POST into a frame, and fetches with the route's
// method (no-cors; cors with a form body; cors with a JSON body), all with
// credentials. It returns what the page could see of the answers.
async function attack(page, base) {
  return page.evaluate(async ({ base, attacks }) => {
    const seen = [];
    // The dashboard's double-submit check wants the same value in a
    // cookie and in the form: a page of the same site (127.0.0.1 on
    // another port) can plant that cookie, so the form fields carry it.
    document.cookie = `kairos_csrf=${'A'.repeat(43)}; path=/`;
    const withTimeout = (p, ms) => Promise.race([p, new Promise((r) => setTimeout(() => r('timeout'), ms))]);
    let i = 0;
    for (const a of attacks) {
      const url = base + a.path;
      const body = new URLSearchParams(a.form).toString();
      // 1. An HTML form (POST: all a form can send), into a frame.
      const name = `f${i++}`;
      const frame = document.createElement('iframe');
      frame.name = name;
      document.body.appendChild(frame);
      const form = document.createElement('form');
      form.method = 'POST';
      form.action = url;
      form.target = name;
      for (const [k, v] of Object.entries(a.form)) {
        const input = document.createElement('input');
        input.type = 'hidden';
        input.name = k;
        input.value = v;
        form.appendChild(input);
      }
      document.body.appendChild(form);
      const loaded = new Promise((r) => frame.addEventListener('load', () => r('loaded'), { once: true }));
      form.submit();
      seen.push(`form ${a.path}: ${await withTimeout(loaded, 10000)}`);
      // 2. fetch, as each mode lets it.
      for (const [mode, headers, b] of [
        ['no-cors', { 'Content-Type': 'application/x-www-form-urlencoded' }, body],
        ['cors', { 'Content-Type': 'application/x-www-form-urlencoded' }, body],
        ['cors', { 'Content-Type': 'application/json' }, a.json || '{}'],
      ]) {
        const init = { method: a.method, mode, credentials: 'include', headers };
        if (a.method !== 'GET' && a.method !== 'HEAD') init.body = b;
        try {
          const r = await withTimeout(fetch(url, init), 10000);
          seen.push(`fetch ${mode} ${a.method} ${a.path}: ${r === 'timeout' ? r : r.type + ' ' + r.status}`);
        } catch (e) {
          seen.push(`fetch ${mode} ${a.method} ${a.path}: ${e.name}`);
        }
      }
    }
    return seen;
  }, { base, attacks: env.attacks });
}

function record(label, seen) {
  results.attempts += env.attacks.length * 4;
  results.answered[label] = seen.filter((s) => / (200|201|204|303) *$/.test(s));
  for (const s of seen) console.log(`  ${label}: ${s}`);
}

for (const loggedIn of env.accounts ? [true, false] : [false]) {
  const label = loggedIn ? 'logged in' : 'not logged in';
  const context = await browser.newContext(loggedIn ? { httpCredentials: { username: env.user, password: env.password } } : {});
  const page = await context.newPage();
  page.setDefaultTimeout(30000);

  // (A browser without the account cannot open the dashboard: no control.)
  if (!env.accounts || loggedIn) await step(`${label}: the dashboard's own origin may change state (control)`, async () => {
    const r = await page.goto(`${ADMIN}/ui/`);
    assert.equal(r.status(), 200);
    // A token created from the admin origin itself: the harness reaches
    // the server, and same-origin requests pass the door.
    const status = await page.evaluate(async (ns) => {
      const r = await fetch(`/token/${ns}?description=control`, { method: 'POST' });
      return r.status;
    }, env.ns);
    assert.equal(status, 201);
    results.controls = (results.controls || 0) + 1;
  });

  for (const attacker of env.attackers) {
    await step(`${label}: every state-changing route from ${attacker}`, async () => {
      await page.goto(attacker);
      record(`${label} from ${attacker}`, await attack(page, ADMIN));
    });
  }

  await step(`${label}: DNS rebinding (evil.test resolves to the admin listener)`, async () => {
    const rebound = ADMIN.replace('127.0.0.1', 'evil.test');
    const r = await page.goto(`${rebound}/version`);
    assert.equal(r.status(), 403);
    // Same-origin in the browser's eyes: only the Host check stands.
    record(`${label} rebound`, await attack(page, rebound));
  });
  await context.close();
}

await browser.close();
console.log('RESULTS ' + JSON.stringify(results));
