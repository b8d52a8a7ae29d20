// Formatting shared by the pages (loaded before them).
'use strict';

const slotleaseFormat = (function () {
  function two(n) { return String(n).padStart(2, '0'); }

  // clock is t (a Date, a time string or ms) as local HH:MM:SS.mmm.
  function clock(t) {
    const d = new Date(t);
    return two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds()) +
      '.' + String(d.getMilliseconds()).padStart(3, '0');
  }

  // MAX_CAPACITY is the capacity of a pool with only a start rate.
  const MAX_CAPACITY = 1099511627776;

  // capacity is a pool's capacity, "unlimited" for a pool with only a rate.
  function capacity(c) { return c === MAX_CAPACITY ? 'unlimited' : String(c); }

  // policy is a pool's queue policy and, if it has them, its start rate
  // and its budget: "fifo, rate 60/m (3 of 5 tokens), budget 100000/m
  // (41200 used, 8000 reserved)"; "SHADOW fifo" for a pool in shadow mode
  // (POOL_SHADOW: its limits counted, not enforced).
  function policy(s) {
    let out = s.policy || 'fifo';
    if (s.shadow) out = 'SHADOW ' + out;
    if (s.rate) out += ', rate ' + s.rate + ' (' + (s.tokens || 0) + ' of ' + s.burst + ' tokens)';
    if (s.budget) out += ', budget ' + s.budget + ' (' + (s.budget_used || 0) + ' used, ' + (s.budget_reserved || 0) + ' reserved)';
    return out;
  }

  // counts is how a pool's requests and leases ended (its stats' counts,
  // docs/protocol.md section 2.5): "granted 41, completed 36, failed 2,
  // rejected 5, dropped 0, cancelled 1"; "" for a manager without them.
  function counts(c) {
    if (!c) return '';
    return ['granted', 'completed', 'failed', 'rejected', 'dropped', 'cancelled'].map((k) => k + ' ' + (c[k] || 0)).join(', ');
  }

  // shadow is what a shadow pool's limits would have done (its stats'
  // shadow_counts, docs/protocol.md section 2.5): "capacity: queued 2,
  // would_wait 1; rate: queued 4"; "none yet" without counts.
  function shadow(c) {
    const reasons = Object.keys(c || {}).sort();
    if (reasons.length === 0) return 'none yet';
    return reasons.map((r) => r + ': ' + Object.keys(c[r]).sort().map((a) => a + ' ' + c[r][a]).join(', ')).join('; ');
  }

  return { two: two, clock: clock, capacity: capacity, policy: policy, counts: counts, shadow: shadow };
})();
