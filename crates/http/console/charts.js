// presa console: the overview's trend charts, drawn as inline SVG from
// /admin/v1/history (docs/admin.md, "History"). No library, no build step:
// app.js calls PresaCharts.render(container, history) with the endpoint's JSON.
// Every value reaches the page as an attribute or textContent, never as HTML.
'use strict';

(() => {
  const SVG = 'http://www.w3.org/2000/svg';
  const W = 600; // viewBox width; the CSS scales it to the column
  const H = 120; // plot height
  const PAD = 18; // room under the plot for the time labels

  // The charts: each a title, and its series (a point's figure, as a number, or null).
  // A count a second, over the last HEARTBEAT_MS at least: the counts come
  // with each process's 5 s heartbeat, so at a shorter interval a point alone
  // would read as a spike and zeros.
  const HEARTBEAT_MS = 5000;
  const perSecond = (field) => (p, i, points) => {
    let [count, span] = [0, 0];
    for (let j = i; j >= 0 && span < HEARTBEAT_MS; j--) {
      count += points[j][field];
      span += points[j].spanMs;
    }
    return span > 0 ? (count * 1000) / span : null;
  };
  // An age in seconds; none (nothing queued, nothing due) draws as zero.
  const seconds = (field) => (p) => (typeof p[field] === 'number' ? p[field] / 1000 : 0);
  const CHARTS = [
    { id: 'rates', title: 'Tasks a second', series: [
      { name: 'created', value: perSecond('created') },
      { name: 'completed', value: perSecond('completed') },
      { name: 'failed', value: perSecond('failed') },
    ] },
    { id: 'queues', title: 'Queued and delayed work', series: [
      { name: 'queued', value: (p) => p.queued },
      { name: 'claimed', value: (p) => p.pending },
      { name: 'delayed', value: (p) => p.delayed },
    ] },
    { id: 'oldest', title: 'Oldest queued, and how late the oldest due delayed work is (s)', series: [
      { name: 'oldest queued', value: seconds('oldestQueuedAgeMs') },
      { name: 'due, late by', value: seconds('oldestDueAgeMs') },
    ] },
  ];

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function html(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === 'testid') e.dataset.testid = v;
      else if (k === 'class') e.className = v;
      else e.setAttribute(k, String(v));
    }
    e.append(...children);
    return e;
  }

  // A round upper bound for the y axis (1, 2, 5 × 10^n), at least `floor`.
  function ceiling(max, floor) {
    const m = Math.max(max, floor);
    const p = 10 ** Math.floor(Math.log10(m));
    return [1, 2, 5, 10].map((k) => k * p).find((c) => c >= m);
  }

  const short = (v) => (v >= 100 ? String(Math.round(v)) : String(Number(v.toFixed(2))));

  // One chart over [from, to] (Unix ms): its polylines, its axis labels, its legend.
  function chart(def, points, from, to) {
    const values = def.series.map((s) => points.map((p, i) => [p.atMs, s.value(p, i, points)]));
    const max = ceiling(Math.max(0, ...values.flat().map(([, v]) => v ?? 0)), 1);
    const x = (t) => ((t - from) / (to - from)) * W;
    const y = (v) => H - (v / max) * H;
    const plot = svg('svg', { viewBox: `0 0 ${W} ${H + PAD}`, role: 'img', 'aria-label': def.title,
      'data-testid': 'chart-svg', 'data-chart': def.id, 'data-points': points.length });
    for (const f of [0, 0.5, 1]) plot.append(svg('line', { class: 'grid', x1: 0, x2: W, y1: y(max * f), y2: y(max * f) }));
    plot.append(svg('text', { class: 'axis', x: 2, y: 10 }, short(max)));
    const span = (to - from) / 1000;
    const ago = span < 120 ? `${Math.round(span)} s ago` : `${Math.round(span / 60)} min ago`;
    plot.append(svg('text', { class: 'axis', x: 2, y: H + PAD - 4 }, ago));
    plot.append(svg('text', { class: 'axis', x: W - 2, y: H + PAD - 4, 'text-anchor': 'end' }, 'now'));
    def.series.forEach((s, i) => {
      // A gap (null) ends a line; each run of numbers is one polyline.
      let run = [];
      const flush = () => {
        if (run.length) {
          plot.append(svg('polyline', { class: `line s${i}`, points: run.join(' '),
            'data-testid': 'chart-line', 'data-series': s.name, 'data-count': run.length }));
        }
        run = [];
      };
      for (const [t, v] of values[i]) {
        if (typeof v === 'number' && Number.isFinite(v)) run.push(`${x(t).toFixed(1)},${y(v).toFixed(1)}`);
        else flush();
      }
      flush();
    });
    const last = (i) => {
      const v = values[i].length ? values[i][values[i].length - 1][1] : null;
      return typeof v === 'number' ? short(v) : '—';
    };
    const legend = html('p', { class: 'legend' }, ...def.series.map((s, i) =>
      html('span', { class: `key s${i}`, testid: 'chart-key' }, `${s.name} ${last(i)}`)));
    return html('figure', { class: 'chart', testid: `chart-${def.id}` }, html('figcaption', {}, def.title), plot, legend);
  }

  // Draw every chart of `history` (the /admin/v1/history answer) into `container`.
  function render(container, history) {
    const points = (history && Array.isArray(history.points)) ? history.points : [];
    const interval = (history && history.intervalMs) || 5000;
    const to = (history && history.nowMs) || Date.now();
    // The window, or since the oldest point when the history is younger (a
    // pod that started lately), at least a minute.
    const span = Math.max(1, (history && history.capacity) || 180) * interval;
    const oldest = points.length ? points[0].atMs - interval : to;
    const from = Math.max(to - span, Math.min(oldest, to - 60000));
    const shown = points.filter((p) => p.atMs >= from);
    container.replaceChildren(...CHARTS.map((def) => chart(def, shown, from, to)));
    container.dataset.points = String(shown.length);
  }

  window.PresaCharts = { render };
})();
