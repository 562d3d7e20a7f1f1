// The dashboard's one script: a page with data-live listens to its stream
// (server-sent events) and shows the changes without a reload. A new or
// changed payment's row comes rendered by the server; any other change
// makes the page fetch itself again and swap its live region. Nothing here
// is needed to read the pages or to use their forms.
(function () {
  'use strict';
  var url = document.body.getAttribute('data-live');
  if (!url || !window.EventSource) { return; }
  var status = document.getElementById('live-status');
  var say = function (text) { if (status) { status.textContent = text; } };
  var pending = false;

  function refresh() {
    if (pending) { return; }
    pending = true;
    setTimeout(function () {
      fetch(window.location.href, { credentials: 'same-origin' }).then(function (r) {
        return r.ok && !r.redirected ? r.text() : null;
      }).then(function (html) {
        pending = false;
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, 'text/html');
        var fresh = doc.getElementById('live-region');
        var here = document.getElementById('live-region');
        if (fresh && here) { here.replaceWith(document.adoptNode(fresh)); }
      }).catch(function () { pending = false; });
    }, 400);
  }

  function upsert(e) {
    var d = JSON.parse(e.data);
    var rows = document.getElementById('payment-rows');
    if (!rows) { return; }
    var t = document.createElement('template');
    t.innerHTML = d.row.trim(); // rendered and escaped by the server's template
    var row = t.content.firstElementChild;
    var old = document.getElementById('row-' + d.id);
    if (old) { old.replaceWith(row); } else { rows.insertBefore(row, rows.firstChild); }
    var table = document.getElementById('payments');
    if (table) { table.hidden = false; }
    var empty = document.getElementById('payments-empty');
    if (empty) { empty.hidden = true; }
  }

  var source = new EventSource(url);
  source.addEventListener('hello', function () { say('Live: changes appear as they happen.'); });
  source.addEventListener('payment', upsert);
  source.addEventListener('refresh', refresh);
  source.addEventListener('ended', function () {
    source.close();
    say('Your session has ended: reload the page to log in again.');
  });
  source.onerror = function () { say('Live updates paused: reconnecting…'); };
})();
