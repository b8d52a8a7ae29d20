// The cluster page: every node serving the prefix, one row per pool, from
// /v1/cluster (first with each pool's last hour of history, then every 2s),
// holders and waiters of the pool clicked, and every node's events: the
// last ones replayed from the event stream (/v1/cluster/events), then live
// (/v1/cluster/stream). An event refreshes its node at once, so a grant or
// a release shows in the holders list well within a second.
'use strict';

(function () {
  const POLL_MS = 2000;
  const HOUR_MS = 3600 * 1000;
  const MIN_WINDOW_MS = 60 * 1000;
  // Samples further apart than this are a gap (the manager or this page
  // was away); the sparkline breaks there instead of bridging it.
  const GAP_MS = 20 * 1000;
  const MAX_EVENTS = 100;
  const KINDS = ['requested', 'queued', 'granted', 'released', 'expired', 'cancelled', 'rejected', 'resized', 'message'];
  const SW = 180, SH = 24;

  const $ = (id) => document.getElementById(id);
  const poolsBody = document.querySelector('#pools tbody');
  const eventsBody = document.querySelector('#events tbody');

  // node name -> {node, stale, reason, last_seen, pools: [PoolSnapshot]}
  const nodes = new Map();
  // "node/pool" -> [{t, r, q}] oldest first: utilisation and queue length
  const series = new Map();
  const seenEvents = new Set(); // event keys, so a replayed one is not listed twice
  let selected = null; // "node/pool"
  // skew is the serving node's clock minus this browser's, from the last
  // /v1/cluster answer: holders' expiry and waits are the managers' times.
  let skew = 0;
  let mode = 'starting';
  let renderQueued = false;
  const refreshing = new Map(); // node -> timer of a pending one-node refresh

  function setMode(m) {
    mode = m;
    document.body.dataset.mode = m;
    $('conn').textContent = m;
  }

  function setNotice(text) {
    $('notice').hidden = !text;
    $('notice').textContent = text || '';
  }

  function key(node, pool) { return node + '/' + pool; }

  function ratio(p) { return p.capacity > 0 ? Math.min(1, p.in_use / p.capacity) : 0; }

  function addPoint(k, t, r, q) {
    let s = series.get(k);
    if (!s) { s = []; series.set(k, s); }
    let i = s.length;
    while (i > 0 && s[i - 1].t > t) i--;
    if (i > 0 && s[i - 1].t === t) { s[i - 1] = { t: t, r: r, q: q }; return; }
    s.splice(i, 0, { t: t, r: r, q: q });
    const from = Date.now() - HOUR_MS;
    while (s.length > 1 && s[1].t <= from) s.shift();
  }

  async function getJSON(url) {
    const resp = await fetch(url, { cache: 'no-store' });
    let body = null;
    try { body = await resp.json(); } catch (e) { /* not JSON */ }
    if (!resp.ok) {
      throw new Error(body && body.error ? body.error.message : resp.status + ' ' + resp.statusText);
    }
    return body;
  }

  // apply takes a /v1/cluster answer. A full answer (all nodes) replaces
  // the node list; a one-node answer updates that node.
  function apply(c, full) {
    $('prefix').textContent = c.prefix;
    const t = Date.parse(c.time) || Date.now();
    if (Date.parse(c.time)) skew = t - Date.now();
    const names = new Set();
    for (const n of c.nodes) {
      names.add(n.node);
      nodes.set(n.node, n);
      if (n.stale) {
        // No figures while it does not answer: mark the gap, so the
        // sparkline breaks there however short it was.
        for (const p of n.pools) addPoint(key(n.node, p.name), t, null, null);
        continue;
      }
      for (const p of n.pools) {
        const k = key(n.node, p.name);
        for (const h of p.history || []) {
          addPoint(k, h[0] * 1000, h[2] > 0 ? Math.min(1, h[1] / h[2]) : 0, h[3]);
        }
        addPoint(k, t, ratio(p), p.queued);
      }
    }
    if (full) {
      for (const name of [...nodes.keys()]) if (!names.has(name)) nodes.delete(name);
    }
    scheduleRender();
  }

  async function poll() {
    try {
      const c = await getJSON('/v1/cluster');
      // A node never seen before, or back from being stale, brings its history.
      const fresh = c.nodes.filter((n) => !n.stale && (!nodes.has(n.node) || nodes.get(n.node).stale));
      apply(c, true);
      for (const n of fresh) refreshNode(n.node, true);
      setNotice('');
    } catch (e) {
      setNotice('Cannot read the cluster: ' + e.message + '; showing what was last known.');
    }
  }

  // refreshNode asks one node again (soon after one of its events).
  function refreshNode(node, history) {
    if (refreshing.has(node) && !history) return;
    clearTimeout(refreshing.get(node));
    refreshing.set(node, setTimeout(async () => {
      refreshing.delete(node);
      try {
        apply(await getJSON('/v1/cluster?node=' + encodeURIComponent(node) + (history ? '&history=1' : '')), false);
      } catch (e) { /* the next poll tells */ }
    }, history ? 0 : 100));
  }

  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => { renderQueued = false; render(); });
  }

  function rows() {
    const f = $('filter').value.trim().toLowerCase();
    const out = [];
    for (const n of nodes.values()) {
      for (const p of n.pools) {
        if (f && !n.node.toLowerCase().includes(f) && !p.name.toLowerCase().includes(f)) continue;
        out.push({ n: n, p: p });
      }
    }
    return out;
  }

  function saturation(x) { return ratio(x.p) + (x.p.queued > 0 ? 1 : 0); }

  function render() {
    const group = $('group').value, sort = $('sort').value;
    const list = rows();
    const byName = (a, b) => (a.n.node + '\0' + a.p.name < b.n.node + '\0' + b.p.name ? -1 : 1);
    const bySat = (a, b) => saturation(b) - saturation(a) || byName(a, b);
    list.sort(sort === 'saturation' ? bySat : byName);
    const groups = new Map();
    for (const x of list) {
      const g = group === 'node' ? x.n.node : group === 'pool' ? x.p.name : '';
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(x);
    }
    let order = [...groups.keys()];
    if (sort === 'saturation') {
      const top = (g) => Math.max(...groups.get(g).map(saturation));
      order.sort((a, b) => top(b) - top(a) || (a < b ? -1 : 1));
    } else {
      order.sort();
    }
    const frag = document.createDocumentFragment();
    const now = Date.now();
    win = sparkWindow(now);
    $('spark-window').textContent = win >= HOUR_MS ? 'last hour' : 'last ' + Math.round(win / 60000) + ' min';
    for (const g of order) {
      if (group !== 'none') frag.appendChild(groupRow(g, group, groups.get(g)));
      for (const x of groups.get(g)) frag.appendChild(poolRow(x.n, x.p, now));
    }
    // The rows are made anew: the pool whose button had the focus gets it
    // back, so a keyboard user is not thrown out every poll.
    const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest('tr.pool-row') : null;
    poolsBody.replaceChildren(frag);
    if (focused) {
      const again = poolsBody.querySelector('tr.pool-row[data-key="' + CSS.escape(focused.dataset.key) + '"] button.open');
      if (again) again.focus({ preventScroll: true });
    }
    $('no-pools').hidden = nodes.size > 0;
    const all = [...nodes.values()];
    const stale = all.filter((n) => n.stale).length;
    const pools = all.reduce((a, n) => a + n.pools.length, 0);
    const full = all.reduce((a, n) => a + n.pools.filter((p) => p.capacity > 0 && p.in_use >= p.capacity).length, 0);
    $('summary').textContent = all.length + ' nodes' + (stale ? ' (' + stale + ' stale)' : '') + ', ' + pools +
      ' pools, ' + full + ' full' + (list.length < pools ? ', ' + list.length + ' shown' : '');
    renderDetail(now);
  }

  function cell(tr, field, text, cls) {
    const td = document.createElement('td');
    if (field) td.dataset.field = field;
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  // The cluster pools (CLUSTER_POOLS) are served as node "cluster": shown
  // apart from the nodes' own pools.
  function nodeLabel(node) {
    return node === 'cluster' ? 'cluster pools (shared by every node)' : 'node ' + node;
  }

  function groupRow(g, group, members) {
    const tr = document.createElement('tr');
    tr.className = 'group';
    tr.dataset.group = g;
    const td = cell(tr, '', group === 'node' ? nodeLabel(g) : group + ' ' + g);
    td.colSpan = 8;
    const n = nodes.get(g);
    if (group === 'node' && n) {
      tr.dataset.node = g;
      tr.dataset.stale = n.stale ? '1' : '0';
      if (n.stale) {
        const s = document.createElement('span');
        s.className = 'stale';
        s.textContent = 'stale: ' + (n.reason || 'not answering') + (n.last_seen && !n.last_seen.startsWith('0001') ? '; last seen ' + clock(n.last_seen) : '');
        td.appendChild(s);
      }
    } else {
      td.textContent += ' · ' + members.length + ' pools';
    }
    return tr;
  }

  function poolRow(n, p, now) {
    const tr = document.createElement('tr');
    tr.className = 'pool-row';
    const k = key(n.node, p.name);
    tr.dataset.key = k;
    tr.dataset.node = n.node;
    tr.dataset.pool = p.name;
    tr.dataset.stale = n.stale ? '1' : '0';
    const r = ratio(p);
    tr.dataset.level = r >= 1 ? 'full' : r >= 0.75 ? 'warn' : 'ok';
    if (k === selected) tr.classList.add('selected');
    cell(tr, 'node', n.node === 'cluster' ? 'cluster (shared)' : n.node);
    // The pool's name is the button that opens its holders and queue:
    // reached with Tab, pressed with Enter or Space (a click anywhere on
    // the row does the same).
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'open';
    open.textContent = p.name;
    open.setAttribute('aria-label', p.name + ' on ' + (n.node === 'cluster' ? 'the cluster' : 'node ' + n.node) + ': holders and queue');
    open.setAttribute('aria-controls', 'detail');
    open.setAttribute('aria-expanded', k === selected ? 'true' : 'false');
    cell(tr, 'name').appendChild(open);
    const pc = cell(tr, 'policy', slotleaseFormat.policy(p));
    if (p.shadow) pc.title = 'shadow mode (POOL_SHADOW): limits counted, not enforced; in use may exceed capacity';
    cell(tr, 'in_use', String(p.in_use), 'num');
    const bar = cell(tr, '', undefined, 'col-bar');
    bar.innerHTML = '<div class="barcell"><div class="minibar" role="meter" aria-valuemin="0" aria-valuemax="100"><div></div></div>' +
      '<span>of <span data-field="capacity"></span></span></div>';
    const meter = bar.querySelector('.minibar');
    meter.setAttribute('aria-valuenow', String(Math.round(r * 100)));
    meter.setAttribute('aria-label', k + ': slots in use');
    meter.setAttribute('aria-valuetext', p.in_use + ' of ' + slotleaseFormat.capacity(p.capacity) + ' slots (' + Math.round(r * 100) + '%)');
    bar.querySelector('.minibar div').style.width = (r * 100) + '%';
    bar.querySelector('[data-field="capacity"]').textContent = slotleaseFormat.capacity(p.capacity);
    cell(tr, 'queued', String(p.queued), 'num');
    cell(tr, 'util', Math.round(r * 100) + '%', 'num');
    cell(tr, '', undefined, 'col-spark').appendChild(spark(k, now, !n.stale));
    return tr;
  }

  // sparkWindow is how far back the sparklines reach: the last hour, or
  // less while the oldest sample is younger (but at least MIN_WINDOW_MS),
  // the same for every row so they compare.
  let win = HOUR_MS;
  function sparkWindow(now) {
    let oldest = now;
    for (const s of series.values()) if (s.length && s[0].t < oldest) oldest = s[0].t;
    return Math.min(HOUR_MS, Math.max(MIN_WINDOW_MS, Math.ceil((now - oldest) / 60000) * 60000));
  }

  // spark draws the last hour as a step line, broken where the node did
  // not answer or samples are more than GAP_MS apart (the page was closed);
  // the dashed line is the queue's length.
  function spark(k, now, live) {
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', '0 0 ' + SW + ' ' + SH);
    svg.setAttribute('preserveAspectRatio', 'none');
    const s = series.get(k) || [];
    svg.dataset.points = String(s.length);
    if (s.length) svg.dataset.first = String(s[0].t);
    const from = now - win;
    const x = (t) => (Math.max(0, Math.min(win, t - from)) / win * SW).toFixed(1);
    const y = (r) => (SH - 1 - r * (SH - 2)).toFixed(1);
    const qmax = Math.max(1, ...s.map((p) => p.q || 0));
    let gaps = 0;
    const path = (val) => {
      let d = '', prev = null, broken = false;
      gaps = 0;
      for (const p of s) {
        if (p.r === null) { broken = prev !== null; continue; } // the node did not answer
        const v = y(val === 'r' ? p.r : p.q / qmax);
        if (prev === null || broken || p.t - prev.t > GAP_MS) {
          if (prev !== null) gaps++;
          d += ' M' + x(p.t) + ' ' + v;
        } else {
          d += ' H' + x(p.t) + ' V' + v;
        }
        prev = p;
        broken = false;
      }
      const last = s[s.length - 1];
      if (prev && last === prev && live && now - prev.t <= GAP_MS) d += ' H' + x(now);
      return d.trim();
    };
    for (const [cls, val] of [['queue', 'q'], ['line', 'r']]) {
      const el = document.createElementNS('http://www.w3.org/2000/svg', 'path');
      el.setAttribute('class', cls);
      el.setAttribute('d', path(val));
      svg.appendChild(el);
    }
    svg.dataset.gaps = String(gaps);
    const title = document.createElementNS('http://www.w3.org/2000/svg', 'title');
    title.textContent = 'utilisation (line) and queue length (dashed), ' + $('spark-window').textContent;
    svg.appendChild(title);
    return svg;
  }

  const { two, clock } = slotleaseFormat;

  function span(ms) {
    if (!(ms >= 0)) return '';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + two(s % 60) + 's';
    return Math.floor(s / 3600) + 'h ' + two(Math.floor(s / 60) % 60) + 'm';
  }

  function findPool(k) {
    if (!k) return null;
    const i = k.indexOf('/');
    const n = nodes.get(k.slice(0, i));
    const p = n && n.pools.find((q) => q.name === k.slice(i + 1));
    return p ? { n: n, p: p } : null;
  }

  function renderDetail(now) {
    now += skew; // the managers' clock
    const x = findPool(selected);
    $('detail').hidden = !x;
    if (!x) return;
    const p = x.p;
    $('detail-name').textContent = selected;
    $('detail-figures').textContent = p.in_use + ' of ' + slotleaseFormat.capacity(p.capacity) + ' slots in use, ' + p.queued + ' queued (' +
      slotleaseFormat.policy(p) + ')' + (p.counts ? '; so far ' + slotleaseFormat.counts(p.counts) : '') +
      (p.shadow || p.shadow_counts ? '; ' + (p.shadow ? 'SHADOW MODE, capacity not enforced' : 'was in shadow mode') +
        ': its limits would have held ' + slotleaseFormat.shadow(p.shadow_counts) : '') +
      (x.n.stale ? '; node stale, as last seen' : '');
    const hb = document.querySelector('#holders tbody');
    hb.replaceChildren(...p.holders.map((h) => {
      const tr = document.createElement('tr');
      tr.dataset.holder = h.holder;
      tr.dataset.id = h.id;
      cell(tr, 'holder', h.holder);
      cell(tr, 'slots', String(h.slots), 'num');
      cell(tr, 'token', String(h.token), 'num');
      cell(tr, 'tenant', h.tenant || '');
      cell(tr, 'priority', String(h.priority || 0), 'num');
      cell(tr, 'age', span(now - Date.parse(h.granted_at)), 'num');
      cell(tr, 'expires', span(Date.parse(h.expires_at) - now), 'num');
      return tr;
    }));
    const wb = document.querySelector('#waiters tbody');
    wb.replaceChildren(...p.waiters.map((w, i) => {
      const tr = document.createElement('tr');
      tr.dataset.holder = w.holder;
      tr.dataset.id = w.id;
      cell(tr, 'position', w.position ? String(w.position) : '(' + (i + 1) + ')', 'num');
      cell(tr, 'holder', w.holder);
      cell(tr, 'slots', String(w.slots), 'num');
      cell(tr, 'tenant', w.tenant || '');
      cell(tr, 'priority', String(w.priority || 0), 'num');
      cell(tr, 'waiting', span(now - Date.parse(w.since)), 'num');
      return tr;
    }));
    more('holders-more', p.holders_more, 'holders');
    more('waiters-more', p.waiters_more, 'waiting requests');
    if (!p.holders.length) more('holders-more', -1, 'No holders.');
    if (!p.waiters.length) more('waiters-more', -1, 'Nobody waits.');
  }

  function more(id, n, what) {
    const el = $(id);
    el.hidden = !n;
    el.textContent = n === -1 ? what : n ? 'and ' + n + ' more ' + what : '';
  }

  function eventKey(ev) {
    return [ev.time, ev.node, ev.pool, ev.kind, ev.request_id || ev.lease_id || '', ev.token || 0].join('|');
  }

  // addEvent lists an event (newest first) unless it is listed already.
  function addEvent(ev, replayed) {
    const k = eventKey(ev);
    if (seenEvents.has(k)) return;
    seenEvents.add(k);
    const tr = document.createElement('tr');
    tr.dataset.kind = ev.kind;
    tr.dataset.node = ev.node || '';
    tr.dataset.pool = ev.pool || '';
    tr.dataset.key = k;
    if (replayed) tr.dataset.replayed = '1';
    else tr.className = 'fresh';
    const cols = [['time', clock(ev.time)], ['node', ev.node], ['kind', ev.kind], ['pool', ev.pool], ['holder', ev.holder],
      ['slots', ev.slots], ['token', ev.token], ['code', ev.code]];
    for (const [name, v] of cols) {
      const td = cell(tr, name, undefined, name === 'slots' || name === 'token' ? 'num' : name === 'holder' ? 'col-holder' : '');
      if (name === 'kind') {
        const b = document.createElement('span');
        b.className = 'badge';
        b.textContent = v;
        td.appendChild(b);
      } else {
        td.textContent = v === undefined || v === null || v === 0 ? '' : String(v);
      }
    }
    if (ev.message) tr.title = ev.message;
    // Keep the table in time order: a replayed event may be older than a live one.
    const t = Date.parse(ev.time);
    let before = eventsBody.firstElementChild;
    while (before && before.dataset.t && +before.dataset.t > t) before = before.nextElementSibling;
    tr.dataset.t = String(t);
    eventsBody.insertBefore(tr, before);
    while (eventsBody.rows.length > MAX_EVENTS) {
      seenEvents.delete(eventsBody.lastElementChild.dataset.key);
      eventsBody.deleteRow(-1);
    }
    $('no-events').hidden = eventsBody.rows.length > 0;
    if (!replayed && ev.node && ev.pool && ev.stats) {
      const n = nodes.get(ev.node);
      const p = n && n.pools.find((q) => q.name === ev.pool);
      if (p) {
        Object.assign(p, ev.stats);
        addPoint(key(ev.node, ev.pool), t || Date.now(), ratio(p), p.queued);
        scheduleRender();
      }
      refreshNode(ev.node, false);
    }
  }

  function gapRow(text) {
    const tr = document.createElement('tr');
    tr.className = 'gap';
    tr.dataset.t = String(Date.now());
    const td = cell(tr, '', text);
    td.colSpan = 8;
    eventsBody.insertBefore(tr, eventsBody.firstElementChild);
  }

  let source = null, lostAt = 0;
  function connect() {
    source = new EventSource('/v1/cluster/stream');
    source.onopen = () => {
      setMode('live');
      if (lostAt) {
        gapRow('the event stream was down for ' + span(Date.now() - lostAt) + '; events of that time are in the event stream (leasemgr watch --since)');
        lostAt = 0;
        poll();
      }
    };
    source.onerror = () => {
      if (!lostAt) lostAt = Date.now();
      setMode('reconnecting');
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(connect, POLL_MS * 2);
      }
    };
    for (const kind of KINDS) {
      source.addEventListener(kind, (e) => {
        try { addEvent(JSON.parse(e.data), false); } catch (err) { console.warn('bad event', err, e.data); }
      });
    }
  }

  async function replay() {
    try {
      const evs = await getJSON('/v1/cluster/events?limit=' + MAX_EVENTS);
      for (const ev of evs) addEvent(ev, true);
    } catch (e) {
      gapRow('events from before this page opened are not available: ' + e.message);
    }
  }

  poolsBody.addEventListener('click', (e) => {
    const tr = e.target.closest('tr.pool-row');
    if (!tr) return;
    selected = selected === tr.dataset.key ? null : tr.dataset.key;
    if (selected) refreshNode(tr.dataset.node, false);
    render();
  });
  for (const id of ['filter', 'group', 'sort']) $(id).addEventListener('input', scheduleRender);

  async function start() {
    connect();
    try {
      apply(await getJSON('/v1/cluster?history=1'), true);
    } catch (e) {
      setNotice('Cannot read the cluster: ' + e.message);
    }
    await replay();
    setInterval(poll, POLL_MS);
    setInterval(() => renderDetail(Date.now()), 1000);
  }
  start();
})();
