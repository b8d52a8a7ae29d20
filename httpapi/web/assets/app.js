// The live page: pool cards from /v1/pools, kept current by the event
// stream /v1/events (every event carries its pool's stats after the
// transition). While the stream is down the page polls /v1/pools every 2s;
// while it is up, every 5s, to sample the history and to notice pools that
// were added or removed.
'use strict';

(function () {
  const HISTORY_MS = 120 * 1000;
  const MAX_EVENTS = 50;
  const POLL_DOWN_MS = 2000;
  const POLL_LIVE_MS = 5000;
  const KINDS = ['requested', 'queued', 'granted', 'released', 'expired', 'cancelled', 'rejected', 'stop_requested', 'superseded', 'message'];
  const W = 240, H = 48;

  const poolsEl = document.getElementById('pools');
  const eventsBody = document.querySelector('#events tbody');
  const template = document.getElementById('pool-card');
  const notice = document.getElementById('notice');

  // name -> {el, stats, samples: [{t, r}] oldest first}
  const pools = new Map();
  let mode = 'starting'; // "live" (event stream open) or "polling"
  let lastPoll = 0;
  let polling = false;
  let source = null;

  function setMode(m) {
    mode = m;
    document.body.dataset.mode = m;
    document.getElementById('conn').textContent =
      m === 'live' ? 'live' : m === 'polling' ? 'polling every 2s' : m;
  }

  function setNotice(text) {
    notice.hidden = !text;
    notice.textContent = text || '';
  }

  function field(card, name) {
    return card.querySelector('[data-field="' + name + '"]');
  }

  function ratio(s) {
    return s.capacity > 0 ? s.in_use / s.capacity : 0;
  }

  function card(name) {
    let p = pools.get(name);
    if (p) return p;
    const el = template.content.firstElementChild.cloneNode(true);
    el.dataset.pool = name;
    el.id = 'pool-' + name;
    field(el, 'name').textContent = name;
    el.querySelector('.bar').setAttribute('aria-label', name + ': slots in use');
    p = { el: el, stats: null, samples: [] };
    pools.set(name, p);
    // Keep cards sorted by name, as /v1/pools is.
    const after = [...poolsEl.querySelectorAll('.pool')].find((c) => c.dataset.pool > name);
    poolsEl.insertBefore(el, after || null);
    document.getElementById('no-pools').hidden = true;
    return p;
  }

  function applyStats(name, s, t) {
    const p = card(name);
    p.stats = s;
    const el = p.el;
    const r = ratio(s);
    field(el, 'capacity').textContent = slotleaseFormat.capacity(s.capacity);
    field(el, 'in_use').textContent = s.in_use;
    field(el, 'available').textContent = s.available;
    field(el, 'queued').textContent = s.queued;
    field(el, 'queued_slots').textContent = s.queued_slots;
    field(el, 'utilisation').textContent = Math.round(r * 100) + '%';
    field(el, 'policy').textContent = slotleaseFormat.policy(s);
    el.querySelector('.fill').style.width = Math.min(100, r * 100) + '%';
    el.querySelector('.bar').setAttribute('aria-valuenow', String(Math.round(r * 100)));
    el.querySelector('.bar').setAttribute('aria-valuetext', s.in_use + ' of ' + slotleaseFormat.capacity(s.capacity) + ' slots (' + Math.round(r * 100) + '%)');
    el.dataset.level = r >= 1 ? 'full' : r >= 0.75 ? 'warn' : 'ok';
    // Events can arrive out of order with polls; keep samples sorted.
    const samples = p.samples;
    let i = samples.length;
    while (i > 0 && samples[i - 1].t > t) i--;
    samples.splice(i, 0, { t: t, r: Math.min(1, r) });
    draw(p, Date.now());
  }

  // draw renders the history as a step line: utilisation holds its value
  // until the next sample.
  function draw(p, now) {
    const from = now - HISTORY_MS;
    const s = p.samples;
    // Keep one sample from before the window: it is the value at its left edge.
    while (s.length > 1 && s[1].t <= from) s.shift();
    if (s.length === 0) return;
    const x = (t) => (Math.max(0, Math.min(HISTORY_MS, t - from)) / HISTORY_MS * W).toFixed(1);
    const y = (r) => (H - 1 - r * (H - 2)).toFixed(1);
    let d = 'M' + x(s[0].t) + ' ' + y(s[0].r);
    for (let i = 1; i < s.length; i++) {
      d += ' H' + x(s[i].t) + ' V' + y(s[i].r);
    }
    d += ' H' + x(now);
    const svg = p.el.querySelector('svg');
    svg.querySelector('.line').setAttribute('d', d);
    svg.querySelector('.area').setAttribute('d', d + ' V' + H + ' H' + x(s[0].t) + ' Z');
  }

  function removeMissing(names) {
    for (const [name, p] of pools) {
      if (!names.has(name)) {
        p.el.remove();
        pools.delete(name);
      }
    }
    document.getElementById('no-pools').hidden = pools.size > 0;
  }

  function applySnapshot(list) {
    const now = Date.now();
    const names = new Set();
    for (const s of list) {
      names.add(s.name);
      applyStats(s.name, s, now);
    }
    removeMissing(names);
  }

  async function poll() {
    if (polling) return;
    polling = true;
    lastPoll = Date.now();
    try {
      const resp = await fetch('/v1/pools', { cache: 'no-store' });
      if (resp.ok) {
        applySnapshot((await resp.json()).pools);
        setNotice('');
      } else {
        let msg = resp.status + ' ' + resp.statusText;
        try { msg = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
        setNotice('The lease state is not available here: ' + msg);
      }
    } catch (e) {
      setNotice('Cannot reach the lease manager: ' + e.message);
    } finally {
      polling = false;
    }
  }

  const clock = slotleaseFormat.clock;

  function eventKey(ev) {
    return [ev.time, ev.node, ev.kind, ev.request_id || ev.lease_id || '', ev.token || 0].join('|');
  }

  // addEvent lists ev; a live one also updates its pool's card, a replayed
  // one (from before the page opened) does not.
  function addEvent(ev, replayed) {
    const tr = document.createElement('tr');
    tr.dataset.kind = ev.kind;
    tr.dataset.pool = ev.pool || '';
    tr.dataset.key = eventKey(ev);
    if (replayed) tr.dataset.replayed = '1';
    else tr.className = 'fresh';
    const cells = [
      ['time', clock(ev.time)],
      ['kind', ev.kind],
      ['pool', ev.pool],
      ['holder', ev.holder],
      ['slots', ev.slots],
      ['token', ev.token],
      ['code', ev.code],
    ];
    for (const [name, v] of cells) {
      const td = document.createElement('td');
      td.className = 'col-' + name;
      td.dataset.field = name;
      if (name === 'kind') {
        const span = document.createElement('span');
        span.className = 'badge';
        span.textContent = v;
        td.appendChild(span);
      } else {
        td.textContent = v === undefined || v === null || v === 0 ? '' : String(v);
      }
      if (name === 'holder') td.title = ev.holder || '';
      tr.appendChild(td);
    }
    if (ev.message) tr.title = ev.message;
    eventsBody.insertBefore(tr, eventsBody.firstChild);
    while (eventsBody.rows.length > MAX_EVENTS) eventsBody.deleteRow(-1);
    if (!replayed && ev.pool && ev.stats) {
      const t = Date.parse(ev.time);
      applyStats(ev.pool, Object.assign({ name: ev.pool }, ev.stats), isNaN(t) ? Date.now() : t);
    }
  }

  function connect() {
    if (!window.EventSource) {
      setMode('polling');
      return;
    }
    source = new EventSource('/v1/events');
    source.onopen = () => setMode('live');
    source.onerror = () => {
      // EventSource retries by itself while the state is CONNECTING; once
      // CLOSED (e.g. a 503), it does not, so start a new one later.
      setMode('polling');
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(connect, POLL_DOWN_MS * 2);
      }
    };
    source.addEventListener('pools', (e) => {
      setMode('live');
      applySnapshot(JSON.parse(e.data).pools);
    });
    for (const kind of KINDS) {
      source.addEventListener(kind, (e) => {
        try {
          addEvent(JSON.parse(e.data));
        } catch (err) {
          console.warn('bad event', err, e.data);
        }
      });
    }
  }

  async function loadStatus() {
    try {
      const resp = await fetch('/v1/status', { cache: 'no-store' });
      const st = await resp.json();
      document.getElementById('node').textContent = st.node;
      document.title = 'slotlease · ' + st.node;
      if (!st.ready) setNotice('Not ready: ' + st.reason);
      return st.node;
    } catch (e) {
      setNotice('Cannot reach the lease manager: ' + e.message);
    }
  }

  // seedHistory fills the charts from the manager's history (the cluster
  // API), so they start with the last two minutes instead of empty.
  async function seedHistory(node) {
    const resp = await fetch('/v1/cluster?history=1&node=' + encodeURIComponent(node), { cache: 'no-store' });
    if (!resp.ok) return;
    const now = Date.now();
    for (const n of (await resp.json()).nodes) {
      for (const s of n.stale ? [] : n.pools) {
        const p = pools.get(s.name);
        if (!p) continue;
        const first = p.samples.length ? p.samples[0].t : now;
        const older = (s.history || []).map((h) => ({ t: h[0] * 1000, r: h[2] > 0 ? Math.min(1, h[1] / h[2]) : 0 }))
          .filter((x) => x.t < first && x.t >= now - HISTORY_MS);
        p.samples.unshift(...older);
        draw(p, now);
      }
    }
  }

  // replayEvents lists the node's events from before the page opened.
  async function replayEvents(node) {
    const resp = await fetch('/v1/cluster/events?limit=' + 2 * MAX_EVENTS, { cache: 'no-store' });
    if (!resp.ok) return;
    const mine = (await resp.json()).filter((ev) => ev.node === node).slice(-MAX_EVENTS);
    // Newest first, below the events streamed since the page opened; an
    // event both streamed and replayed is listed once.
    const listed = new Set([...eventsBody.rows].map((tr) => tr.dataset.key));
    for (const ev of mine.reverse()) {
      if (eventsBody.rows.length >= MAX_EVENTS) break;
      if (listed.has(eventKey(ev))) continue;
      addEvent(ev, true);
      eventsBody.appendChild(eventsBody.firstChild);
    }
  }

  function tick() {
    const now = Date.now();
    const every = mode === 'live' ? POLL_LIVE_MS : POLL_DOWN_MS;
    if (now - lastPoll >= every) poll();
    for (const p of pools.values()) draw(p, now);
  }

  Promise.all([loadStatus(), poll()]).then(([node]) => {
    if (!node) return;
    seedHistory(node).catch(() => {});
    replayEvents(node).catch(() => {});
  });
  connect();
  setInterval(tick, 1000);
})();
