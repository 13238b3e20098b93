// Kairos dashboard charts: throughput (published, consumed, ACKed,
// retried, dead-lettered per second) and consume latency percentiles,
// drawn with the vendored uPlot from the admin API's history series
// (GET /history[/:namespace[/:queue]], doc/dashboard.md). Loaded as a
// file; values are numbers, labels fixed strings: nothing becomes HTML.
(function () {
  'use strict';

  var COLORS = { published: '#3558d6', consumed: '#12b76a', acked: '#667085', retried: '#f79009', dead: '#d92d20',
    p50: '#12b76a', p90: '#f79009', p99: '#d92d20' };
  var RANGES = { '1h': 'range=1h', '24h': 'range=24h&step=300' };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  function seriesURL(section, range) {
    var d = section.dataset;
    var path = '/history';
    if (d.chartNamespace) path += '/' + encodeURIComponent(d.chartNamespace);
    if (d.chartQueue) path += '/' + encodeURIComponent(d.chartQueue);
    var q = RANGES[range];
    if (d.chartPool) q += '&pool=' + encodeURIComponent(d.chartPool);
    return path + '?' + q;
  }

  // width fits two charts side by side, or one on a narrow screen.
  function width(section) {
    var w = section.clientWidth || 1200;
    if (w < 700) return Math.max(200, w - 20);
    return Math.min(600, Math.floor(w / 2) - 24);
  }

  // complete keeps the points that no longer grow: those before
  // partial_from_ms (the current step, and the one before it until every
  // server has flushed its counts), so that no chart ends in a false drop.
  function complete(h) {
    var cut = h.t.length;
    if (h.partial_from_ms != null) {
      while (cut > 0 && h.t[cut - 1] >= h.partial_from_ms) cut--;
    }
    var out = { t: h.t.slice(0, cut), step: h.step, latency_ms: h.latency_ms ? {} : null };
    ['published', 'consumed', 'acked', 'retried', 'dead'].forEach(function (n) { out[n] = (h[n] || []).slice(0, cut); });
    if (h.latency_ms) Object.keys(h.latency_ms).forEach(function (n) { out.latency_ms[n] = h.latency_ms[n].slice(0, cut); });
    return out;
  }

  // axisColor follows the page's text colour (dark mode included).
  function axisColor() {
    return getComputedStyle(document.body).getPropertyValue('--muted').trim() || '#667085';
  }

  // ms renders a latency axis value: 250 ms, 2.5 s, 5 min.
  function ms(v) {
    if (v == null) return '';
    if (v < 1000) return v + ' ms';
    if (v < 60000) return (v / 1000) + ' s';
    return (Math.round(v / 6000) / 10) + ' min';
  }

  function plot(box, title, names, h, pick, unit) {
    if (box._uplot) box._uplot.destroy();
    box.replaceChildren(el('h3', null, title));
    var t = h.t.map(function (ms) { return ms / 1000; });
    var data = [t];
    var series = [{}];
    names.forEach(function (n) {
      data.push(pick(n));
      series.push({ label: n, stroke: COLORS[n], width: 1.5, spanGaps: false,
        value: function (u, v) { return v == null ? '–' : unit === ' ms' ? ms(v) : (Math.round(v * 100) / 100) + unit; } });
    });
    /* global uPlot */
    var fg = axisColor();
    var grid = { stroke: 'rgba(128,128,128,0.2)' };
    var yAxis = { size: 64, stroke: fg, grid: grid, ticks: grid };
    if (unit === ' ms') yAxis.values = function (u, vals) { return vals.map(ms); };
    box._uplot = new uPlot({ width: width(box.parentNode), height: 180, series: series,
      scales: { y: { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; } } },
      axes: [{ stroke: fg, grid: grid, ticks: grid }, yAxis], legend: { live: true }, cursor: { drag: { x: false, y: false } } }, data, box);
  }

  function draw(section, range) {
    var status = section.querySelector('.chart-status');
    fetch(seriesURL(section, range), { credentials: 'same-origin', headers: { Accept: 'application/json' } })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status === 404 ? 'no history on this server' : 'HTTP ' + r.status);
        return r.json();
      })
      .then(function (full) {
        var h = complete(full);
        var step = h.step || 60;
        var tp = section.querySelector('.chart-throughput');
        plot(tp, 'Jobs per second (' + range + ')', ['published', 'consumed', 'acked', 'retried', 'dead'], h,
          function (n) { return (h[n] || []).map(function (v) { return v == null ? null : v / step; }); }, '/s');
        var lat = section.querySelector('.chart-latency');
        if (lat && h.latency_ms) {
          plot(lat, 'Publish → consume latency', ['p50', 'p90', 'p99'], h,
            function (n) { return h.latency_ms[n] || []; }, ' ms');
        }
        status.textContent = 'updated ' + new Date().toLocaleTimeString();
        // What was drawn from (for the browser test): the series' points and
        // where its partial ones start.
        section.dataset.points = String(full.t.length);
        section.dataset.partialFrom = String(full.partial_from_ms);
        section.dataset.loaded = range;
      })
      .catch(function (e) { status.textContent = 'charts unavailable: ' + e.message; });
  }

  window.KairosCharts = function (refresh) {
    document.querySelectorAll('[data-charts]').forEach(function (section) {
      var range = '1h';
      var controls = el('div', 'chart-controls row');
      controls.appendChild(el('span', 'hint', 'History:'));
      Object.keys(RANGES).forEach(function (r) {
        var b = el('button', r === range ? 'current' : '', 'last ' + (r === '1h' ? 'hour' : 'day'));
        b.type = 'button';
        b.dataset.range = r;
        b.addEventListener('click', function () {
          range = r;
          controls.querySelectorAll('button').forEach(function (x) { x.className = x.dataset.range === r ? 'current' : ''; });
          draw(section, range);
        });
        controls.appendChild(b);
      });
      controls.appendChild(el('span', 'hint chart-status', 'loading…'));
      section.appendChild(controls);
      section.appendChild(el('div', 'chart chart-throughput'));
      if (section.dataset.chartQueue || section.dataset.chartLatency) section.appendChild(el('div', 'chart chart-latency'));
      draw(section, range);
      setInterval(function () { if (document.visibilityState === 'visible') draw(section, range); }, Math.max(refresh, 10) * 1000);
    });
  };
})();
