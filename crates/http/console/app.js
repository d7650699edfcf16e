// presa console: a single page over the admin API (/admin/v1, docs/admin.md).
// No framework and no build step. Every value from the server reaches the page
// through textContent (el() below), never as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'presa.console.token';
  const TERMINAL = ['completed', 'failed', 'cancelled'];
  const STATUSES = ['working', 'input_required', ...TERMINAL];
  const TASK_QUERY = ['tenant', 'subject', 'status', 'tool', 'createdAfterMs', 'createdBeforeMs', 'limit', 'cursor'];
  const FILTERS = ['tenant', 'subject', 'status', 'tool', 'limit'];
  const REFRESH_MS = 2000;
  const RATE_WINDOW = 10; // overview snapshots the rates are computed over

  const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
  const VIEWS = ['signin', 'view-overview', 'view-tasks', 'view-task', 'view-dead-letters', 'view-workers'];

  let me = null; // whoami of the signed-in token
  let generation = 0; // bumped on every route: late answers of a left view are dropped
  let live = null; // AbortController of the overview stream
  let timer = null; // refresh timer of the current view
  let chartTimer = null; // refresh timer of the overview's charts
  let history = []; // recent overview snapshots, for rates

  // ---------------------------------------------------------------- helpers

  // An element: props set as properties (never HTML), children appended as text or nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'testid') e.dataset.testid = v;
      else if (k === 'class') e.className = v;
      else if (k === 'data') Object.assign(e.dataset, v);
      else if (k === 'onclick') e.addEventListener('click', v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const taskLink = (id) => el('a', { href: '#/tasks/' + encodeURIComponent(id), testid: 'task-link' }, id);
  const pad = (n) => String(n).padStart(2, '0');

  // A Unix ms time in local time, to the second.
  function when(ms) {
    if (typeof ms !== 'number') return '—';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  // A duration in ms, short.
  function age(ms) {
    if (typeof ms !== 'number') return '—';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  // How late due delayed work is: `none due` when nothing is.
  const late = (ms) => (typeof ms === 'number' ? age(ms) : 'none due');

  // <input type=datetime-local> value <-> Unix ms (local time).
  const toLocalInput = (ms) => {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  };
  const fromLocalInput = (v) => {
    const ms = v ? new Date(v).getTime() : NaN;
    return Number.isFinite(ms) ? String(ms) : '';
  };

  function statusBadge(status, testid) {
    const known = STATUSES.includes(status) ? ` s-${status}` : '';
    return el('span', { class: 'status' + known, testid, data: { status: String(status) } }, status);
  }

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch {
      return null;
    }
  }

  // ---------------------------------------------------------------- the API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function refusalOf(resp) {
    let body = null;
    try {
      body = await resp.json();
    } catch {
      body = null;
    }
    const error = (body && body.error) || {};
    return new ApiError(resp.status, error.code || `http_${resp.status}`, error.message || resp.statusText);
  }

  async function api(method, path, tok = token()) {
    let resp;
    try {
      resp = await fetch('/admin/v1' + path, {
        method,
        // X-Presa-Admin: the server refuses state-changing requests without it
        // (a web page cannot send it cross-origin without a preflight).
        headers: { Authorization: `Bearer ${tok}`, Accept: 'application/json', 'X-Presa-Admin': 'console' },
        cache: 'no-store',
      });
    } catch (e) {
      throw new ApiError(0, 'network', `the server did not answer (${e.message})`);
    }
    if (!resp.ok) throw await refusalOf(resp);
    if (resp.status === 204) return null;
    return resp.json();
  }

  // What a refusal means, for an operator.
  function explain(e) {
    if (e.status === 401) return `This token was refused (401 ${e.code}): ${e.message}.`;
    if (e.status === 403) return `This token lacks the admin scope for this: ${e.message}.`;
    if (e.status === 0) return `Network error: ${e.message}.`;
    return `${e.status} ${e.code}: ${e.message}`;
  }

  function notice(text, kind) {
    const n = $('alert');
    n.replaceChildren();
    if (text === null) {
      n.hidden = true;
      n.dataset.outage = 'no';
      return n;
    }
    n.className = kind === 'ok' ? 'alert ok' : 'alert';
    n.dataset.kind = kind || 'error';
    n.dataset.outage = 'no';
    n.append(...(Array.isArray(text) ? text : [text]));
    n.hidden = false;
    return n;
  }

  // A failed call of the current view: 401 ends the session, anything else is shown.
  function fail(e, g) {
    if (g !== undefined && g !== generation) return;
    if (!(e instanceof ApiError)) {
      notice(`The console failed: ${e && e.message}`);
      return;
    }
    if (e.status === 401) {
      signOut(explain(e) + ' Sign in again.');
      return;
    }
    const n = notice(explain(e));
    n.dataset.status = String(e.status);
    n.dataset.outage = e.status === 0 || e.status >= 500 ? 'yes' : 'no';
  }

  // ---------------------------------------------------------------- session

  function showMe() {
    const signedIn = Boolean(me);
    $('whoami').textContent = signedIn ? `${me.subject} @ ${me.tenant} · ${me.role}` : '';
    $('whoami').dataset.role = signedIn ? me.role : '';
    $('signout').hidden = !signedIn;
    $('nav').hidden = !signedIn;
  }

  async function signIn(tok) {
    const error = $('signin-error');
    error.hidden = true;
    try {
      me = await api('GET', '/whoami', tok);
    } catch (e) {
      me = null;
      if (token() === tok) sessionStorage.removeItem(TOKEN_KEY);
      error.textContent = e instanceof ApiError ? explain(e) : String(e);
      error.dataset.status = String(e.status);
      error.hidden = false;
      return false;
    }
    sessionStorage.setItem(TOKEN_KEY, tok);
    showMe();
    if (me.role === 'admin') loadTenants();
    return true;
  }

  function signOut(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    showMe();
    stop();
    const error = $('signin-error');
    error.textContent = why || '';
    error.hidden = !why;
    route();
  }

  async function loadTenants() {
    try {
      const { tenants } = await api('GET', '/tenants');
      document.getElementById('tenants').replaceChildren(...tenants.map((t) => el('option', { value: t })));
    } catch {
      // only a convenience for the tenant inputs
    }
  }

  // ---------------------------------------------------------------- routing

  function stop() {
    generation += 1;
    if (live) live.abort();
    live = null;
    clearTimeout(timer);
    timer = null;
    clearTimeout(chartTimer);
    chartTimer = null;
  }

  function show(view) {
    for (const v of VIEWS) $(v).hidden = v !== view;
  }

  // Go to `hash`, or run its view again when the page is already there.
  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function route() {
    stop();
    notice(null);
    if (!me || !token()) {
      show('signin');
      $('token').focus();
      return;
    }
    const hash = location.hash.replace(/^#/, '');
    const q = hash.indexOf('?');
    const path = q < 0 ? hash : hash.slice(0, q);
    const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
    for (const a of document.querySelectorAll('nav a')) {
      a.classList.toggle('here', path.startsWith(a.getAttribute('href').slice(1)));
    }
    const g = generation;
    if (path === '/tasks') tasksView(params, g);
    else if (path.startsWith('/tasks/')) taskView(decodeURIComponent(path.slice('/tasks/'.length)), g);
    else if (path === '/dead-letters') deadLettersView(params, g);
    else if (path === '/workers') workersView(g);
    else if (path === '/overview') overviewView(g);
    else go('#/overview');
  }

  // Run `load` now and every REFRESH_MS while the view stays and `again()` holds; a
  // refusal (4xx) stops it, an outage (network, 503) is shown and tried again.
  function refreshing(g, load, again = () => true) {
    const tick = async () => {
      let refused = false;
      try {
        await load();
        if (g === generation && $('alert').dataset.outage === 'yes') notice(null); // it is back
      } catch (e) {
        refused = e instanceof ApiError && e.status >= 400 && e.status < 500;
        fail(e, g);
      }
      if (g === generation && !refused && again()) timer = setTimeout(tick, REFRESH_MS);
    };
    tick();
  }

  // ---------------------------------------------------------------- overview

  function overviewView(g) {
    show('view-overview');
    history = [];
    renderOverview(null);
    stream(g);
    limitsTable(g);
    upstreamsTable(g);
    trendCharts(g);
  }

  // The trend charts (charts.js) from /admin/v1/history, redrawn at each of
  // its samples while the overview stays (the admin scope only). A refusal
  // stops them; an outage is tried again.
  function trendCharts(g) {
    const box = $('overview-charts');
    box.replaceChildren();
    $('overview-trends').hidden = me.role !== 'admin' || !window.PresaCharts;
    if ($('overview-trends').hidden) return;
    const tick = async () => {
      let wait = 5000;
      try {
        const h = await api('GET', '/history');
        if (g !== generation) return;
        window.PresaCharts.render(box, h);
        wait = Math.max(1000, h.intervalMs || wait);
      } catch (e) {
        fail(e, g);
        if (e instanceof ApiError && e.status >= 400 && e.status < 500) return;
      }
      if (g === generation) chartTimer = setTimeout(tick, wait);
    };
    tick();
  }

  // Each tool's concurrency limit (permits in use and waiting, per key) and
  // rate, refreshed while the overview stays (the admin scope only).
  function limitsTable(g) {
    const tbody = $('overview-limits').tBodies[0];
    tbody.replaceChildren();
    if (me.role !== 'admin') return;
    refreshing(g, async () => {
      const { tools } = await api('GET', '/limits');
      if (g !== generation) return;
      const rows = [];
      for (const t of tools) {
        const c = t.concurrency;
        const by = c ? [c.perTenant ? 'per tenant' : '', c.perArgument ? `per ${c.perArgument}` : ''].filter(Boolean).join(', ') : '';
        const limit = c ? `${c.limit} at once${by ? ` (${by})` : ''}` : '—';
        const rate = t.rate ? `${t.rate.perSecond}/s, bursts of ${t.rate.burst}${t.rate.perTenant ? ' per tenant' : ''}` : '—';
        const keys = c && c.keys.length ? c.keys : [null];
        for (const k of keys) {
          rows.push(el('tr', { testid: 'overview-limit', data: { tool: t.tool } },
            el('td', null, el('code', null, t.tool)),
            el('td', null, limit),
            el('td', null, k ? (k.key ? k.key.replace(/\0/g, ' ') : '(all)') : '—'),
            el('td', { testid: 'limit-in-use' }, k ? `${k.inUse} / ${c.limit}` : (c ? `0 / ${c.limit}` : '—')),
            el('td', { testid: 'limit-waiting' }, k ? k.waiting : (c ? 0 : '—')),
            el('td', null, rate)));
        }
      }
      tbody.replaceChildren(...rows);
    });
  }

  // A gateway's upstreams across the cluster (/admin/v1/upstreams, from the
  // processes' heartbeats): a row per upstream, its tools' calls and errors in
  // its title, and a restart of its connections; hidden when there are none.
  // Above it, the config file each process serves (/admin/v1/gateway/config)
  // and a button that asks every process to read it again.
  function upstreamsTable(g) {
    const box = $('overview-upstreams-box');
    const tbody = $('overview-upstreams').tBodies[0];
    tbody.replaceChildren();
    box.hidden = true;
    if (me.role !== 'admin') return;
    const reload = $('gateway-reload');
    reload.onclick = async () => {
      reload.disabled = true;
      try {
        const { nodes } = await api('POST', '/gateway/reload');
        if (g !== generation) return;
        notice(`${nodes.length} gateway process(es) asked to read their config again.`, 'ok');
      } catch (e) {
        fail(e, g);
      }
      reload.disabled = false;
    };
    refreshing(g, async () => {
      const [{ upstreams }, { processes }] = await Promise.all([api('GET', '/upstreams'), api('GET', '/gateway/config')]);
      if (g !== generation) return;
      box.hidden = upstreams.length === 0;
      tbody.replaceChildren(...upstreams.map((u) => upstreamRow(u, g)));
      reload.hidden = processes.length === 0;
      $('gateway-config').textContent = configLine(processes);
    });
  }

  // What the gateway processes serve: one version (or each process's), and the latest refusal.
  function configLine(processes) {
    if (processes.length === 0) return 'No config file: flags only.';
    const versions = [...new Set(processes.map((p) => p.version))];
    let line = versions.length === 1
      ? `Config ${versions[0]} on ${processes.length} process(es).`
      : `Config versions differ: ${processes.map((p) => `${p.node} ${p.version}`).join(', ')}.`;
    const refused = processes.filter((p) => p.lastRefusal).sort((a, b) => b.lastRefusal.atMs - a.lastRefusal.atMs)[0];
    if (refused) line += ` Last refusal (${refused.node}): ${refused.lastRefusal.reason}`;
    return line;
  }

  function upstreamRow(u, g) {
    const restart = el('button', { type: 'button', testid: 'upstream-restart', class: 'danger' }, 'Restart');
    restart.onclick = async () => {
      if (!window.confirm(`Restart ${u.name}'s connections in every process? Calls in flight finish first.`)) return;
      restart.disabled = true;
      try {
        const { nodes } = await api('POST', `/upstreams/${encodeURIComponent(u.name)}/restart`);
        if (g !== generation) return;
        notice(`${u.name}: ${nodes.length} process(es) asked to restart its connections.`, 'ok');
      } catch (e) {
        fail(e, g);
      }
      restart.disabled = false;
    };
    const failing = (u.processes || []).find((p) => p.lastError);
    const perTool = (u.tools || []).map((t) => `${t.tool}: ${t.calls} calls, ${t.errors} errors`).join('\n');
    return el('tr', { testid: 'overview-upstream', data: { upstream: u.name, state: u.state }, title: perTool },
      el('td', null, el('code', null, u.name)),
      el('td', null, el('span', { class: `status s-${u.state === 'ready' ? 'completed' : u.state === 'failing' ? 'failed' : 'working'}` }, u.state)),
      el('td', { testid: 'upstream-in-use' }, `${u.inUse} / ${u.pool}`),
      el('td', { testid: 'upstream-restarts' }, u.restarts),
      el('td', null, `v${u.catalogVersion}, ${u.toolCount} tools`),
      el('td', { testid: 'upstream-calls' }, u.calls),
      el('td', { testid: 'upstream-errors' }, u.errors),
      el('td', { class: 'message' }, failing ? `${failing.node}: ${failing.lastError}` : '—'),
      el('td', null, restart));
  }

  function setLive(state) {
    $('live').textContent = state;
    $('live').dataset.state = state;
  }

  // The SSE stream with fetch(): EventSource cannot send the Authorization header.
  async function stream(g) {
    const ctl = new AbortController();
    live = ctl;
    let delay = 1000;
    while (!ctl.signal.aborted && g === generation) {
      setLive('connecting');
      try {
        const resp = await fetch('/admin/v1/events', {
          headers: { Authorization: `Bearer ${token()}`, Accept: 'text/event-stream' },
          cache: 'no-store',
          signal: ctl.signal,
        });
        if (!resp.ok) {
          const e = await refusalOf(resp);
          if (e.status === 401 || e.status === 403) {
            setLive('refused');
            fail(e, g);
            return;
          }
          throw e;
        }
        setLive('live');
        delay = 1000;
        await readEvents(resp.body, (event, data) => {
          if (event === 'overview' && g === generation) renderOverview(JSON.parse(data));
        });
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      setLive('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }

  // Parse a text/event-stream body: `event:` and `data:` lines, a blank line ends an event.
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let event = 'message';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      for (;;) {
        const i = buf.search(/[\r\n]/);
        if (i < 0 || (buf[i] === '\r' && i === buf.length - 1)) break; // a CR may be half of CRLF
        const line = buf.slice(0, i);
        buf = buf.slice(buf[i] === '\r' && buf[i + 1] === '\n' ? i + 2 : i + 1);
        if (line === '') {
          if (data.length) onEvent(event, data.join('\n'));
          event = 'message';
          data = [];
        } else if (line[0] !== ':') {
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? '' : line.slice(c + 1);
          if (v[0] === ' ') v = v.slice(1);
          if (field === 'event') event = v;
          else if (field === 'data') data.push(v);
        }
      }
    }
  }

  // Per second, over the snapshots kept: the sum of each node's growth of `field`
  // (nodes in both the first and the last snapshot; a restarted node starts at 0).
  function rate(field) {
    if (history.length < 2) return null;
    const first = history[0];
    const last = history[history.length - 1];
    const seconds = (last.nowMs - first.nowMs) / 1000;
    if (!(seconds > 0)) return null;
    const before = new Map((first.nodes || []).map((n) => [n.id, n[field] || 0]));
    let grew = 0;
    for (const n of last.nodes || []) {
      if (before.has(n.id)) grew += Math.max(0, (n[field] || 0) - before.get(n.id));
    }
    return grew / seconds;
  }

  function queueRate() {
    if (history.length < 2) return null;
    const first = history[0];
    const last = history[history.length - 1];
    const seconds = (last.nowMs - first.nowMs) / 1000;
    if (!(seconds > 0) || !first.queues || !last.queues) return null;
    return (last.queues.queued - first.queues.queued) / seconds;
  }

  const perSecond = (r) => (r === null ? '—' : `${r.toFixed(2)}/s`);

  function card(id, label, value, hint) {
    return el('div', { class: 'card', testid: `card-${id}` },
      el('span', { class: 'label' }, label),
      el('span', { class: 'value', testid: `stat-${id}` }, value),
      hint ? el('span', { class: 'hint' }, hint) : null);
  }

  function renderOverview(d) {
    const cards = $('overview-cards');
    const tbody = $('overview-nodes').tBodies[0];
    const parts = $('overview-partitions').tBodies[0];
    if (d) {
      history.push(d);
      if (history.length > RATE_WINDOW + 1) history.shift();
    }
    const q = d && d.queues;
    const nodes = (d && d.nodes) || [];
    if (d && me.role !== 'admin') {
      cards.replaceChildren(
        card('time', 'Server time', when(d.nowMs)),
        el('p', { class: 'hint', testid: 'overview-tenant' },
          `The queues and processes need the admin scope; as ${me.role} of ${me.tenant} you see its tasks and dead letters.`));
      tbody.replaceChildren();
      parts.replaceChildren();
      $('overview-partitions').hidden = true;
      return;
    }
    $('overview-partitions').hidden = false;
    const workers = nodes.filter((n) => n.role === 'worker');
    const sum = (f) => workers.reduce((a, n) => a + (n[f] || 0), 0);
    const span = history.length > 1 ? `over ${age(history[history.length - 1].nowMs - history[0].nowMs)}` : 'waiting for a second snapshot';
    cards.replaceChildren(
      card('queued', 'Queued', q ? q.queued : '—'),
      card('pending', 'Claimed', q ? q.pending : '—', 'delivered to a worker'),
      card('oldest-queued', 'Oldest queued', q ? age(q.oldestQueuedAgeMs) : '—'),
      card('oldest-pending', 'Oldest claimed', q ? age(q.oldestPendingAgeMs) : '—'),
      card('delayed', 'Delayed', q ? q.delayed : '—', 'waiting out a retry backoff'),
      card('oldest-due', 'Oldest due', q ? late(q.oldestDueAgeMs) : '—', 'how late a due retry is'),
      card('workers', 'Workers', d ? workers.length : '—', `${workers.filter((n) => n.draining).length} draining`),
      card('slots', 'Slots in use', d ? `${sum('slotsInUse')} / ${sum('slots')}` : '—'),
      card('completed-rate', 'Completed', perSecond(rate('completed')), span),
      card('failed-rate', 'Failed', perSecond(rate('failed')), span),
      card('queue-rate', 'Queue growth', perSecond(queueRate()), span),
    );
    parts.replaceChildren(...((d && d.partitions) || []).map((p) => el('tr', { testid: 'overview-partition', data: { partition: String(p.partition), delayed: String(p.delayed) } },
      el('td', null, `p${pad(p.partition)}`),
      el('td', null, p.queued),
      el('td', null, p.pending),
      el('td', null, age(p.oldestQueuedAgeMs)),
      el('td', { testid: 'partition-delayed' }, p.delayed),
      el('td', { testid: 'partition-oldest-due' }, late(p.oldestDueAgeMs)))));
    tbody.replaceChildren(...nodes.map((n) => el('tr', { testid: 'overview-node', data: { nodeId: n.id } },
      el('td', null, el('code', null, n.id)),
      el('td', null, n.role, n.draining ? ' (draining)' : ''),
      el('td', null, n.slots ? `${n.slotsInUse} / ${n.slots}` : '—'),
      el('td', null, n.completed),
      el('td', null, n.failed),
      el('td', null, `${age(d.nowMs - n.heartbeatAtMs)} ago`))));
  }

  // ---------------------------------------------------------------- tasks

  function tasksView(params, g) {
    show('view-tasks');
    const form = $('task-filters');
    for (const name of FILTERS) form.elements[name].value = params.get(name) || '';
    form.elements.tenant.placeholder = me.role === 'tenant-admin' ? me.tenant : 'every tenant';
    const after = Number(params.get('createdAfterMs'));
    const before = Number(params.get('createdBeforeMs'));
    form.elements.after.value = after > 0 ? toLocalInput(after) : '';
    form.elements.before.value = before > 0 ? toLocalInput(before) : '';
    const query = new URLSearchParams();
    for (const k of TASK_QUERY) if (params.get(k)) query.set(k, params.get(k));
    const cursor = params.get('cursor');
    $('page-first').disabled = !cursor;
    $('page-next').disabled = true;
    $('task-table').tBodies[0].replaceChildren();
    $('page-info').textContent = 'loading…';
    let next = null;
    $('page-next').onclick = () => {
      if (!next) return;
      const p = new URLSearchParams(query);
      p.set('cursor', next);
      go('#/tasks?' + p);
    };
    $('page-first').onclick = () => {
      const p = new URLSearchParams(query);
      p.delete('cursor');
      go('#/tasks' + (String(p) ? '?' + p : ''));
    };
    // The first page follows new tasks; a later page stays as it was read.
    refreshing(g, async () => {
      const page = await api('GET', '/tasks?' + query);
      if (g !== generation) return;
      next = page.next;
      $('page-next').disabled = !next;
      $('task-table').tBodies[0].replaceChildren(...page.tasks.map(taskRow));
      $('page-info').textContent = `${page.tasks.length} task${page.tasks.length === 1 ? '' : 's'}` +
        (next ? '' : ' · end of the listing') + (cursor ? '' : ' · refreshing every 2 s');
    }, () => !cursor);
  }

  function taskRow(t) {
    return el('tr', { testid: 'task-row', data: { taskId: t.taskId, status: t.status } },
      el('td', null, taskLink(t.taskId)),
      el('td', null, t.tenant),
      el('td', null, t.subject),
      el('td', null, t.tool),
      el('td', null, statusBadge(t.status, 'task-row-status')),
      el('td', { class: 'message' }, t.statusMessage || ''),
      el('td', null, when(t.createdAtMs)),
      el('td', null, when(t.updatedAtMs)));
  }

  $('task-filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = ev.target.elements;
    const p = new URLSearchParams();
    for (const name of FILTERS) if (f[name].value.trim()) p.set(name, f[name].value.trim());
    if (fromLocalInput(f.after.value)) p.set('createdAfterMs', fromLocalInput(f.after.value));
    if (fromLocalInput(f.before.value)) p.set('createdBeforeMs', fromLocalInput(f.before.value));
    go('#/tasks' + (String(p) ? '?' + p : ''));
  });

  // ---------------------------------------------------------------- one task

  function taskView(id, g) {
    show('view-task');
    $('task-id').textContent = id;
    $('task-action').textContent = '';
    for (const part of ['task-summary', 'task-timeline', 'task-input']) $(part).replaceChildren();
    $('task-outcome').textContent = 'loading…';
    const cancel = $('task-cancel');
    cancel.disabled = true;
    const retry = $('task-retry');
    retry.hidden = true;
    let ended = false;
    // Retry now: a task waiting out a failed try's backoff is queued at once.
    retry.onclick = async () => {
      retry.disabled = true;
      try {
        await api('POST', `/tasks/${encodeURIComponent(id)}/retry`);
        if (g !== generation) return;
        $('task-action').textContent = 'Retry requested: the next try is due now.';
        await load();
      } catch (e) {
        fail(e, g);
      }
      retry.disabled = false;
    };
    cancel.onclick = async () => {
      if (!window.confirm(`Cancel task ${id}?`)) return;
      cancel.disabled = true;
      try {
        const { task } = await api('POST', `/tasks/${encodeURIComponent(id)}/cancel`);
        if (g !== generation) return;
        $('task-action').textContent = `Cancelled (now ${task.status}).`;
        await load();
      } catch (e) {
        fail(e, g);
        cancel.disabled = ended;
      }
    };
    const load = async () => {
      const t = await api('GET', `/tasks/${encodeURIComponent(id)}`);
      if (g !== generation) return;
      ended = TERMINAL.includes(t.status);
      cancel.disabled = ended;
      retry.hidden = ended || !retryable(t);
      renderTask(t);
    };
    refreshing(g, load, () => !ended);
  }

  function pairs(target, rows) {
    target.replaceChildren(...rows.filter(([, v]) => v !== null && v !== undefined && v !== '').flatMap(([k, v, testid]) =>
      [el('dt', null, k), el('dd', { testid }, v)]));
  }

  // Whether a task's work waits (its next try has a due time); for a retry, unless it
  // waits for its turn under its tool's rate (made due, it would run past the rate).
  const waiting = (t) => Boolean(t.retries && typeof t.retries.dueAtMs === 'number');
  const retryable = (t) => waiting(t) && !t.retries.rateTurn;

  function renderTask(t) {
    pairs($('task-summary'), [
      ['Status', statusBadge(t.status, 'task-status')],
      ['Message', t.statusMessage],
      ['Tenant', t.tenant],
      ['Subject', t.subject],
      ['Tool', t.tool, 'task-tool'],
      ['Attempt', t.attempt],
      ['Failed tries', t.retries && t.retries.failed ? t.retries.failed : null, 'task-failed-tries'],
      ['Held by', t.worker, 'task-worker'],
      ['Revision', t.revision],
      ['Kept for', age(t.ttlMs)],
      ['Replay of', t.replayOf ? taskLink(t.replayOf) : null, 'task-replay-of'],
      ['Trace', t.traceId ? el('code', null, t.traceId) : null],
    ]);
    const steps = [el('li', null, el('time', null, when(t.createdAtMs)), ' created')];
    if (t.replayOf) steps.push(el('li', null, 'a replay of ', taskLink(t.replayOf)));
    // Status changes and failed tries, in the order they happened.
    const tries = (t.retries && t.retries.log) || [];
    const events = [
      ...(t.history || []).map((h) => [h.atMs, el('li', { testid: 'task-history' }, el('time', null, when(h.atMs)), ` ${h.status}`)]),
      ...tries.map((f) => [f.atMs, el('li', { testid: 'task-failed-try', data: { number: String(f.number) } },
        el('time', null, when(f.atMs)), ` try ${f.number} failed: ${f.reason}; next try put off ${age(f.delayMs)}`)]),
    ];
    events.sort((a, b) => a[0] - b[0]);
    steps.push(...events.map(([, li]) => li));
    if (t.deadLetter) {
      const l = t.deadLetter;
      steps.push(el('li', { testid: 'task-dead-letter' }, el('time', null, when(l.diedAtMs)),
        ` died after ${l.deliveries} deliveries: ${l.reason}`,
        l.replayedAs ? el('span', null, '; replayed as ', taskLink(l.replayedAs)) : null));
    }
    const took = age(t.updatedAtMs - t.createdAtMs);
    const ended = TERMINAL.includes(t.status);
    steps.push(el('li', null, el('time', null, when(t.updatedAtMs)),
      ended ? ` ${t.status} after ${took}` : ` last update (${t.status}), ${took} after creation`,
      t.statusMessage ? `: ${t.statusMessage}` : ''));
    if (!ended && waiting(t)) {
      const due = t.retries.dueAtMs;
      const wait = due > Date.now() ? `in ${age(due - Date.now())}` : `${age(Date.now() - due)} ago, waiting for a worker`;
      const what = t.retries.rateTurn ? "starts at its turn under the tool's rate" : 'due';
      steps.push(el('li', { class: 'now', testid: 'task-next-try' }, el('time', null, when(due)),
        ` try ${t.retries.failed + 1} ${what} (${wait})`));
    }
    if (!ended) steps.push(el('li', { class: 'now' }, `${age(Date.now() - t.createdAtMs)} since creation, still ${t.status}`));
    $('task-timeline').replaceChildren(...steps);
    const keys = (list) => (list && list.length ? list.join(', ') : 'none');
    pairs($('task-input'), [
      ['Requests', keys(t.inputRequests), 'task-input-requests'],
      ['Responses', keys(t.inputResponses), 'task-input-responses'],
    ]);
    const out = $('task-outcome');
    if (t.error) out.textContent = 'error: ' + JSON.stringify(t.error, null, 2);
    else if (t.result) out.textContent = JSON.stringify(t.result, null, 2);
    else out.textContent = ended ? 'no result' : 'not ended yet';
    renderArtifacts(t);
  }

  // The artifacts a task's result links to (big results kept outside the
  // task): name, type, size and a download through the admin API.
  const ARTIFACT_URI = 'presa://artifacts/';
  function renderArtifacts(t) {
    const own = ARTIFACT_URI + t.taskId + '/';
    const links = ((t.result && t.result.content) || []).filter((c) =>
      c && c.type === 'resource_link' && typeof c.uri === 'string' && c.uri.startsWith(own));
    const items = links.map((c) => {
      const rest = c.uri.slice(own.length);
      const button = el('button', { type: 'button', testid: 'artifact-download' }, 'download');
      button.onclick = () => downloadArtifact(t.taskId, rest, c.name || rest);
      return el('li', { testid: 'task-artifact' }, el('code', null, c.name || rest),
        ` ${c.mimeType || ''}, ${bytes(c.size)} `, button);
    });
    $('task-artifacts').replaceChildren(...(items.length ? items : [el('li', null, 'none')]));
  }

  function bytes(n) {
    if (typeof n !== 'number') return 'size unknown';
    const units = ['bytes', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return i === 0 ? `${n} bytes` : `${n.toFixed(1)} ${units[i]}`;
  }

  async function downloadArtifact(id, rest, name) {
    try {
      const path = `/admin/v1/tasks/${encodeURIComponent(id)}/artifacts/${rest.split('/').map(encodeURIComponent).join('/')}`;
      const resp = await fetch(path, { headers: { Authorization: `Bearer ${token()}` }, cache: 'no-store' });
      if (!resp.ok) throw await refusalOf(resp);
      const url = URL.createObjectURL(await resp.blob());
      const a = el('a', { href: url, download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      notice(e instanceof ApiError ? explain(e) : `Download failed: ${e.message}`, 'error');
    }
  }

  // ---------------------------------------------------------------- dead letters

  function deadLettersView(params, g) {
    show('view-dead-letters');
    const tenant = params.get('tenant') || (me.role === 'tenant-admin' ? me.tenant : '');
    const input = $('dead-tenant');
    input.value = tenant;
    input.readOnly = me.role === 'tenant-admin';
    const tbody = $('dead-table').tBodies[0];
    tbody.replaceChildren();
    const cursor = params.get('cursor');
    $('dead-first').disabled = !cursor;
    $('dead-next').disabled = true;
    $('dead-first').onclick = () => go('#/dead-letters?' + new URLSearchParams({ tenant }));
    if (!tenant) {
      notice('Name a tenant to see its dead letters.', 'ok');
      return;
    }
    const load = async () => {
      const q = new URLSearchParams({ tenant });
      if (cursor) q.set('cursor', cursor);
      const page = await api('GET', '/dead-letters?' + q);
      if (g !== generation) return;
      $('dead-next').disabled = !page.next;
      $('dead-next').onclick = () => go('#/dead-letters?' + new URLSearchParams({ tenant, cursor: page.next }));
      tbody.replaceChildren(...page.deadLetters.map((l) => deadRow(l, tenant, g, load)));
      if (!page.deadLetters.length) tbody.append(el('tr', null, el('td', { colSpan: 8, class: 'empty' }, 'No dead letters.')));
    };
    load().catch((e) => fail(e, g));
  }

  function deadRow(l, tenant, g, reload) {
    const q = new URLSearchParams({ tenant });
    const path = `/dead-letters/${encodeURIComponent(l.taskId)}`;
    // A second replay would answer the first one's task: once replayed, the link is the action.
    const replay = l.replayedAs ? null : el('button', { type: 'button', testid: 'dead-replay' }, 'Replay');
    const discard = el('button', { type: 'button', testid: 'dead-discard', class: 'danger' }, 'Discard');
    if (replay) {
      replay.onclick = async () => {
        replay.disabled = true;
        try {
          const r = await api('POST', `${path}/replay?${q}`);
          if (g !== generation) return;
          notice(el('span', { testid: 'dead-result' }, r.first ? 'Replayed as ' : 'Already replayed as ', taskLink(r.taskId)), 'ok');
          await reload();
        } catch (e) {
          fail(e, g);
          replay.disabled = false;
        }
      };
    }
    discard.onclick = async () => {
      if (!window.confirm(`Discard the dead letter of ${l.taskId}? It cannot be replayed afterwards.`)) return;
      discard.disabled = true;
      try {
        await api('DELETE', `${path}?${q}`);
        if (g !== generation) return;
        notice(el('span', { testid: 'dead-result' }, `Discarded ${l.taskId}.`), 'ok');
        await reload();
      } catch (e) {
        fail(e, g);
        discard.disabled = false;
      }
    };
    return el('tr', { testid: 'dead-row', data: { taskId: l.taskId } },
      el('td', null, taskLink(l.taskId)),
      el('td', null, l.subject),
      el('td', null, l.tool),
      el('td', { class: 'message' }, l.reason),
      el('td', null, l.deliveries),
      el('td', null, when(l.diedAtMs)),
      el('td', { testid: 'dead-replayed-as' }, l.replayedAs ? taskLink(l.replayedAs) : '—'),
      el('td', { class: 'actions' }, replay, discard));
  }

  $('dead-filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tenant = $('dead-tenant').value.trim();
    go('#/dead-letters' + (tenant ? '?' + new URLSearchParams({ tenant }) : ''));
  });

  // ---------------------------------------------------------------- workers

  function workersView(g) {
    show('view-workers');
    const tbody = $('worker-table').tBodies[0];
    tbody.replaceChildren();
    refreshing(g, async () => {
      const { nowMs, nodes } = await api('GET', '/cluster');
      if (g !== generation) return;
      tbody.replaceChildren(...nodes.map((n) => workerRow(n, nowMs, g)));
    });
  }

  function workerRow(n, nowMs, g) {
    let drain = null;
    if (n.role === 'worker' && !n.draining) {
      drain = el('button', { type: 'button', testid: 'worker-drain', class: 'danger' }, 'Drain');
      drain.onclick = async () => {
        if (!window.confirm(`Drain ${n.id}? It finishes what it holds and claims nothing new.`)) return;
        drain.disabled = true;
        try {
          const { node } = await api('POST', `/workers/${encodeURIComponent(n.id)}/drain`);
          if (g !== generation) return;
          notice(`${node.id} is draining.`, 'ok');
          go(location.hash);
        } catch (e) {
          fail(e, g);
          drain.disabled = false;
        }
      };
    }
    return el('tr', { testid: 'worker-row', data: { nodeId: n.id, role: n.role, draining: String(Boolean(n.draining)) } },
      el('td', null, el('code', null, n.id)),
      el('td', null, n.role, n.draining ? el('span', { class: 'status s-draining', testid: 'worker-draining' }, 'draining') : null),
      el('td', null, n.version),
      el('td', null, n.slots ? `${n.slotsInUse} / ${n.slots}` : '—'),
      el('td', { class: 'message' }, (n.tools || []).length > 6 ? `${n.tools.slice(0, 6).join(', ')} … (${n.tools.length})` : (n.tools || []).join(', ')),
      el('td', null, n.completed),
      el('td', null, n.failed),
      el('td', null, when(n.startedAtMs)),
      el('td', null, `${age(nowMs - n.heartbeatAtMs)} ago`),
      el('td', { class: 'actions' }, drain));
  }

  // ---------------------------------------------------------------- start

  $('signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('token');
    const tok = input.value.trim();
    if (!tok) return;
    if (await signIn(tok)) {
      input.value = '';
      route();
    }
  });
  $('signout').addEventListener('click', () => signOut());
  window.addEventListener('hashchange', route);

  (async () => {
    const tok = token();
    if (tok) await signIn(tok);
    route();
  })();
})();
