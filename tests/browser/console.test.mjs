// The web console (/console) in headless Chromium against the live cluster run.sh
// started: refusals, sign-in, the live overview (delayed work per partition too), tasks
// appearing and completing, filters and pages, a cancel, a waiting task's failed tries
// and its Retry now, a drain, dead letters replayed and discarded, a screenshot of
// the overview, and its trend charts (inline SVG from /admin/v1/history) under load. Tasks are created as a user would, through MCP
// tools/call. Steps run in order and the first failure stops the run (exit 1).
//
// Environment (from run.sh): PRESA_URL, ADMIN_TOKEN, TENANT_ADMIN_TOKEN, USER_TOKEN,
// WORKER_BIN, REDIS_URL, REDIS_PREFIX, PARTITIONS, WORK, PIDS_FILE, CHROMIUM, SCREENSHOT,
// CHARTS_SCREENSHOT, and the embedded presa-gateway's GATEWAY_URL, GATEWAY_CONFIG (its
// --gateway-config file, rewritten by the reload step) and UPSTREAMS_SCREENSHOT: its
// Upstreams box (rows, a restart, a config reload) and charts under load.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFileSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run tests/browser/run.sh)`);
  return v;
};
const URL_ = env('PRESA_URL');
const ADMIN = env('ADMIN_TOKEN');
const TENANT_ADMIN = env('TENANT_ADMIN_TOKEN');
const USER = env('USER_TOKEN');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const T = 20_000; // default wait for something the page should show

// ---------------------------------------------------------------- MCP and admin clients

let rpcId = 0;
async function mcp(method, name, params, base = URL_) {
  const meta = {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
  };
  const resp = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2026-07-28',
      'Mcp-Method': method,
      ...(name ? { 'Mcp-Name': name } : {}),
      Authorization: `Bearer ${USER}`,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params: { ...params, _meta: meta } }),
  });
  const text = await resp.text();
  assert.equal(resp.status, 200, `${method}: HTTP ${resp.status} ${text}`);
  // A JSON body, or SSE whose last data line is the answer.
  const json = (resp.headers.get('content-type') || '').includes('text/event-stream')
    ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data:')).pop().slice(5))
    : JSON.parse(text);
  assert.ok(!json.error, `${method}: ${JSON.stringify(json.error)}`);
  return json.result;
}

// A slow_compute task of the user (acme/alice); its id.
async function task(seconds, label) {
  const r = await mcp('tools/call', 'slow_compute', { name: 'slow_compute', arguments: { seconds, label } });
  assert.equal(r.resultType, 'task', `slow_compute became a task: ${JSON.stringify(r)}`);
  return r.taskId;
}

async function admin(method, path, token = ADMIN, base = URL_) {
  const resp = await fetch(`${base}/admin/v1${path}`, { method, headers: { Authorization: `Bearer ${token}` } });
  const text = await resp.text();
  return { status: resp.status, body: text ? JSON.parse(text) : null };
}

async function until(what, check, ms = T) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await check();
    if (last) return last;
    await sleep(200);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

// ---------------------------------------------------------------- workers the test starts

const freePort = () => new Promise((resolve, reject) => {
  const s = createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

// A presa-worker on the test's Redis prefix, logging to WORK/<id>.log; run.sh kills it on exit.
async function startWorker(id, ...extra) {
  const port = await freePort();
  const log = openSync(`${env('WORK')}/${id}.log`, 'a');
  const child = spawn(env('WORKER_BIN'), [
    '--redis-url', env('REDIS_URL'), '--redis-prefix', env('REDIS_PREFIX'), '--partitions', env('PARTITIONS'),
    '--listen', `127.0.0.1:${port}`, '--worker-id', id, '--lease-ms', '3000', ...extra,
  ], { stdio: ['ignore', log, log] });
  appendFileSync(env('PIDS_FILE'), `${child.pid}\n`);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await until(`${id} ready`, async () => {
    try {
      return (await fetch(`http://127.0.0.1:${port}/readyz`)).ok;
    } catch {
      return false;
    }
  });
  return {
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

// Worker nodes of the cluster view, by their registry entry.
async function workers() {
  const { status, body } = await admin('GET', '/cluster');
  assert.equal(status, 200);
  return body.nodes.filter((n) => n.role === 'worker');
}

// ---------------------------------------------------------------- steps

const steps = [];
const step = (name, fn) => steps.push({ name, fn });

let browser;
let page;
const pageErrors = [];
const tid = (id) => page.getByTestId(id);

async function signIn(token, base = URL_) {
  await page.goto(`${base}/console`);
  // A kept session is checked with /whoami first: wait for the form or the signed-in page.
  await page.locator('[data-testid="token"]:visible, [data-testid="signout"]:visible').first().waitFor();
  if (await tid('signout').isVisible()) await tid('signout').click();
  await tid('token').fill(token);
  await tid('signin-submit').click();
}

// The row of task `id` in the task table.
const row = (id) => page.locator(`[data-testid="task-row"][data-task-id="${id}"]`);

step('GET /console: the page, its script and style, with the CSP and nosniff', async () => {
  for (const [path, type] of [['/console', 'text/html'], ['/console/app.js', 'text/javascript'],
    ['/console/charts.js', 'text/javascript'], ['/console/style.css', 'text/css']]) {
    const resp = await fetch(URL_ + path);
    assert.equal(resp.status, 200, path);
    assert.ok(resp.headers.get('content-type').startsWith(type), `${path}: ${resp.headers.get('content-type')}`);
    assert.match(resp.headers.get('content-security-policy'), /default-src 'self'/);
    assert.match(resp.headers.get('content-security-policy'), /frame-ancestors 'none'/);
    assert.equal(resp.headers.get('x-content-type-options'), 'nosniff');
    assert.ok(resp.headers.get('cache-control'), `${path}: Cache-Control`);
  }
});

step('launch Chromium', async () => {
  browser = await chromium.launch({
    executablePath: env('CHROMIUM'),
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.setDefaultTimeout(T);
  page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  // CSP violations and script errors are console errors; a refused fetch (401/403/404, and
  // a 409 should a Retry now race a worker's claim) is logged by Chromium as a failed
  // resource load, which is expected here.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 40[1349]/.test(m.text())) {
      pageErrors.push(`console: ${m.text()}`);
    }
  });
  page.on('dialog', (d) => d.accept());
});

step('a token without an admin scope is refused, and nothing is kept', async () => {
  await signIn(USER);
  await assertVisibleText('signin-error', /lacks the admin scope/);
  await assertVisibleText('signin-error', /presa:admin/);
  assert.equal(await tid('nav').isVisible(), false, 'no navigation for a refused token');
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'the refused token is not stored');
  await signIn('not-a-token-of-this-server');
  await assertVisibleText('signin-error', /refused \(401/);
});

step('a tenant admin signs in: its role, and a 403 on the cluster views', async () => {
  await signIn(TENANT_ADMIN);
  await assertVisibleText('whoami', /carol @ acme · tenant-admin/);
  await assertVisibleText('overview-tenant', /need the admin scope/);
  assert.equal(await tid('overview-trends').isVisible(), false, 'no cluster charts for a tenant admin');
  await page.goto(`${URL_}/console#/workers`);
  await assertVisibleText('alert', /lacks the admin scope/);
  assert.equal(await tid('alert').getAttribute('data-status'), '403');
  await tid('signout').click();
  await tid('signin').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'sign out forgets the token');
});

let firstTask;
step('an admin signs in; the overview is live', async () => {
  await signIn(ADMIN);
  await assertVisibleText('whoami', /root @ ops · admin/);
  assert.equal(await page.evaluate(() => sessionStorage.length), 1, 'the token is kept for the tab');
  await page.locator('[data-testid="live"][data-state="live"]').waitFor();
  await assertVisibleText('stat-workers', /^1$/);
  await until('the API pod and the worker in the process table', async () =>
    (await page.getByTestId('overview-node').count()) >= 2);
});

step('the overview counts completions: a rate from consecutive snapshots', async () => {
  // A reload keeps the session (sessionStorage) and starts the rate window afresh.
  await page.reload();
  await page.locator('[data-testid="live"][data-state="live"]').waitFor();
  for (let i = 0; i < 12; i++) await task(0, `quick-${i}`);
  // Worker heartbeats (every 5 s) carry the counts; the window is 10 s.
  await until('a completion rate above zero', async () => {
    const t = await tid('stat-completed-rate').textContent();
    return /^\d+\.\d\d\/s$/.test(t) && parseFloat(t) > 0;
  }, 25_000);
});

step('a task appears in the table and completes', async () => {
  await tid('nav-tasks').click();
  await tid('task-table').waitFor();
  firstTask = await task(4, 'first');
  await row(firstTask).waitFor();
  const seen = await row(firstTask).getAttribute('data-status');
  assert.equal(seen, 'working', 'seen while it runs');
  await page.locator(`[data-testid="task-row"][data-task-id="${firstTask}"][data-status="completed"]`).waitFor();
  assert.equal(await row(firstTask).locator('td').nth(3).textContent(), 'slow_compute');
});

step('filters and pages', async () => {
  await tid('filter-status').selectOption('completed');
  await tid('filter-tool').fill('slow_compute');
  await tid('filter-limit').selectOption('10');
  await tid('filter-apply').click();
  await page.waitForURL(/#\/tasks\?.*status=completed/);
  await until('a full first page', async () => (await page.getByTestId('task-row').count()) === 10);
  const statuses = await page.getByTestId('task-row').evaluateAll((rows) => rows.map((r) => r.dataset.status));
  assert.deepEqual([...new Set(statuses)], ['completed']);
  const first = await page.getByTestId('task-row').evaluateAll((rows) => rows.map((r) => r.dataset.taskId));
  assert.equal(first[0], firstTask, 'newest first');
  await tid('page-next').click();
  await page.waitForURL(/cursor=/);
  await page.locator('[data-testid="page-first"]:enabled').waitFor(); // the view has moved to the cursor
  await until('the second page', async () => (await page.getByTestId('task-row').count()) > 0);
  const second = await page.getByTestId('task-row').evaluateAll((rows) => rows.map((r) => r.dataset.taskId));
  assert.equal(second.filter((id) => first.includes(id)).length, 0, 'page 2 repeats nothing of page 1');
  await tid('page-first').click();
  await page.locator(`[data-testid="task-row"][data-task-id="${firstTask}"]`).waitFor();
  await tid('filter-status').selectOption('working');
  await tid('filter-apply').click();
  await page.waitForURL(/status=working/);
  await assertVisibleText('page-info', /^0 tasks/);
  // Created between (local time in the form): from an hour ahead finds nothing, an hour either side finds it.
  const local = (ms) => page.evaluate((t) => {
    const d = new Date(t);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }, ms);
  await tid('filter-status').selectOption('');
  await tid('filter-after').fill(await local(Date.now() - 3_600_000));
  await tid('filter-before').fill(await local(Date.now() + 3_600_000));
  await tid('filter-apply').click();
  await page.waitForURL(/createdBeforeMs=/);
  await row(firstTask).waitFor();
  await tid('filter-after').fill(await local(Date.now() + 3_600_000));
  await tid('filter-apply').click();
  await assertVisibleText('page-info', /^0 tasks/);
  assert.equal(await page.getByTestId('task-row').count(), 0);
  await tid('nav-tasks').click();
});

step('the task page: summary, timeline, outcome', async () => {
  await page.goto(`${URL_}/console#/tasks`);
  await row(firstTask).getByTestId('task-link').click();
  await assertVisibleText('task-id', new RegExp(`^${firstTask.replace(/[.]/g, '\\.')}$`));
  await assertVisibleText('task-status', /^completed$/);
  await assertVisibleText('task-tool', /^slow_compute$/);
  await assertVisibleText('task-outcome', /Completed first/);
  await assertVisibleText('task-timeline', /created[\s\S]*completed after/);
  await assertVisibleText('task-history', /completed$/);
  await assertVisibleText('task-input-requests', /^none$/);
  assert.equal(await tid('task-cancel').isDisabled(), true, 'an ended task cannot be cancelled');
});

step("the task page lists a big result's artifact, and downloads it", async () => {
  const r = await mcp('tools/call', 'big_result', { name: 'big_result', arguments: { bytes: 600000 } });
  assert.equal(r.resultType, 'task', `big_result became a task: ${JSON.stringify(r)}`);
  await until('the big result completes', async () => (await admin('GET', `/tasks/${r.taskId}`)).body?.status === 'completed');
  await page.goto(`${URL_}/console#/tasks/${encodeURIComponent(r.taskId)}`);
  await assertVisibleText('task-artifact', /content-0\.txt text\/plain; charset=utf-8, 585\.9 KiB/);
  const [download] = await Promise.all([page.waitForEvent('download'), tid('artifact-download').click()]);
  const saved = `${env('WORK')}/artifact.txt`;
  await download.saveAs(saved);
  const bytes = (await import('node:fs')).readFileSync(saved);
  assert.equal(bytes.length, 600000, 'the whole artifact');
  assert.ok(bytes.every((b, i) => b === 32 + (i % 95)), "the tool's bytes");
});

step('an unknown task is a 404, asked once', async () => {
  let asked = 0;
  const count = (r) => { if (r.url().includes('/admin/v1/tasks/p00.no-such-task')) asked += 1; };
  page.on('request', count);
  await page.goto(`${URL_}/console#/tasks/p00.no-such-task`);
  await assertVisibleText('alert', /^404 not_found: /);
  await sleep(2_500); // longer than the page's refresh period
  page.off('request', count);
  assert.equal(asked, 1, 'a refusal stops the refresh');
});

step('what the server sends is shown as text, never as HTML', async () => {
  const id = await task(30, '<img src=x data-testid=injected>');
  await page.goto(`${URL_}/console#/tasks/${encodeURIComponent(id)}`);
  await page.locator('[data-testid="task-summary"] dd', { hasText: '<img src=x data-testid=injected>' }).first().waitFor();
  assert.equal(await page.locator('img').count(), 0, 'no element was made from the label');
  await tid('task-cancel').click();
  await assertVisibleText('task-status', /^cancelled$/);
});

step('cancel a running task from its page', async () => {
  const id = await task(600, 'long');
  await page.goto(`${URL_}/console#/tasks/${encodeURIComponent(id)}`);
  await assertVisibleText('task-status', /^working$/);
  await until('the worker running it', async () => /Computing long/.test(await tid('task-summary').textContent()));
  await assertVisibleText('task-worker', /^browser-worker-/);
  assert.equal(await tid('task-cancel').isDisabled(), false);
  await tid('task-cancel').click();
  await assertVisibleText('task-action', /Cancelled/);
  await assertVisibleText('task-status', /^cancelled$/);
  assert.equal(await tid('task-cancel').isDisabled(), true);
  // The owner sees it cancelled too.
  const got = await mcp('tasks/get', id, { taskId: id });
  assert.equal(got.status, 'cancelled');
});

let waitingTask; // a flaky_job left waiting out its ten minutes (the overview counts it as delayed)
step('a task waiting out a retry: its failed try on the timeline, and Retry now runs it at once', async () => {
  // flaky_job's first try fails and asks to be tried again in ten minutes.
  const flaky = async () => {
    const r = await mcp('tools/call', 'flaky_job', { name: 'flaky_job', arguments: { failures: 1, retryAfterMs: 600000 } });
    assert.equal(r.resultType, 'task', `flaky_job became a task: ${JSON.stringify(r)}`);
    return r.taskId;
  };
  waitingTask = await flaky();
  const id = await flaky();
  await until('its first try put off', async () => typeof (await admin('GET', `/tasks/${id}`)).body?.retries?.dueAtMs === 'number');
  await page.goto(`${URL_}/console#/tasks/${encodeURIComponent(id)}`);
  await assertVisibleText('task-failed-tries', /^1$/);
  await assertVisibleText('task-failed-try', /try 1 failed: simulated outage on try 1; next try put off 10\.0 min$/);
  await assertVisibleText('task-next-try', /try 2 due \(in (9\.\d|10\.0) min\)$/);
  await assertVisibleText('task-status', /^working$/);
  assert.equal(await tid('task-retry').isVisible(), true, 'Retry now while it waits');
  const posted = [];
  const seen = (r) => { if (r.method() === 'POST' && r.url().endsWith('/retry')) posted.push(r.headers()); };
  page.on('request', seen);
  await tid('task-retry').click();
  await assertVisibleText('task-action', /^Retry requested/);
  await assertVisibleText('task-status', /^completed$/);
  page.off('request', seen);
  assert.equal(posted.length, 1, 'one POST');
  assert.ok(posted[0]['x-presa-admin'], 'marked for the guard');
  await assertVisibleText('task-outcome', /Succeeded on try 2/);
  assert.equal(await tid('task-retry').isVisible(), false, 'no Retry now once it ended');
  assert.equal(await page.getByTestId('task-next-try').count(), 0);
  await assertVisibleText('task-timeline', /try 1 failed[\s\S]*completed after/);
  // The route refuses what a web page's form would send.
  assert.equal((await admin('POST', `/tasks/${waitingTask}/retry`)).status, 403, 'unmarked: the guard refuses it');
  assert.equal((await admin('GET', `/tasks/${waitingTask}`)).body.status, 'working', 'still waiting');
});

let poisoned = [];
let poisonWorker;
let replayedAs;
step('drain the worker; a worker run with --max-deliveries 0 buries new tasks as dead letters', async () => {
  await tid('nav-workers').click();
  const workerRows = page.locator('[data-testid="worker-row"][data-role="worker"]');
  await until('one worker row', async () => (await workerRows.count()) === 1);
  assert.equal(await page.locator('[data-testid="worker-row"][data-role="api"]').count(), 1, 'the API pod is listed');
  assert.equal(await page.locator('[data-testid="worker-row"][data-role="api"] [data-testid="worker-drain"]').count(), 0,
    'an API pod has no Drain button');
  const drained = await workerRows.getAttribute('data-node-id');
  await workerRows.getByTestId('worker-drain').click();
  await page.locator(`[data-testid="worker-row"][data-node-id="${drained}"][data-draining="true"]`).waitFor();
  const drainedAt = Date.now();
  assert.equal((await workers()).find((n) => n.id === drained).draining, true);
  poisonWorker = await startWorker('browser-poison', '--max-deliveries', '0');
  await until('the poison worker in the cluster view', async () => (await workers()).some((n) => !n.draining));
  await page.locator('[data-testid="worker-row"][data-role="worker"][data-draining="false"]').waitFor();
  // The drained worker learns of its drain from its next heartbeat (every 5 s).
  await sleep(Math.max(0, 6_000 - (Date.now() - drainedAt)));
  poisoned = [await task(1, 'doomed-1'), await task(1, 'doomed-2')];
  for (const id of poisoned) {
    await until(`${id} buried`, async () => (await admin('GET', `/tasks/${encodeURIComponent(id)}`)).body.deadLetter);
  }
  await poisonWorker.stop();
});

step('dead letters: listed for the tenant, one replayed, one discarded', async () => {
  await tid('nav-dead-letters').click();
  await assertVisibleText('alert', /Name a tenant/);
  await tid('dead-tenant').fill('acme');
  await tid('dead-apply').click();
  await page.waitForURL(/#\/dead-letters\?tenant=acme/);
  const dead = (id) => page.locator(`[data-testid="dead-row"][data-task-id="${id}"]`);
  for (const id of poisoned) await dead(id).waitFor();
  assert.match(await dead(poisoned[0]).textContent(), /max_deliveries \(0\)/);
  await dead(poisoned[0]).getByTestId('dead-replay').click();
  await assertVisibleText('dead-result', /^Replayed as /);
  replayedAs = await tid('dead-result').getByTestId('task-link').textContent();
  assert.notEqual(replayedAs, poisoned[0]);
  await until('the replay linked in the table', async () =>
    (await dead(poisoned[0]).getByTestId('dead-replayed-as').textContent()) === replayedAs);
  assert.equal(await dead(poisoned[0]).getByTestId('dead-replay').count(), 0, 'a replayed letter offers no second replay');
  await dead(poisoned[1]).getByTestId('dead-discard').click();
  await assertVisibleText('dead-result', /^Discarded /);
  await dead(poisoned[1]).waitFor({ state: 'detached' });
  assert.equal((await admin('GET', '/dead-letters?tenant=acme')).body.deadLetters.some((l) => l.taskId === poisoned[1]), false);
});

step('the replay runs on a healthy worker and completes', async () => {
  await startWorker('browser-worker-2');
  await page.locator(`[data-testid="dead-row"][data-task-id="${poisoned[0]}"] [data-testid="dead-replayed-as"] a`).click();
  await assertVisibleText('task-id', new RegExp(`^${replayedAs.replace(/[.]/g, '\\.')}$`));
  await assertVisibleText('task-replay-of', new RegExp(poisoned[0].replace(/[.]/g, '\\.')));
  await assertVisibleText('task-status', /^completed$/, 30_000);
  await assertVisibleText('task-outcome', /Completed doomed-1/);
});

step('screenshot of the overview (1280x800), and the page fits a phone', async () => {
  await tid('nav-overview').click();
  await page.locator('[data-testid="live"][data-state="live"]').waitFor();
  // Some work for the picture: three tasks running, a few done (heartbeats carry both).
  for (let i = 0; i < 3; i++) await task(30, `render-${i}`);
  for (let i = 0; i < 8; i++) await task(0, `tick-${i}`);
  await until('the running tasks in the slots', async () => /^3 \//.test(await tid('stat-slots').textContent()));
  await until('a completion rate', async () => parseFloat(await tid('stat-completed-rate').textContent()) > 0);
  await until('two workers in the overview', async () => Number(await tid('stat-workers').textContent()) >= 2);
  const cards = await page.locator('[data-testid="overview-cards"] .card').count();
  assert.equal(cards, 11, 'every overview card rendered');
  // Delayed work per partition: the flaky_job left waiting out its ten minutes, not due yet.
  await until('a row per partition', async () => (await page.getByTestId('overview-partition').count()) === Number(env('PARTITIONS')));
  await assertVisibleText('stat-delayed', /^1$/);
  await assertVisibleText('stat-oldest-due', /^none due$/);
  const partition = String(Number(waitingTask.slice(1, 3)));
  const delayedRow = page.locator(`[data-testid="overview-partition"][data-partition="${partition}"]`);
  assert.equal(await delayedRow.getAttribute('data-delayed'), '1', `${waitingTask} waits in p${partition}`);
  assert.equal(await delayedRow.getByTestId('partition-oldest-due').textContent(), 'none due');
  const box = await tid('view-overview').boundingBox();
  assert.ok(box && box.width > 600 && box.height > 200, `the overview is laid out: ${JSON.stringify(box)}`);
  const png = await page.screenshot({ path: env('SCREENSHOT') });
  assert.equal(png.subarray(1, 4).toString(), 'PNG');
  assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [1280, 800], 'the PNG is 1280x800');
  // A blank page compresses to a few kB; the rendered overview is far larger.
  assert.ok(statSync(env('SCREENSHOT')).size > 20_000, `the screenshot holds a page (${png.length} bytes)`);
  const colours = await page.evaluate(() => {
    const seen = new Set();
    for (const e of document.querySelectorAll('[data-testid="view-overview"] *')) seen.add(getComputedStyle(e).color);
    return seen.size;
  });
  assert.ok(colours >= 2, 'the overview is styled (style.css loaded under the CSP)');
  await page.setViewportSize({ width: 390, height: 844 });
  for (const view of ['overview', 'tasks', 'workers']) {
    await tid(`nav-${view}`).click();
    await tid(`view-${view}`).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `#/${view} is ${overflow}px wider than a 390px phone`);
  }
});

// The points of the history's series `field` above zero.
const nonZero = (h, field) => h.points.filter((p) => p[field] > 0).length;

step('the overview charts the last minutes from /admin/v1/history, under load', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await tid('nav-overview').click();
  await tid('overview-trends').waitFor();
  // Load: a burst of quick tasks, and slow ones; the history shows every one created.
  const sum = (h, field) => h.points.reduce((n, p) => n + p[field], 0);
  const history = async () => {
    const { status, body } = await admin('GET', '/history');
    assert.equal(status, 200, JSON.stringify(body));
    return body;
  };
  const before = sum(await history(), 'created');
  for (let i = 0; i < 24; i++) await task(i % 6 === 0 ? 8 : 0, `chart-${i}`);
  // The API pod's heartbeat (every 5 s) carries its creations; the pod samples every second.
  const h = await until('the burst in the history', async () => {
    const h = await history();
    return sum(h, 'created') >= before + 24 && nonZero(h, 'completed') > 0 && h;
  }, 30_000);
  assert.equal(h.intervalMs, 1000, 'run.sh samples every second');
  assert.ok(h.points.length <= h.capacity, `bounded: ${h.points.length} of ${h.capacity}`);
  // The page redraws at each sample: at least those points, its lines above zero.
  await until('the charts drawn from the live history', async () => {
    const drawn = Number(await page.locator('[data-testid="chart-rates"] svg').getAttribute('data-points'));
    const lines = await page.locator('[data-testid="chart-rates"] [data-testid="chart-line"]').evaluateAll((ls) =>
      ls.map((l) => ({ series: l.dataset.series, count: Number(l.dataset.count), points: l.getAttribute('points') })));
    const shows = (name) => lines.some((l) => l.series === name && l.count >= 2 &&
      l.points.split(' ').some((xy) => Number(xy.split(',')[1]) < 119)); // above the zero line (y = 120)
    return drawn >= h.points.length && shows('created') && shows('completed');
  }, 30_000);
  for (const chart of ['rates', 'queues', 'oldest']) {
    const svg = page.locator(`[data-testid="chart-${chart}"] svg`);
    assert.ok(Number(await svg.getAttribute('data-points')) >= 2, `${chart}: points drawn`);
  }
  const trends = tid('overview-trends');
  await trends.scrollIntoViewIfNeeded();
  const png = await trends.screenshot({ path: env('CHARTS_SCREENSHOT') });
  assert.equal(png.subarray(1, 4).toString(), 'PNG');
  assert.ok(png.length > 10_000, `the charts screenshot holds charts (${png.length} bytes)`);
});

step("a tenant admin sees its tenant's tasks and dead letters, and no other tenant's", async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await signIn(TENANT_ADMIN);
  await assertVisibleText('whoami', /tenant-admin/);
  await page.goto(`${URL_}/console#/tasks`);
  await row(firstTask).waitFor();
  await page.goto(`${URL_}/console#/dead-letters`);
  assert.equal(await tid('dead-tenant').inputValue(), 'acme');
  assert.equal(await tid('dead-tenant').getAttribute('readonly'), '');
  await page.locator(`[data-testid="dead-row"][data-task-id="${poisoned[0]}"]`).waitFor();
  await page.goto(`${URL_}/console#/tasks?tenant=globex`);
  await assertVisibleText('alert', /lacks the admin scope.*own tenant/);
  assert.equal(await page.getByTestId('task-row').count(), 0);
});

// ---------------------------------------------------------------- a gateway's upstreams

const GW = env('GATEWAY_URL');
// The Upstreams box's row of upstream `name`, once the heartbeat (every 5 s) shows it and `pred` holds.
async function upstreamRow(name, pred = () => true) {
  const r = page.locator(`[data-testid="overview-upstream"][data-upstream="${name}"]`);
  await until(`upstream ${name}'s row`, async () => (await r.count()) === 1 && pred(r), 30_000);
  return r;
}
const cells = async (r) => (await r.locator('td').allTextContents()).map((t) => t.trim());

step("a gateway's Upstreams box: a row per upstream with its state, pool and tools", async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await signIn(ADMIN, GW);
  await assertVisibleText('whoami', /root @ ops · admin/);
  await tid('overview-upstreams-box').waitFor();
  const py = await upstreamRow('py');
  await until('py ready', async () => (await py.getAttribute('data-state')) === 'ready');
  const [name, state, inUse, , catalog] = await cells(py);
  assert.equal(name, 'py');
  assert.equal(state, 'ready');
  assert.match(inUse, /^\d+ \/ 2$/, 'the pool of 2 the config gives py');
  const { body } = await admin('GET', '/upstreams', ADMIN, GW);
  const shown = body.upstreams.find((u) => u.name === 'py');
  assert.match(catalog, new RegExp(`^v\\d+, ${shown.toolCount} tools$`), `${catalog} vs ${JSON.stringify(shown)}`);
  assert.ok(shown.toolCount > 5, 'the Python upstream lists its tools');
  await assertVisibleText('gateway-config', /^Config [0-9a-f]{16} on 1 process\(es\)\.$/);
  assert.equal(await page.getByTestId('overview-upstream').count(), 1);
});

step("Restart an upstream from the console: every process asked, its restarts counted", async () => {
  const py = await upstreamRow('py');
  const before = Number((await cells(py))[3]);
  await py.getByTestId('upstream-restart').click();
  await assertVisibleText('alert', /py: 1 process\(es\) asked to restart its connections/);
  await until('the restart counted', async () => Number((await cells(await upstreamRow('py')))[3]) > before, 30_000);
});

step('Reload config from the console: a hidden tool and an added upstream are served', async () => {
  const file = env('GATEWAY_CONFIG');
  const text = readFileSync(file, 'utf8');
  const version = (await tid('gateway-config').textContent()).split(' ')[1];
  const cmd = /command = (".*")/.exec(text)[1];
  writeFileSync(file, `${text}hide = ["add"]\n[[upstream]]\nname = "two"\ncommand = ${cmd}\nprefix = "two_"\npool = 1\n`);
  await tid('gateway-reload').click();
  await assertVisibleText('alert', /1 gateway process\(es\) asked to read their config again/);
  const names = async () => (await mcp('tools/list', null, {}, GW)).tools.map((t) => t.name);
  await until('the new catalog served', async () => {
    const n = await names();
    return !n.includes('add') && n.includes('two_pid');
  });
  await upstreamRow('two');
  await until('the new version shown', async () => {
    const line = await tid('gateway-config').textContent();
    return /^Config [0-9a-f]{16} on 1 process/.test(line) && !line.includes(version);
  }, 30_000);
  // A broken file: refused, the reason shown, the running catalog kept.
  writeFileSync(file, `${text}hide = ["add"\n`);
  await tid('gateway-reload').click();
  await assertVisibleText('gateway-config', /Last refusal \(.+\): .*TOML/, 30_000);
  assert.ok((await names()).includes('two_pid'), 'the running config serves on');
});

step('screenshot of the Upstreams box and the live charts under load', async () => {
  // Slow calls on the gateway's upstream: its pool in use, tasks created and completed.
  const calls = [];
  for (let i = 0; i < 6; i++) {
    calls.push(mcp('tools/call', 'slow_idempotent', { name: 'slow_idempotent', arguments: { steps: 20, step_ms: 300 } }, GW));
    await sleep(400);
  }
  const results = await Promise.all(calls);
  assert.ok(results.every((r) => r.resultType === 'task' || r.content), JSON.stringify(results[0]));
  for (let i = 0; i < 12; i++) await mcp('tools/call', 'two_pid', { name: 'two_pid', arguments: {} }, GW);
  await until('py in use', async () => /^[1-9]\d* \/ 2$/.test((await cells(await upstreamRow('py')))[2]), 30_000);
  // The rates chart: tasks created above the zero line (y = 120), as in the charts step.
  await until('the created tasks charted', async () => {
    const lines = await page.locator('[data-testid="chart-rates"] [data-testid="chart-line"]').evaluateAll((ls) =>
      ls.map((l) => ({ series: l.dataset.series, points: l.getAttribute('points') })));
    return lines.some((l) => l.series === 'created' && l.points.split(' ').some((xy) => Number(xy.split(',')[1]) < 119));
  }, 30_000);
  const shot = env('UPSTREAMS_SCREENSHOT');
  const trends = await tid('overview-trends').boundingBox();
  const box = await tid('overview-upstreams-box').boundingBox();
  const top = Math.max(0, trends.y - 8);
  await page.setViewportSize({ width: 1280, height: Math.ceil(box.y + box.height + 16) });
  const png = await page.screenshot({ path: shot, clip: { x: 0, y: top, width: 1280, height: box.y + box.height + 8 - top } });
  assert.equal(png.subarray(1, 4).toString(), 'PNG');
  assert.ok(png.length > 20_000, `the screenshot holds the charts and the table (${png.length} bytes)`);
  await page.setViewportSize({ width: 1280, height: 800 });
});

step('no script error and no CSP violation in the whole run', async () => {
  assert.deepEqual(pageErrors, []);
});

function assertVisibleText(testid, re, ms = T) {
  const loc = page.getByTestId(testid);
  return until(`${testid} to match ${re}`, async () => {
    if (!(await loc.isVisible())) return false;
    return re.test((await loc.textContent()) || '');
  }, ms).catch(async (e) => {
    const now = (await loc.count()) ? await loc.textContent() : '(absent)';
    throw new Error(`${e.message}; it shows ${JSON.stringify(now)}`);
  });
}

// ---------------------------------------------------------------- run

const started = Date.now();
let failed = 0;
try {
  for (const { name, fn } of steps) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok - ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed += 1;
      console.log(`not ok - ${name}\n  ${String(e.stack || e).split('\n').join('\n  ')}`);
      if (page) {
        const shot = `${env('WORK')}/failure.png`;
        await page.screenshot({ path: shot }).catch(() => {});
        console.log(`  page: ${page.url()}\n  body: ${(await page.locator('main').innerText().catch(() => '')).slice(0, 1500)}`);
      }
      break;
    }
  }
} finally {
  if (browser) await browser.close();
}
const ran = steps.length;
console.log(failed ? `FAILED (${Date.now() - started} ms)` : `all ${ran} steps passed (${Date.now() - started} ms)`);
process.exit(failed ? 1 : 0);
