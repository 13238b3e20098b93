// Kairos dashboard script: confirmations, live refresh, charts. Loaded as
// a file (the Content-Security-Policy allows no inline script). Every
// value shown comes from the server's escaped HTML or is set with
// textContent: nothing here builds HTML from data.
(function () {
  'use strict';

  // Forms with data-confirm ask first.
  document.addEventListener('submit', function (ev) {
    var f = ev.target;
    if (f instanceof HTMLFormElement && f.dataset.confirm && !window.confirm(f.dataset.confirm)) {
      ev.preventDefault();
    }
  });

  // The dead letter's "check all" box checks every job of the page.
  document.addEventListener('change', function (ev) {
    var t = ev.target;
    if (t instanceof HTMLInputElement && t.id === 'dead-check-all') {
      document.querySelectorAll('input.dead-check').forEach(function (b) { b.checked = t.checked; });
    }
  });

  // The queue filter submits itself after a pause in typing.
  var filter = document.getElementById('queue-filter');
  if (filter) {
    var timer = null;
    filter.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(function () { filter.form.requestSubmit(); }, 500);
    });
    var len = filter.value.length;
    filter.focus();
    filter.setSelectionRange(len, len);
  }

  // Live refresh: the page is fetched again and its [data-live] regions
  // are replaced by the new ones (one request per refresh whatever the
  // number of queues; the server reads the sizes in one pipeline per
  // namespace).
  var status = document.getElementById('live-status');
  var refresh = parseInt(document.body.dataset.refresh, 10) || 5;
  var regions = document.querySelectorAll('[data-live]');
  function setStatus(ok, text) {
    if (!status) return;
    status.className = 'live ' + (ok ? 'on' : 'off');
    status.textContent = text;
  }
  // A region being worked in (focus in a field, a field changed and not
  // yet submitted, dead jobs checked) is not replaced: the refresh would
  // drop what the user chose.
  function markDirty(ev) {
    var t = ev.target;
    var region = t instanceof Element && t.closest('[data-live]');
    if (region) region.dataset.dirty = '1';
  }
  document.addEventListener('input', markDirty);
  document.addEventListener('change', markDirty);
  function busy(region) {
    var a = document.activeElement;
    if (region.dataset.dirty === '1' || region.querySelector('input[type=checkbox]:checked')) return true;
    return a && region.contains(a) && (a.tagName === 'INPUT' || a.tagName === 'SELECT' || a.tagName === 'BUTTON');
  }
  // A page that is being left (a form posted, a link followed) polls no
  // more: its fetch could otherwise race the next page's request.
  var leaving = false;
  document.addEventListener('submit', function (ev) { if (!ev.defaultPrevented) leaving = true; });
  window.addEventListener('pagehide', function () { leaving = true; });
  function poll() {
    if (leaving || document.visibilityState !== 'visible') return;
    fetch(window.location.href, { headers: { 'X-Kairos-Live': '1' }, credentials: 'same-origin' })
      .then(function (r) {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, 'text/html');
        regions.forEach(function (el) {
          var fresh = doc.querySelector('[data-live="' + el.dataset.live + '"]');
          if (fresh && !busy(el)) el.replaceChildren.apply(el, Array.from(fresh.childNodes).map(function (n) { return document.adoptNode(n); }));
        });
        setStatus(true, 'live · ' + new Date().toLocaleTimeString());
      })
      .catch(function (e) { setStatus(false, 'refresh failed: ' + e.message); });
  }
  if (regions.length) {
    setStatus(true, 'live');
    setInterval(poll, refresh * 1000);
  }

  // Charts: [data-charts] sections get the throughput series of their
  // queue (data-chart-pool/namespace/queue) or of everything, from the
  // admin API's history endpoint, for the last hour or day.
  window.KairosCharts && window.KairosCharts(refresh);
})();
