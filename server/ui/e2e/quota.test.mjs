// Browser test of the dashboard's quota views (issue #31): a namespace's
// usage against its quota on the overview and on the namespace's page,
// and the live refresh of both when consumers make room. Started by the Go
// test TestDashboardQuotaBrowser (server/app), which sets the quota,
// publishes until the quota refuses, and passes the fixtures in KAIROS_E2E.
import assert from 'node:assert/strict';
import { start } from './harness.mjs';

const { env, ADMIN, API, browser, page, consoleErrors, badResponses, waitText, shot, step } = await start('quota');

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
