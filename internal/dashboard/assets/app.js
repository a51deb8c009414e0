// kin's dashboard. It reads and acts only through kin's /v1/ API (the one
// the CLI uses), authenticated by the session cookie the login set, and
// stays live on the event stream (GET /v1/events?follow=true, NDJSON). No
// framework, no build step, nothing fetched from elsewhere.
'use strict';

const $ = (sel) => document.querySelector(sel);

// The states kin reports, in the legend's order, with what they mean.
const STATES = [
  ['active', 'heartbeating'],
  ['registered', 'registered, no heartbeat yet'],
  ['stale', 'heartbeat late'],
  ['offline', 'heartbeat lost'],
  ['suspended', 'suspended'],
  ['stopping', 'stopping'],
  ['cancelled', 'stopped with its parent or by the operator'],
  ['failed', 'ended in failure'],
  ['exited', 'ended'],
  ['terminated', 'terminated'],
];
const TERMINAL = new Set(['cancelled', 'exited', 'failed', 'terminated']);
// How an ended agent ended, each with its own colour and outline shape.
const OUTCOMES = [
  ['completed', '✓', 'exited 0 on its own'],
  ['failed', '✗', 'exited non-zero, crashed or was killed'],
  ['cancelled', '⊘', 'stopped by its parent or the operator'],
];

// outcome is how an ended agent ended ('' while it lives): completed when
// its process exited 0 on its own, cancelled when it was stopped (or, with
// no process, terminated), failed otherwise.
function outcome(a) {
  if (!TERMINAL.has(a.state)) return '';
  if (a.state === 'cancelled') return 'cancelled';
  if (a.state === 'terminated') {
    if (!a.exit) return a.command ? 'failed' : 'cancelled';
    return a.exit.code === 0 && !a.exit.signal ? 'completed' : 'failed';
  }
  return 'failed';
}

// ---- time ----

const ms = (t) => (t ? Date.parse(t) : 0);
const startOf = (a) => ms(a.started_at) || ms(a.created_at);
// endOf is when the agent ended, 0 while it runs.
function endOf(a) {
  if (a.ended_at) return ms(a.ended_at);
  return TERMINAL.has(a.state) ? ms(a.updated_at) : 0;
}

// dur writes a duration as the two largest units: 4.2s, 3m 12s, 2h 5m, 3d 4h.
function dur(msec) {
  const s = Math.max(0, msec) / 1000;
  if (s < 10) return s.toFixed(1) + 's';
  if (s < 60) return Math.floor(s) + 's';
  const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${d}d ${h % 24}h`;
}

function exitText(a) {
  if (!a.exit) return '';
  if (a.exit.signal) return a.exit.signal;
  return a.exit.known === false ? 'unknown' : 'exit ' + a.exit.code;
}

// timeText is a node's third line: uptime while it runs, how long it ran
// and how it ended after.
function timeText(a, now) {
  const end = endOf(a);
  if (!end) return 'up ' + dur(now - startOf(a));
  return 'ran ' + dur(end - startOf(a)) + (a.exit ? ' · ' + exitText(a) : '');
}

// Geometry of the drawing, in SVG units.
const NODE_W = 184, NODE_H = 58, COL = 204, ROW = 112, HUMAN_H = 34;
// A big family opens with as many generations as keep it under this many
// agents drawn, and no row wider than AUTO_COLUMNS; deeper ones are folded.
const AUTO_VISIBLE = 250, AUTO_COLUMNS = 60;
// Fit never zooms out past this: a wider tree is shown from its middle.
const MIN_SCALE = 0.45;
// How many events the events view keeps, and shows a page.
const EVENT_KEEP = 500, EVENT_PAGE = 100;

const S = {
  agents: new Map(),     // id -> agent
  kids: new Map(),       // id -> [child ids], every agent
  collapsed: new Set(),  // ids whose subtree is folded
  parents: new Set(),    // ids seen with children (auto-collapse applies once)
  autoGen: Infinity,     // generations at or past this start collapsed
  selected: 0,
  matches: [],           // ids matching the search
  matchAt: -1,
  view: null,            // the SVG viewBox {x, y, w, h}
  bounds: null,
  events: [],
  lastSeq: 0,
  stages: new Set(['restricted', 'supervised', 'full']),
  view2: 'tree',         // 'tree' or 'timeline'
  evBefore: 0,           // the events page: 0 follows the latest, else events before this seq
  evPages: [],           // the 'before' of each newer page, for Newer
  eventTypes: [],        // every event type kin has, from its OpenAPI document
  fleet: false,          // the agents span hosts of a fleet: each node and panel names its host
};

// ---- the API ----

async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (opts.body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    location.assign('/login');
    throw new Error('the session ended: log in again');
  }
  const text = await r.text();
  let data = text;
  if ((r.headers.get('Content-Type') || '').startsWith('application/json')) {
    try { data = text ? JSON.parse(text) : null; } catch { /* keep the text */ }
  }
  if (!r.ok) {
    const e = new Error((data && data.message) || r.statusText || String(r.status));
    e.code = data && data.code;
    e.status = r.status;
    throw e;
  }
  return data;
}

// ---- the registry, kept fresh ----

let refreshing = null, refreshAgain = false;

// refresh reloads every agent and redraws. Calls while one runs fold into
// one more run after it, so a burst of events costs two loads, not one each.
function refresh() {
  if (refreshing) { refreshAgain = true; return refreshing; }
  refreshing = (async () => {
    try {
      const list = await api('/v1/agents');
      setAgents(list || []);
      render();
      if (S.view2 === 'timeline') renderTimeline();
      renderPanel();
    } catch (e) {
      toast(e.message, true);
    } finally {
      refreshing = null;
      if (refreshAgain) { refreshAgain = false; setTimeout(refresh, 150); }
    }
  })();
  return refreshing;
}

function setAgents(list) {
  S.agents = new Map(list.map((a) => [a.id, a]));
  S.fleet = new Set(list.map((a) => a.host || '')).size > 1;
  S.kids = new Map();
  for (const a of list) {
    if (a.parent && S.agents.has(a.parent)) {
      if (!S.kids.has(a.parent)) S.kids.set(a.parent, []);
      S.kids.get(a.parent).push(a.id);
    }
  }
  for (const ks of S.kids.values()) ks.sort((a, b) => a - b);
  // Big families open only their first generations; each agent's subtree
  // is folded the first time it is seen with children past that point.
  if (S.autoGen === Infinity && list.length > AUTO_VISIBLE) {
    const perGen = [];
    for (const a of list) perGen[a.generation] = (perGen[a.generation] || 0) + 1;
    let n = 0, g = 0;
    for (; g < perGen.length; g++) {
      n += perGen[g] || 0;
      if (n > AUTO_VISIBLE || (perGen[g] || 0) > AUTO_COLUMNS) break;
    }
    S.autoGen = Math.max(g, 1);
  }
  for (const [id] of S.kids) {
    if (S.parents.has(id)) continue;
    S.parents.add(id);
    const a = S.agents.get(id);
    if (a.generation + 1 >= S.autoGen) S.collapsed.add(id);
  }
  fillFilter('#f-responsible', list.map((a) => a.responsible));
  fillFilter('#f-role', list.map((a) => a.role));
  summary();
}

function fillFilter(sel, values) {
  const el = $(sel);
  const have = new Set([...el.options].map((o) => o.value));
  for (const v of [...new Set(values)].filter((v) => v && !have.has(v)).sort()) {
    const o = document.createElement('option');
    o.value = v;
    o.textContent = v;
    el.append(o);
  }
}

function summary() {
  const by = {};
  for (const a of S.agents.values()) by[a.state] = (by[a.state] || 0) + 1;
  const parts = STATES.filter(([s]) => by[s]).map(([s]) => `${by[s]} ${s}`);
  $('#summary').textContent = `${S.agents.size} agents` + (parts.length ? ': ' + parts.join(', ') : '');
}

// descendants lists id's descendants, parents before children.
function descendants(id, owned) {
  const out = [];
  const walk = (p) => {
    for (const k of S.kids.get(p) || []) {
      const a = S.agents.get(k);
      if (owned && a.life === 'detached') continue;
      out.push(a);
      walk(k);
    }
  };
  walk(id);
  return out;
}

function chain(id) {
  const out = [];
  for (let a = S.agents.get(id); a; a = S.agents.get(a.parent)) out.push(a);
  return out;
}

// ---- what is shown ----

function filters() {
  return { responsible: $('#f-responsible').value, role: $('#f-role').value, state: $('#f-state').value };
}

// visible returns the agents to draw: those matching the filters and, for
// context, their ancestors (drawn faded). Without filters, every agent.
function visible() {
  const f = filters();
  const any = f.responsible || f.role || f.state;
  const show = new Map();
  for (const a of S.agents.values()) {
    if (any && ((f.responsible && a.responsible !== f.responsible) || (f.role && a.role !== f.role) || (f.state && a.state !== f.state))) continue;
    show.set(a.id, true);
  }
  if (any) {
    for (const id of [...show.keys()]) {
      for (let p = S.agents.get(id).parent; p && S.agents.has(p) && !show.has(p); p = S.agents.get(p).parent) show.set(p, false);
    }
  }
  return show; // id -> matches the filters
}

// layout places the visible agents: each responsible party on top, then
// one row per generation; leaves take the next column, a parent sits
// centred over its children; a folded subtree is one leaf.
function layout(show) {
  const pos = new Map();
  const roots = [...show.keys()].filter((id) => !show.has(S.agents.get(id).parent)).sort((a, b) => a - b);
  const groups = new Map(); // responsible party -> roots
  for (const r of roots) {
    const who = S.agents.get(r).responsible || '(no responsible party)';
    if (!groups.has(who)) groups.set(who, []);
    groups.get(who).push(r);
  }
  let col = 0;
  const humans = [];
  const place = (id, row) => {
    const ks = (S.kids.get(id) || []).filter((k) => show.has(k));
    if (!ks.length || S.collapsed.has(id)) {
      pos.set(id, { x: col++ * COL, row });
      return;
    }
    for (const k of ks) place(k, row + 1);
    pos.set(id, { x: (pos.get(ks[0]).x + pos.get(ks[ks.length - 1]).x) / 2, row });
  };
  for (const [who, rs] of groups) {
    const first = col;
    for (const r of rs) place(r, S.agents.get(r).generation);
    const xs = rs.map((r) => pos.get(r).x);
    humans.push({ who, x: (Math.min(...xs) + Math.max(...xs)) / 2, roots: rs, span: [first, col] });
    col += 0.5; // a gap between families
  }
  let rows = 0;
  for (const p of pos.values()) rows = Math.max(rows, p.row);
  return { pos, humans, width: Math.max(col, 1) * COL, height: (rows + 2) * ROW + HUMAN_H };
}

const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const yOf = (row) => HUMAN_H + 40 + row * ROW;

function render() {
  const show = visible();
  const L = layout(show);
  const match = new Set(S.matches);
  const edges = [], nodes = [];
  for (const h of L.humans) {
    const cx = h.x + NODE_W / 2;
    for (const r of h.roots) {
      const p = L.pos.get(r);
      edges.push(`<path class="edge human-edge" d="M${cx},${HUMAN_H} C${cx},${HUMAN_H + 20} ${p.x + NODE_W / 2},${yOf(p.row) - 25} ${p.x + NODE_W / 2},${yOf(p.row)}"/>`);
    }
    const w = Math.max(NODE_W, 9 * h.who.length + 24);
    nodes.push(`<g class="human" data-responsible="${esc(h.who)}" transform="translate(${cx - w / 2},0)"><rect width="${w}" height="${HUMAN_H}" rx="17"/><text x="${w / 2}" y="22" text-anchor="middle">${esc(h.who)}</text></g>`);
  }
  for (const [id, p] of L.pos) {
    const a = S.agents.get(id);
    const y = yOf(p.row);
    const pp = L.pos.get(a.parent);
    if (pp) {
      edges.push(`<path class="edge${a.life === 'detached' ? ' detached' : ''}" d="M${pp.x + NODE_W / 2},${yOf(pp.row) + NODE_H} C${pp.x + NODE_W / 2},${yOf(pp.row) + NODE_H + 25} ${p.x + NODE_W / 2},${y - 25} ${p.x + NODE_W / 2},${y}"/>`);
    }
    const ks = (S.kids.get(id) || []).filter((k) => show.has(k));
    const folded = ks.length && S.collapsed.has(id);
    const oc = outcome(a);
    const cls = ['node', 'st-' + a.state];
    if (oc) cls.push('oc-' + oc);
    if (id === S.selected) cls.push('selected');
    if (match.has(id)) cls.push('match');
    if (!show.get(id)) cls.push('context');
    if (a.status === 'revoked' || a.status === 'suspended') cls.push('status-' + a.status);
    let badge = '';
    if (ks.length) {
      const n = folded ? descendants(id).filter((d) => show.has(d.id)).length : 0;
      // Below the node, on its edge down: never over the node's text.
      badge = `<g class="toggle" data-toggle="${id}" transform="translate(${NODE_W / 2},${NODE_H + 12})"><title>${folded ? 'Expand' : 'Collapse'} the subtree</title><rect x="-17" y="-9" width="34" height="18" rx="9"/><text y="4" text-anchor="middle">${folded ? '+' + n : '−'}</text></g>`;
    }
    const glyph = oc ? OUTCOMES.find(([o]) => o === oc)[1] : '';
    nodes.push(`<g class="${cls.join(' ')}" data-id="${id}" data-state="${esc(a.state)}" data-outcome="${oc}" data-status="${esc(a.status)}" data-gen="${a.generation}" data-responsible="${esc(a.responsible)}"${S.fleet ? ` data-host="${esc(a.host || '')}"` : ''} transform="translate(${p.x},${y})">` +
      `<title>#${id} ${esc(a.name)}: ${esc(a.state)}${oc ? ' (' + oc + ')' : ''}${S.fleet ? ' on host ' + esc(a.host || '-') : ''}${a.reconciling ? ', not yet checked since the daemon restarted' : ''}</title><rect width="${NODE_W}" height="${NODE_H}" rx="6"/>` +
      `<text class="name" x="10" y="18">${esc(trim(a.name, 20))}</text>${glyph ? `<text class="glyph" x="${NODE_W - 10}" y="18" text-anchor="end">${glyph}</text>` : ''}` +
      `<text class="meta" x="10" y="34">#${id} ${esc(trim(a.role || '-', 11))} · ${a.status === 'revoked' ? 'revoked' : esc(a.state)}${a.reconciling ? ' ?' : ''}</text>` +
      (S.fleet ? `<text class="meta host" x="${NODE_W - 10}" y="50" text-anchor="end">${esc(trim(a.host || '-', 10))}</text>` : '') +
      `<text class="meta time" x="10" y="50" data-time="${id}"></text>${badge}</g>`);
  }
  const svg = $('#graph');
  // Only a change is drawn: replacing the nodes under the pointer for
  // nothing would swallow the operator's clicks.
  const html = `<g class="edges">${edges.join('')}</g><g class="nodes">${nodes.join('')}</g>`;
  if (html !== S.drawn) { svg.innerHTML = html; S.drawn = html; }
  tick();
  svg.dataset.nodes = String(L.pos.size);
  S.bounds = { x: -20, y: -10, w: L.width + 40, h: L.height + 20 };
  if (!S.view) fit();
  else applyView();
}

const trim = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

// tick rewrites what the clock changes (uptimes), in place: replacing the
// nodes every second would swallow the operator's clicks.
function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll('[data-time]')) {
    const a = S.agents.get(+el.dataset.time);
    if (!a) continue;
    el.textContent = el.dataset.fmt === 'dur' ? dur((endOf(a) || now) - startOf(a)) : timeText(a, now);
  }
  if (S.view2 === 'timeline') timelineNow(now);
}

// ---- pan and zoom ----

function fit() {
  const b = S.bounds;
  if (!b) return;
  const box = $('#graph').getBoundingClientRect();
  const aspect = box.width / Math.max(box.height, 1) || 1.6;
  let w = b.w, h = b.h;
  if (w / h < aspect) w = h * aspect; else h = w / aspect;
  // Never zoom in past 1:1 (a small tree stays readable, not huge), nor
  // out past MIN_SCALE (a wide one is shown from its middle: pan, zoom or
  // search for the rest).
  w = Math.min(Math.max(w, box.width), box.width / MIN_SCALE);
  h = w / aspect;
  S.view = { x: b.x + (b.w - w) / 2, y: b.y, w, h };
  applyView();
}

function applyView() {
  const v = S.view;
  $('#graph').setAttribute('viewBox', `${v.x} ${v.y} ${v.w} ${v.h}`);
}

function centerOn(id) {
  const g = document.querySelector(`#graph .node[data-id="${id}"]`);
  if (!g) return;
  const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute('transform'));
  const box = $('#graph').getBoundingClientRect();
  const w = Math.min(S.view.w, box.width * 1.5), h = w * (box.height / box.width);
  S.view = { x: +m[1] + NODE_W / 2 - w / 2, y: +m[2] + NODE_H / 2 - h / 2, w, h };
  applyView();
}

function setupPanZoom() {
  const svg = $('#graph');
  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const box = svg.getBoundingClientRect();
    const k = Math.exp(e.deltaY * 0.0015);
    const v = S.view;
    const px = v.x + (e.clientX - box.left) / box.width * v.w;
    const py = v.y + (e.clientY - box.top) / box.height * v.h;
    S.view = { x: px - (px - v.x) * k, y: py - (py - v.y) * k, w: v.w * k, h: v.h * k };
    applyView();
  }, { passive: false });
  let drag = null;
  svg.addEventListener('pointerdown', (e) => {
    if (e.target.closest('.node, .toggle')) return;
    drag = { x: e.clientX, y: e.clientY, v: { ...S.view } };
    svg.setPointerCapture(e.pointerId);
  });
  svg.addEventListener('pointermove', (e) => {
    if (!drag) return;
    const box = svg.getBoundingClientRect();
    S.view = { ...drag.v, x: drag.v.x - (e.clientX - drag.x) / box.width * drag.v.w, y: drag.v.y - (e.clientY - drag.y) / box.height * drag.v.h };
    applyView();
  });
  svg.addEventListener('pointerup', () => { drag = null; });
  svg.addEventListener('click', (e) => {
    const t = e.target.closest('.toggle');
    if (t) {
      const id = +t.dataset.toggle;
      if (S.collapsed.has(id)) S.collapsed.delete(id); else S.collapsed.add(id);
      render();
      return;
    }
    const n = e.target.closest('.node');
    if (n) select(+n.dataset.id);
  });
}

// ---- search ----

function search(q) {
  q = q.trim().toLowerCase();
  if (!q) { S.matches = []; render(); return; }
  const byID = /^#?(\d+)$/.exec(q);
  const found = [...S.agents.values()].filter((a) => (byID ? a.id === +byID[1] : a.name.toLowerCase().includes(q))).map((a) => a.id).sort((a, b) => a - b);
  const same = found.length === S.matches.length && found.every((id, i) => id === S.matches[i]);
  S.matches = found;
  S.matchAt = same ? (S.matchAt + 1) % Math.max(found.length, 1) : 0;
  if (!found.length) { toast(`No agent's name contains "${q}"`, true); render(); return; }
  for (const id of found) for (const a of chain(id).slice(1)) S.collapsed.delete(a.id);
  const id = found[S.matchAt];
  select(id);
  centerOn(id);
  toast(`${found.length} match${found.length > 1 ? 'es' : ''}${found.length > 1 ? `: ${S.matchAt + 1} of ${found.length} (Enter for the next)` : ''}`);
}

// ---- the agent panel ----

let panelFor = 0, panelSeq = 0, panelLoaded = 0, panelExtra = null, panelTimer = 0;

function select(id) {
  if (id === S.selected) return;
  S.selected = id;
  panelFor = 0;
  $('#panel').scrollTop = 0;
  setHash();
  render();
  renderPanel();
  if (S.view2 === 'timeline') renderTimeline();
}

// renderPanel draws the selected agent's panel from the registry at once;
// the slow parts (policy and budget, events, result, log) reload at most
// once a second, and once more after the last change.
async function renderPanel() {
  const id = S.selected;
  const el = $('#panel-body');
  if (!id || !S.agents.has(id)) { $('#panel').hidden = true; live(0); return; }
  $('#panel').hidden = false;
  const a = S.agents.get(id);
  const other = panelFor !== id;
  if (other) panelExtra = null;
  redrawPanel(el, panelHTML(a, panelExtra), !other);
  live(a);
  const wait = 1000 - (Date.now() - panelLoaded);
  if (panelFor === id && wait > 0) {
    clearTimeout(panelTimer);
    panelTimer = setTimeout(renderPanel, wait);
    return;
  }
  panelFor = id;
  panelLoaded = Date.now();
  const seq = ++panelSeq;
  const extra = await loadPanel(a);
  if (seq !== panelSeq || S.selected !== id) return;
  panelExtra = extra;
  redrawPanel(el, panelHTML(S.agents.get(id) || a, extra));
}

// redrawPanel replaces the panel keeping what the operator set in it: the
// stage picked and the open details.
function redrawPanel(el, html, keep = true) {
  if (el.dataset.html === html) return;
  el.dataset.html = html;
  const stage = el.querySelector('#stage');
  const picked = keep && stage && stage.dataset.picked ? stage.value : '';
  const open = el.querySelector('details') && el.querySelector('details').open;
  el.innerHTML = html;
  tick();
  if (picked) { const s = el.querySelector('#stage'); s.value = picked; s.dataset.picked = '1'; }
  if (open && el.querySelector('details')) el.querySelector('details').open = true;
}

async function loadPanel(a) {
  const [policy, events, result] = await Promise.all([
    api(`/v1/agents/${a.id}/policy`).catch((e) => ({ error: e.message })),
    api(`/v1/events?agent=${a.id}&since=${Math.max(0, S.lastSeq - 5000)}&limit=5000`).catch(() => []),
    a.result ? api(`/v1/agents/${a.id}/result`).catch((e) => ({ error: e.message })) : null,
  ]);
  if (policy && policy.stage) S.stages.add(policy.stage);
  return { policy, events: (events || []).slice(-15).reverse(), result };
}

const fmtNum = (n) => (n == null ? '∞' : Number(n).toLocaleString('en'));

function panelHTML(a, x) {
  const ended = TERMINAL.has(a.state), oc = outcome(a);
  const rows = [
    ['role', a.role || '-'], ['status', a.status], ['generation', a.generation], ['life', a.life],
  ];
  if (S.fleet) rows.push(['host', a.host || '-']);
  // A pid is shown only while it is the agent's: after the end it may be anyone's.
  if (a.pid && !ended) rows.push(['pid', a.pid]);
  rows.push(['created', new Date(a.created_at).toLocaleString()], ['by', a.created_by]);
  // Seed 002 §4.1: its spawn was escalated to its parent by this agent.
  if (a.requested_by) rows.push(['requested by', `#${a.requested_by} (escalated; it has no more than #${a.requested_by})`]);
  if (a.started_at) rows.push(['started', new Date(a.started_at).toLocaleString()]);
  if (ended && endOf(a)) rows.push(['ended', new Date(endOf(a)).toLocaleString()]);
  rows.push([ended ? 'duration' : 'uptime', `<span data-time="${a.id}" data-fmt="dur"></span>`]);
  if (a.end_reason) rows.push(['end', a.end_reason + (a.exit ? ` (${exitText(a)})` : '')]);
  if (a.last_heartbeat) rows.push(['heartbeat', new Date(a.last_heartbeat).toLocaleTimeString()]);
  if (a.command) rows.push(['command', a.command.join(' ')]);
  const ch = chain(a.id);
  const owned = descendants(a.id, true).filter((d) => !TERMINAL.has(d.state));
  let h = `<header><h2>#${a.id} ${esc(a.name)}</h2><button type="button" class="close" data-act="close" title="Close">×</button></header>
<p><span class="state st-${esc(a.state)}${oc ? ' oc-' + oc : ''}">${esc(a.state)}</span>${oc ? ` <span class="outcome oc-${oc}">${OUTCOMES.find(([o]) => o === oc)[1]} ${oc}</span>` : ''}${a.reconciling ? ' <span class="muted">unchecked: the daemon restarted and has not yet checked its process</span>' : ''} <span class="muted">${owned.length} live descendant${owned.length === 1 ? '' : 's'}</span></p>
<dl id="facts">${rows.map(([k, v]) => `<dt>${k}</dt><dd>${String(v).startsWith('<span data-time') ? v : esc(v)}</dd>`).join('')}</dl>
<h3>Responsible</h3><ol class="chain">${ch.map((c) => `<li><a href="#" data-goto="${c.id}">#${c.id} ${esc(c.name)}</a> <span class="muted">gen ${c.generation}</span></li>`).join('')}<li class="human-li">${esc(ch[ch.length - 1].responsible)}</li></ol>
<h3>Actions</h3><div class="actions">
<button type="button" data-act="timeline" title="When each agent of this subtree ran">Timeline</button>
<button type="button" data-act="stop" class="danger"${TERMINAL.has(a.state) ? ' disabled' : ''}>Stop…</button>
<button type="button" data-act="suspend"${a.status !== 'active' ? ' disabled' : ''}>Suspend…</button>
<button type="button" data-act="resume"${a.status !== 'suspended' ? ' disabled' : ''}>Resume…</button>
<button type="button" data-act="revoke" class="danger"${a.status === 'revoked' || a.status === 'terminated' ? ' disabled' : ''}>Revoke…</button>
<span class="promote"><select id="stage" aria-label="Stage"${ended ? ' disabled' : ''}>${[...S.stages].map((s) => `<option${x && x.policy && x.policy.stage === s ? ' selected' : ''}>${esc(s)}</option>`).join('')}</select><button type="button" data-act="promote"${ended ? ' disabled' : ''}>Promote…</button></span></div>`;
  if (!x) return h + '<p class="muted">Loading…</p>';
  const p = x.policy || {};
  if (p.error) {
    h += `<h3>Policy</h3><p class="muted">${esc(p.error)}</p>`;
  } else {
    const sp = p.spend || {};
    const bar = (used, max) => {
      if (max == null) return `<span>${fmtNum(used)}</span> <span class="muted">no limit</span>`;
      const pct = Math.min(100, max > 0 ? (100 * used) / max : 100);
      return `<meter min="0" max="100" value="${pct}" high="80" optimum="0"></meter> ${fmtNum(used)} / ${fmtNum(max)}`;
    };
    h += `<h3>Policy</h3><dl><dt>stage</dt><dd>${esc(p.stage || 'none')}</dd></dl>` +
      `<details><summary>effective policy</summary><pre>${esc(JSON.stringify(p.effective, null, 2))}</pre></details>` +
      `<h3>Budget</h3><dl class="budget">` +
      `<dt>tokens</dt><dd>${bar(sp.tokens || 0, sp.max_tokens)}</dd>` +
      `<dt>cost</dt><dd>${bar(sp.cost || 0, sp.max_cost)}</dd>` +
      `<dt>subtree tokens</dt><dd>${fmtNum(sp.subtree_tokens || 0)}</dd>` +
      `<dt>subtree cost</dt><dd>${fmtNum(sp.subtree_cost || 0)}</dd>` +
      `<dt>descendants</dt><dd>${bar(sp.subtree_spawns || 0, sp.max_descendants)}</dd>` +
      (sp.deadline_at ? `<dt>deadline</dt><dd>${esc(new Date(sp.deadline_at).toLocaleString())}</dd>` : '') +
      (sp.exhausted ? `<dt>exhausted</dt><dd class="bad">${esc(sp.exhausted)}</dd>` : '') + '</dl>';
  }
  if (x.result) h += `<h3>Result</h3><pre>${esc(JSON.stringify(x.result, null, 2)).slice(0, 3000)}</pre>`;
  h += `<h3>Recent events</h3><ul class="evlist">${x.events.map((e) => `<li><span class="muted">#${e.seq} ${esc(new Date(e.time).toLocaleTimeString())}</span> ${esc(e.type)}</li>`).join('') || '<li class="muted">none</li>'}</ul>`;
  return h;
}

function setupPanel() {
  $('#panel').addEventListener('change', (e) => { if (e.target.id === 'stage') e.target.dataset.picked = '1'; });
  $('#panel').addEventListener('click', (e) => {
    const g = e.target.closest('[data-goto]');
    if (g) { e.preventDefault(); select(+g.dataset.goto); centerOn(+g.dataset.goto); return; }
    const b = e.target.closest('button[data-act]');
    if (!b) return;
    if (b.dataset.act === 'close') { S.selected = 0; setHash(); render(); renderPanel(); return; }
    if (b.dataset.act === 'timeline') { showView('timeline', S.selected); return; }
    act(b.dataset.act, S.agents.get(S.selected));
  });
}

// ---- the panel's live part: resources and the log ----

// L is the live part's state: the agent it is for, its last CPU sample,
// the log read so far and the stream following it.
const L = { id: 0, sample: null, log: '', abort: null, resTimer: 0 };
const LOG_KEEP = 1 << 20; // characters of log the page keeps

const fmtBytes = (n) => (n < 1024 ? n + ' B' : n < 1 << 20 ? (n / 1024).toFixed(1) + ' KiB' : n < 1 << 30 ? (n / (1 << 20)).toFixed(1) + ' MiB' : (n / (1 << 30)).toFixed(2) + ' GiB');

// live builds the panel's live part for agent a (once per agent) and
// keeps it going: resources every second while it runs, its log followed.
function live(a) {
  const id = a ? a.id : 0;
  const el = $('#panel-live');
  if (id === L.id) {
    if (a && TERMINAL.has(a.state) && L.resTimer) { clearInterval(L.resTimer); L.resTimer = 0; $('#res').innerHTML = '<dt>CPU</dt><dd class="muted">ended</dd>'; }
    return;
  }
  if (L.abort) L.abort.abort();
  clearInterval(L.resTimer);
  Object.assign(L, { id, sample: null, log: '', abort: null, resTimer: 0 });
  if (!a) { el.innerHTML = ''; return; }
  const running = !TERMINAL.has(a.state) && a.pid;
  let h = '';
  if (a.command) {
    h += `<h3>Resources</h3><dl id="res">${running ? '<dt>CPU</dt><dd id="cpu" class="muted">measuring…</dd>' : '<dt>CPU</dt><dd class="muted">not running</dd>'}</dl>`;
    h += `<h3>Log</h3><div class="logbar"><label title="Show lines as the agent writes them"><input id="log-follow" type="checkbox"${running ? ' checked' : ''}> follow</label>` +
      `<input id="log-search" type="search" placeholder="Search the log" aria-label="Search the log">` +
      `<a id="log-download" href="/v1/agents/${id}/logs" download="kin-agent-${id}.log">Download</a></div>` +
      `<p id="log-count" class="muted"></p><pre id="log" class="log"></pre>`;
  }
  el.innerHTML = h;
  if (!a.command) return;
  $('#log-follow').addEventListener('change', () => readLog(id));
  $('#log-search').addEventListener('input', showLog);
  readLog(id);
  if (running) {
    resources(id);
    L.resTimer = setInterval(() => resources(id), 1000);
  }
}

// resources samples the agent's cgroup; CPU is the share of one core it
// used since the last sample.
async function resources(id) {
  let r;
  try {
    r = await api(`/v1/agents/${id}/resources`);
  } catch (e) {
    if (L.id === id) { clearInterval(L.resTimer); L.resTimer = 0; $('#res').innerHTML = `<dt>CPU</dt><dd class="muted">${esc(e.message)}</dd>`; }
    return;
  }
  if (L.id !== id) return;
  const prev = L.sample;
  L.sample = { t: Date.parse(r.at), cpu: r.cpu_usage_usec, sub: r.subtree_cpu_usage_usec };
  if (!prev) return;
  const dt = (L.sample.t - prev.t) * 1000;
  if (dt <= 0) return;
  const pct = (100 * (L.sample.cpu - prev.cpu)) / dt, sub = (100 * (L.sample.sub - prev.sub)) / dt;
  let h = `<dt>CPU</dt><dd id="cpu" data-pct="${pct.toFixed(1)}"><meter min="0" max="100" value="${Math.min(pct, 100)}"></meter> ${pct.toFixed(0)}% of a core</dd>` +
    `<dt>subtree CPU</dt><dd>${sub.toFixed(0)}%</dd>` +
    `<dt>CPU time</dt><dd>${dur(r.cpu_usage_usec / 1000)} <span class="muted">(subtree ${dur(r.subtree_cpu_usage_usec / 1000)})</span></dd>`;
  // Only where the controllers exist; absent is not zero.
  if (r.memory_bytes != null) h += `<dt>memory</dt><dd id="mem">${fmtBytes(r.memory_bytes)}</dd>`;
  if (r.pids != null) h += `<dt>pids</dt><dd id="pids">${r.pids}</dd>`;
  for (const l of r.limits || []) h += `<dt>limit ${esc(l.name)}</dt><dd class="limit" data-name="${esc(l.name)}" data-scope="${esc(l.scope)}" title="${esc(l.note || '')}">${limitText(l, r)}</dd>`;
  $('#res').innerHTML = h;
}

// limitText is one kernel limit against its live use, with what it binds
// and how on this host: "3 of 50 tasks, whole subtree (pids.max)".
function limitText(l, r) {
  let v;
  switch (l.name) {
    case 'pids': v = (r.pids != null ? `${r.pids} of ` : '') + `${l.value} tasks`; break;
    case 'memory': v = (r.memory_bytes != null ? `${fmtBytes(r.memory_bytes)} of ` : '') + fmtBytes(l.value); break;
    case 'memory_bytes': v = fmtBytes(l.value); break;
    case 'cpu': v = `${l.value} cores`; break;
    case 'cpu_seconds': v = `${l.value} CPU seconds`; break;
    default: v = `${l.value}`;
  }
  const scope = { subtree: 'whole subtree', agent: 'its own processes', process: 'each process' }[l.scope];
  return esc(v) + (scope ? ` <span class="muted">${esc(scope)} (${esc(l.by)})</span>` : ' <span class="muted">not enforced here</span>');
}

// readLog reads the agent's log: its last 64 KiB, and with follow every
// line it writes after, on one stream.
async function readLog(id) {
  if (L.abort) L.abort.abort();
  const ctl = new AbortController();
  L.abort = ctl;
  L.log = '';
  showLog();
  const follow = $('#log-follow').checked;
  try {
    const r = await fetch(`/v1/agents/${id}/logs?tail=65536${follow ? '&follow=true' : ''}`, { credentials: 'same-origin', signal: ctl.signal });
    if (r.status === 401) { location.assign('/login'); return; }
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).message || `the log answered ${r.status}`);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done || L.id !== id) break;
      L.log += value;
      if (L.log.length > LOG_KEEP) L.log = L.log.slice(L.log.length - LOG_KEEP);
      showLog();
    }
  } catch (e) {
    if (e.name !== 'AbortError' && L.id === id) $('#log-count').textContent = e.message;
  }
}

let logShown = 0;
// showLog draws the log, only the lines matching the search when there is
// one, at most a frame's worth of redraws.
function showLog() {
  if (logShown) return;
  logShown = requestAnimationFrame(() => {
    logShown = 0;
    const pre = $('#log');
    if (!pre) return;
    const q = $('#log-search').value.trim().toLowerCase();
    const lines = L.log.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    const shown = q ? lines.filter((l) => l.toLowerCase().includes(q)) : lines;
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = shown.slice(-2000).join('\n');
    pre.dataset.lines = String(lines.length);
    if (stick) pre.scrollTop = pre.scrollHeight;
    $('#log-count').textContent = q ? `${shown.length} of ${lines.length} lines match` : `${lines.length} lines${$('#log-follow').checked ? ', following' : ''}`;
  });
}

// ---- the timeline ----

// timelineRows lists the agents of the timeline, each after its parent:
// the subtree of S.tlRoot, or every family.
function timelineRows() {
  const roots = S.tlRoot && S.agents.has(S.tlRoot) ? [S.agents.get(S.tlRoot)]
    : [...S.agents.values()].filter((a) => !S.agents.has(a.parent)).sort((a, b) => a.id - b.id);
  const out = [];
  for (const r of roots) {
    out.push({ a: r, depth: 0 });
    for (const d of descendants(r.id)) out.push({ a: d, depth: d.generation - r.generation });
    if (out.length > 1000) break;
  }
  return out.slice(0, 1000);
}

// renderTimeline draws one bar per agent from its start to its end (now
// while it runs), coloured by how it ended, indented by lineage.
function renderTimeline() {
  const el = $('#timeline');
  const rows = timelineRows();
  const root = S.agents.get(S.tlRoot);
  const head = `<div class="tl-head"><h2>Timeline of ${root ? `#${root.id} ${esc(root.name)} and its ${rows.length - 1} descendant${rows.length === 2 ? '' : 's'}` : 'every agent'}</h2><div class="tl-axis" id="tl-axis"></div></div>`;
  const body = rows.map(({ a, depth }) => {
    const oc = outcome(a);
    return `<div class="tl-row${a.id === S.selected ? ' selected' : ''}" data-id="${a.id}" data-depth="${depth}"><div class="tl-label" title="#${a.id} ${esc(a.name)}">#${a.id} ${esc(a.name)}</div>` +
      `<div class="tl-track"><div class="tl-bar st-${esc(a.state)}${oc ? ' oc-' + oc : ''}" data-id="${a.id}" data-outcome="${oc}" title="#${a.id} ${esc(a.name)}: ${esc(a.state)}${oc ? ' (' + oc + ')' : ''}"><span data-time="${a.id}"></span></div></div></div>`;
  }).join('');
  const html = head + `<div class="tl-rows">${body || '<p class="muted">no agents</p>'}</div>`;
  if (el.dataset.html !== html) { el.innerHTML = html; el.dataset.html = html; }
  tick();
}

// timelineNow places the bars for the time now; styles are set through the
// DOM, as the CSP allows no inline style attributes.
function timelineNow(now) {
  const bars = [...document.querySelectorAll('#timeline .tl-bar')];
  if (!bars.length) return;
  let t0 = Infinity, t1 = 0;
  const span = new Map();
  for (const b of bars) {
    const a = S.agents.get(+b.dataset.id);
    const s = startOf(a), e = endOf(a) || now;
    span.set(b, [s, e]);
    t0 = Math.min(t0, s);
    t1 = Math.max(t1, e);
  }
  const w = Math.max(t1 - t0, 1000);
  for (const [b, [s, e]] of span) {
    b.style.left = (100 * (s - t0)) / w + '%';
    b.style.width = Math.max((100 * (e - s)) / w, 0.2) + '%';
    b.dataset.start = String(s);
    b.dataset.end = String(e);
  }
  for (const r of document.querySelectorAll('#timeline .tl-row')) r.firstChild.style.paddingLeft = 0.4 + 1.1 * +r.dataset.depth + 'rem';
  const axis = $('#tl-axis');
  axis.dataset.t0 = String(t0);
  axis.dataset.t1 = String(t0 + w);
  const marks = [0, 0.25, 0.5, 0.75, 1].map((f) => `<span>${f ? '+' + dur(f * w) : esc(new Date(t0).toLocaleTimeString())}</span>`).join('');
  if (axis.dataset.marks !== marks) { axis.innerHTML = marks; axis.dataset.marks = marks; }
  [...axis.children].forEach((m, i) => { m.style.left = i * 25 + '%'; });
}

// showView switches between the tree and the timeline (of root's subtree,
// or every agent for 0).
function showView(view, root = 0) {
  S.view2 = view;
  if (view === 'timeline') S.tlRoot = root;
  // An SVG element has no hidden property: the pane's class hides it.
  $('#graph-pane').classList.toggle('timeline', view === 'timeline');
  $('#legend').classList.toggle('over-timeline', view === 'timeline');
  $('#timeline').hidden = view !== 'timeline';
  $('#view-tree').setAttribute('aria-pressed', String(view === 'tree'));
  $('#view-timeline').setAttribute('aria-pressed', String(view === 'timeline'));
  setHash();
  if (view === 'timeline') renderTimeline();
  else if (S.view) { render(); fit(); }
}

// ---- the URL: #/agents/ID, #/timeline[/ID] ----

function setHash() {
  let h = '#/';
  if (S.view2 === 'timeline') h = '#/timeline' + (S.tlRoot ? '/' + S.tlRoot : '');
  else if (S.selected) h = '#/agents/' + S.selected;
  if (location.hash !== h) history.replaceState(null, '', h);
}

function route() {
  const m = /^#\/(agents|timeline)(?:\/(\d+))?$/.exec(location.hash);
  if (!m) return;
  const id = +(m[2] || 0);
  if (id && !S.agents.has(id)) { toast(`There is no agent #${id}`, true); return; }
  if (m[1] === 'timeline') {
    if (id) select(id);
    showView('timeline', id);
    return;
  }
  if (S.view2 !== 'tree') showView('tree');
  if (id) {
    for (const a of chain(id).slice(1)) S.collapsed.delete(a.id);
    select(id);
    render();
    centerOn(id);
  }
}

// ---- the operator's actions, each confirmed with what it affects ----

function affected(action, a) {
  switch (action) {
    case 'stop': return descendants(a.id, true).filter((d) => !TERMINAL.has(d.state));
    case 'suspend': return descendants(a.id).filter((d) => d.status === 'active');
    case 'resume': return descendants(a.id).filter((d) => d.status === 'suspended');
    case 'revoke': return descendants(a.id).filter((d) => d.status === 'active' || d.status === 'suspended');
    case 'promote': return descendants(a.id).filter((d) => !d.stage && !TERMINAL.has(d.state));
  }
  return [];
}

const ACTIONS = {
  stop: { verb: 'Stop', what: 'Its processes get SIGTERM, then SIGKILL after their grace; owned descendants stop with it.', run: (a) => api(`/v1/agents/${a.id}/stop`, { method: 'POST' }) },
  suspend: { verb: 'Suspend', what: 'Suspended agents are frozen and may not spawn.', run: (a) => api(`/v1/agents/${a.id}/status`, { method: 'POST', body: { action: 'suspend', cascade: true, reason: 'from the dashboard' } }) },
  resume: { verb: 'Resume', what: 'They run and may spawn again.', run: (a) => api(`/v1/agents/${a.id}/status`, { method: 'POST', body: { action: 'resume', cascade: true, reason: 'from the dashboard' } }) },
  revoke: { verb: 'Revoke', what: 'Revoked agents lose their identity and tokens for good; this cannot be undone.', run: (a) => api(`/v1/agents/${a.id}/status`, { method: 'POST', body: { action: 'revoke', cascade: true, reason: 'from the dashboard' } }) },
  promote: { verb: 'Promote', what: 'Descendants that follow their parent\'s stage get it too.', run: (a, stage) => api(`/v1/agents/${a.id}/promote`, { method: 'POST', body: { stage } }) },
};

function act(action, a) {
  const spec = ACTIONS[action];
  const list = affected(action, a);
  const stage = action === 'promote' ? $('#stage').value : '';
  const dlg = $('#confirm');
  $('#confirm-title').textContent = `${spec.verb} #${a.id} ${a.name}${stage ? ' to ' + stage : ''}?`;
  $('#confirm-text').textContent = `This affects #${a.id} ${a.name} and ${list.length} descendant${list.length === 1 ? '' : 's'}. ${spec.what}`;
  $('#confirm-list').innerHTML = list.slice(0, 50).map((d) => `<li>#${d.id} ${esc(d.name)} <span class="muted">${esc(d.state)}</span></li>`).join('') + (list.length > 50 ? `<li class="muted">and ${list.length - 50} more</li>` : '');
  $('#confirm-ok').textContent = spec.verb;
  dlg.dataset.affects = String(list.length);
  dlg.returnValue = '';
  dlg.onclose = async () => {
    if (dlg.returnValue !== 'ok') return;
    try {
      const out = await spec.run(a, stage);
      const n = Array.isArray(out) ? out.length : 1;
      toast(`${spec.verb}: ${n} agent${n === 1 ? '' : 's'} changed`);
    } catch (e) {
      toast(`${spec.verb} #${a.id} failed: ${e.message}`, true);
    }
    refresh();
  };
  dlg.showModal();
}

let toastTimer = 0;
function toast(msg, bad) {
  const t = $('#toast');
  t.textContent = msg;
  t.className = bad ? 'bad' : '';
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 6000);
}

// ---- the events view and the live stream ----

function eventLine(e) {
  const skip = new Set(['seq', 'leaf_index', 'time', 'type', 'agent']);
  const rest = Object.entries(e).filter(([k]) => !skip.has(k)).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');
  return rest.length > 200 ? rest.slice(0, 199) + '…' : rest;
}

function eventAgent(e) { return e.agent || e.child || 0; }

// eventQuery is the events view's filter as API parameters, or a string
// saying why it selects nothing.
function eventQuery() {
  const q = new URLSearchParams();
  const who = $('#ev-agent').value.trim();
  if (who) {
    let id = /^#?\d+$/.test(who) ? +who.replace('#', '') : 0;
    if (!id) {
      const a = [...S.agents.values()].find((x) => x.name === who);
      if (!a) return `no agent is named "${who}"`;
      id = a.id;
    }
    q.set('agent', id);
  }
  const type = $('#ev-type').value.trim();
  if (type) {
    // A known type is asked for as it is; a prefix ("agent.") for every
    // type it starts.
    const types = S.eventTypes.length ? S.eventTypes.filter((t) => t === type || t.startsWith(type)) : [type];
    if (!types.length) return `no event type starts with "${type}"`;
    for (const t of types) q.append('type', t);
  }
  return q;
}

let evSeq = 0;

// renderEvents loads the events page: the latest EVENT_PAGE events
// matching the filter, or those before S.evBefore, newest first.
async function renderEvents() {
  if ($('#ev-pause').checked && !S.evBefore) return;
  const seq = ++evSeq;
  const q = eventQuery();
  let evs = [];
  if (typeof q !== 'string') {
    q.set('before', S.evBefore || Number.MAX_SAFE_INTEGER);
    q.set('limit', EVENT_PAGE);
    try {
      evs = await api('/v1/events?' + q);
    } catch (e) {
      if (seq === evSeq) $('#ev-count').textContent = e.message;
      return;
    }
  }
  if (seq !== evSeq) return; // a newer load is on its way
  const rows = evs.slice().reverse().map((e) => `<tr data-seq="${e.seq}" data-type="${esc(e.type)}"><td>${e.seq}</td><td>${esc(new Date(e.time).toLocaleString())}</td><td>${esc(e.type)}</td><td>${eventAgent(e) ? `<a href="#/agents/${eventAgent(e)}" data-goto="${eventAgent(e)}">#${eventAgent(e)}</a>` : ''}</td><td>${esc(eventLine(e))}</td></tr>`);
  $('#events tbody').innerHTML = rows.join('');
  $('#events-pane').dataset.first = evs.length ? String(evs[0].seq) : '0';
  $('#ev-older').disabled = evs.length < EVENT_PAGE;
  $('#ev-newer').disabled = !S.evBefore;
  $('#ev-latest').disabled = !S.evBefore;
  const where = evs.length ? `#${evs[0].seq}–#${evs[evs.length - 1].seq}` : 'none';
  $('#ev-count').textContent = typeof q === 'string' ? q : S.evBefore ? `page ${S.evPages.length + 1} back: ${where}` : `latest ${evs.length}${$('#ev-pause').checked ? ' (paused)' : ', live'}: ${where}`;
}

// pageEvents moves the events page: older, newer, or back to the latest.
function pageEvents(to) {
  if (to === 'older') {
    const first = +$('#events-pane').dataset.first;
    if (!first) return;
    S.evPages.push(S.evBefore);
    S.evBefore = first;
  } else if (to === 'newer') {
    S.evBefore = S.evPages.pop() || 0;
  } else {
    S.evBefore = 0;
    S.evPages = [];
  }
  renderEvents();
}

let evTimer = 0;

function onEvent(e) {
  if (e.seq <= S.lastSeq) return;
  S.lastSeq = e.seq;
  S.events.push(e);
  if (S.events.length > EVENT_KEEP) S.events.splice(0, S.events.length - EVENT_KEEP);
  refresh();
  if (S.evBefore) return; // an older page stays as it is
  clearTimeout(evTimer);
  evTimer = setTimeout(renderEvents, 150);
}

// follow reads the event stream as NDJSON (one event a line; an empty line
// is a keep-alive) from the last event seen, and reconnects from there when
// the stream breaks.
async function follow() {
  const conn = $('#conn');
  for (;;) {
    try {
      const r = await fetch(`/v1/events?follow=true&since=${S.lastSeq}`, { headers: { Accept: 'application/x-ndjson' }, credentials: 'same-origin' });
      if (r.status === 401) { location.assign('/login'); return; }
      if (!r.ok) throw new Error(`the event stream answered ${r.status}`);
      conn.textContent = 'live';
      conn.className = 'conn live';
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        for (let i; (i = buf.indexOf('\n')) >= 0;) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line) onEvent(JSON.parse(line));
        }
      }
    } catch (e) {
      console.warn('event stream:', e);
    }
    conn.textContent = 'reconnecting';
    conn.className = 'conn down';
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

async function main() {
  const legend = $('#legend');
  legend.innerHTML = STATES.filter(([s]) => !TERMINAL.has(s)).map(([s, what]) => `<span class="key st-${s}" title="${esc(what)}"><i></i>${s}</span>`).join('') +
    '<span class="sep">ended:</span>' + OUTCOMES.map(([o, g, what]) => `<span class="key oc-${o}" data-outcome="${o}" title="${esc(what)}"><i>${g}</i>${o}</span>`).join('');
  for (const [s] of STATES) {
    const o = document.createElement('option');
    o.value = s;
    o.textContent = s;
    $('#f-state').append(o);
  }
  setupPanZoom();
  setupPanel();
  for (const sel of ['#f-responsible', '#f-role', '#f-state']) $(sel).addEventListener('change', () => { render(); });
  $('#search').addEventListener('keydown', (e) => { if (e.key === 'Enter') search(e.target.value); });
  $('#search').addEventListener('search', (e) => { if (!e.target.value) search(''); });
  $('#fit').addEventListener('click', fit);
  $('#expand-all').addEventListener('click', () => { S.collapsed.clear(); render(); fit(); });
  for (const sel of ['#ev-agent', '#ev-type', '#ev-pause']) $(sel).addEventListener('input', () => pageEvents('latest'));
  $('#ev-older').addEventListener('click', () => pageEvents('older'));
  $('#ev-newer').addEventListener('click', () => pageEvents('newer'));
  $('#ev-latest').addEventListener('click', () => pageEvents('latest'));
  $('#events').addEventListener('click', (e) => {
    const g = e.target.closest('[data-goto]');
    if (g) { e.preventDefault(); select(+g.dataset.goto); centerOn(+g.dataset.goto); }
  });
  $('#view-tree').addEventListener('click', () => showView('tree'));
  $('#view-timeline').addEventListener('click', () => showView('timeline', S.selected));
  $('#timeline').addEventListener('click', (e) => {
    const r = e.target.closest('.tl-row');
    if (r) { select(+r.dataset.id); renderTimeline(); }
  });
  window.addEventListener('hashchange', route);
  setInterval(tick, 1000);
  window.addEventListener('resize', () => { if (S.view) fit(); });
  try {
    const st = await api('/v1/status');
    S.lastSeq = Math.max(0, st.last_event - 300);
    await refresh();
    route();
    renderEvents();
    api('/v1/openapi.json').then((doc) => {
      const d = doc.components.schemas.Event.description;
      S.eventTypes = [...d.matchAll(/- `([a-z_.]+)`: /g)].map((m) => m[1]);
      const dl = $('#ev-types');
      for (const t of S.eventTypes) { const o = document.createElement('option'); o.value = t; dl.append(o); }
    }).catch(() => {});
    follow();
    document.body.dataset.ready = 'true';
  } catch (e) {
    toast(e.message, true);
  }
}

main();
