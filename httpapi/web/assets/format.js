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

  return { two: two, clock: clock };
})();
