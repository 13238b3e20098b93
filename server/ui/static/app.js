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
  // The numbers shown are stale once no refresh has succeeded for
  // staleAfter ms (a refresh failed, or hangs: a Redis that does not
  // answer); the page then says so, with the time of its data, and dims
  // them, until a refresh succeeds again.
  var staleAfter = Math.max(2500 * refresh, 5000);
  var lastOK = Date.now();
  var failure = '';
  function clock(t) { return new Date(t).toLocaleTimeString(); }
  function showStatus() {
    if (!status) return;
    var age = Date.now() - lastOK;
    var stale = failure !== '' || age > staleAfter;
    document.body.classList.toggle('stale', stale);
    status.className = 'live ' + (stale ? 'off' : 'on');
    if (!stale) {
      status.textContent = 'live · ' + clock(lastOK);
      return;
    }
    var why = failure || ('no answer for ' + Math.round(age / 1000) + ' s');
    status.textContent = 'stale: ' + why + ' · data from ' + clock(lastOK) + ' (' + Math.round(age / 1000) + ' s ago)';
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
  // One refresh at a time: a refresh that gets no answer within
  // staleAfter is abandoned, so the next one can try.
  var inFlight = null;
  function poll() {
    if (leaving || document.visibilityState !== 'visible' || inFlight) return;
    var ctl = new AbortController();
    var timer = setTimeout(function () { ctl.abort(); }, staleAfter);
    inFlight = ctl;
    fetch(window.location.href, { headers: { 'X-Kairos-Live': '1' }, credentials: 'same-origin', signal: ctl.signal })
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
        lastOK = Date.now();
        failure = '';
      })
      .catch(function (e) {
        failure = ctl.signal.aborted ? 'no answer in ' + Math.round(staleAfter / 1000) + ' s' : 'refresh failed (' + e.message + ')';
      })
      .finally(function () {
        clearTimeout(timer);
        inFlight = null;
        showStatus();
      });
  }
  if (regions.length) {
    showStatus();
    setInterval(poll, refresh * 1000);
    setInterval(showStatus, 1000);
  }

  // Charts: [data-charts] sections get the throughput series of their
  // queue (data-chart-pool/namespace/queue) or of everything, from the
  // admin API's history endpoint, for the last hour or day.
  window.KairosCharts && window.KairosCharts(refresh);
})();
