// Browser test of the queue page's groups panel (issue #32): ready and in
// flight per group, biggest first, the limit, the live refresh when
// consumers take more, and a grouped job's page. Started by the Go test
// TestDashboardGroupsBrowser (server/app), which sets group_max_in_flight 2,
// publishes 5 jobs of acct-1 and 2 of acct-2, consumes one of each and
// passes the fixtures in KAIROS_E2E.
import assert from 'node:assert/strict';
import { start } from './harness.mjs';

const { env, ADMIN, API, browser, page, consoleErrors, badResponses, waitText, shot, step } = await start('groups');

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
