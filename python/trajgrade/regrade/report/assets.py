"""The report page's inline CSS and JS (no file is fetched: the CSP forbids it)."""

from __future__ import annotations

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--green:#1a7f37;
--amber:#9a6700;--red:#cf222e;--blue:#0969da}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:var(--fg);
background:#fff}
main{max-width:1240px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:30px 0 8px;padding-top:8px;
border-top:1px solid var(--line)}h3{font-size:15px;margin:18px 0 6px}
.meta{color:var(--muted)}.meta dt{float:left;clear:left;width:92px;font-weight:600}
.meta dd{margin:0 0 2px 100px;word-break:break-all}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:16px 0 6px}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:118px}
.card b{display:block;font-size:22px}.card small{color:var(--muted)}
.green{color:var(--green)}.amber{color:var(--amber)}.red{color:var(--red)}
.legend{color:var(--muted);font-size:13px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 10px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:4px 8px;
border-bottom:1px solid #eaeef2;vertical-align:top}th{background:var(--soft);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:var(--soft);
padding:1px 4px;border-radius:4px;word-break:break-all}
.badge{display:inline-block;font-size:12px;font-weight:600;border-radius:10px;padding:0 8px;
color:#fff;white-space:nowrap}.b-FAIL{background:var(--red)}.b-ERROR{background:var(--amber)}
.b-PASS{background:var(--green)}.b-soft{background:#fff;color:var(--amber);
border:1px solid var(--amber)}.b-added,.b-removed{background:var(--blue)}
.controls{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin:8px 0}
select,input,button{font:inherit;padding:5px 8px;border:1px solid var(--line);border-radius:6px;
background:#fff}input{width:260px}button{cursor:pointer}button:disabled{opacity:.45;
cursor:default}
#failures tr.trace{cursor:pointer}#failures tr.trace:hover{background:#f6f8fa}
#failures tr.open{background:#ddf4ff}#failures td code{white-space:nowrap;word-break:normal}
.fl{margin:0 0 2px}.fl b{font-weight:600}.pos{color:var(--muted);font-size:12px}
.detail>td{background:#fbfcfd;padding:8px 8px 14px 40px}
table.calls td{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;max-width:420px;
word-break:break-all;white-space:pre-wrap}
table.calls td:nth-child(2){word-break:normal;white-space:nowrap}
table.calls tr.hit td{background:#ffebe9}table.calls tr.hit td:first-child{
box-shadow:inset 3px 0 var(--red)}
.tag{font:11px system-ui,sans-serif;color:var(--red);display:block;word-break:normal}
.note{background:#fff8c5;border:1px solid #d4a72c66;border-radius:6px;padding:6px 10px;
margin:8px 0}
.pager{display:flex;gap:8px;align-items:center;margin:8px 0}
svg text{font:12px system-ui,sans-serif;fill:var(--fg)}
details summary{cursor:pointer;color:var(--blue)}
"""

JS = """
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('trace-data').textContent);
  var T = D.traces, A = D.assertions, C = D.codes, PAGE = 50;
  var st = {a: '', c: '', k: '', q: '', p: '1', open: ''};
  var body = document.querySelector('#failures tbody');
  var pager = document.getElementById('pager');
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (kids || []).forEach(function (k) {
      e.appendChild(typeof k === 'string' ? document.createTextNode(k) : k);
    });
    return e;
  }
  function readHash() {
    location.hash.slice(1).split('&').forEach(function (kv) {
      var i = kv.indexOf('=');
      if (i > 0) {
        var k = decodeURIComponent(kv.slice(0, i));
        if (Object.prototype.hasOwnProperty.call(st, k)) {
          st[k] = decodeURIComponent(kv.slice(i + 1));
        }
      }
    });
  }
  function writeHash() {
    var parts = Object.keys(st).filter(function (k) {
      return st[k] && !(k === 'p' && st[k] === '1');
    }).map(function (k) { return k + '=' + encodeURIComponent(st[k]); });
    try {  // a file:// page may refuse; the view still works, only the address is not kept
      history.replaceState(null, '', parts.length ? '#' + parts.join('&') : location.pathname);
    } catch (e) { /* ignored */ }
  }
  function kind(t) { return t.s ? 'soft' : (t.v === 'ERROR' ? 'error' : 'hard'); }
  function matches(t) {
    if (st.k && kind(t) !== st.k) return false;
    if (st.q && t.id.toLowerCase().indexOf(st.q.toLowerCase()) < 0) return false;
    if (!st.a && !st.c) return true;
    return t.f.some(function (f) {
      return (!st.a || A[f[0]] === st.a) && (!st.c || C[f[1]] === st.c);
    });
  }
  function fill(select, names, counter) {
    var counts = {};
    T.forEach(function (t) {
      var seen = {};
      t.f.forEach(function (f) {
        var k = counter(f);
        if (!seen[k]) { seen[k] = 1; counts[k] = (counts[k] || 0) + 1; }
      });
    });
    names.slice().sort().forEach(function (n) {
      select.appendChild(el('option', {value: n}, [n + ' (' + (counts[n] || 0) + ')']));
    });
  }
  function badge(t) {
    if (t.s) {
      var why = 'the verdict passed; soft assertions failed';
      return el('span', {'class': 'badge b-soft', title: why}, ['soft only']);
    }
    return el('span', {'class': 'badge b-' + t.v}, [t.v]);
  }
  function failingList(t) {
    return el('div', {}, t.f.map(function (f) {
      var kids = [el('b', {}, [A[f[0]]]), ' ', el('code', {}, [C[f[1]]]), ' ', f[2]];
      if (f[3].length) kids.push(el('span', {'class': 'pos'}, [' @ call ' + f[3].join(', ')]));
      return el('div', {'class': 'fl'}, kids);
    }));
  }
  function callsView(t) {
    var box = el('div', {'class': 'calls-box'});
    if (!t.c) {
      box.appendChild(el('p', {'class': 'note'}, [D.calls_note ||
        'Calls are embedded only for the first ' + D.max_call_traces + ' failing traces.']));
      return box;
    }
    var hits = {};
    t.f.forEach(function (f) {
      f[3].forEach(function (p) { (hits[p] = hits[p] || []).push(A[f[0]]); });
    });
    var heads = ['#', 'tool', 'arguments', 'result'].map(function (h) {
      return el('th', {}, [h]);
    });
    var rows = [el('tr', {}, heads)];
    t.c.forEach(function (c, i) {
      var pos = i + 1, first = [String(pos)];
      if (hits[pos]) first.push(el('span', {'class': 'tag'}, [hits[pos].join(', ')]));
      var result = c[2] === null ? '(not recorded)' : c[2];
      rows.push(el('tr', {'class': hits[pos] ? 'call hit' : 'call', 'data-pos': String(pos)}, [
        el('td', {}, first), el('td', {}, [c[0] + (c[3] ? '  (error)' : '')]),
        el('td', {}, [c[1] === null ? '(not recorded)' : c[1]]), el('td', {}, [result])]));
    });
    if (!t.c.length) rows.push(el('tr', {}, [el('td', {colspan: '4'}, ['no calls'])]));
    box.appendChild(el('table', {'class': 'calls'}, rows));
    if (t.cn) box.appendChild(el('p', {'class': 'note'}, [t.cn]));
    if (t.fa) box.appendChild(el('p', {}, [el('b', {}, ['final answer: ']), t.fa]));
    return box;
  }
  function render() {
    var hit = T.filter(matches);
    var pages = Math.max(1, Math.ceil(hit.length / PAGE));
    if (st.open) {
      var at = hit.findIndex(function (t) { return String(t.n) === st.open; });
      if (at >= 0 && !render.paged) st.p = String(Math.floor(at / PAGE) + 1);
    }
    render.paged = false;
    var p = Math.min(Math.max(1, parseInt(st.p, 10) || 1), pages);
    st.p = String(p);
    body.textContent = '';
    hit.slice((p - 1) * PAGE, p * PAGE).forEach(function (t) {
      var open = String(t.n) === st.open;
      var attrs = {'class': open ? 'trace open' : 'trace', 'data-n': String(t.n), 'data-id': t.id};
      var tr = el('tr', attrs, [
        el('td', {'class': 'num'}, [String(t.n)]), el('td', {}, [el('code', {}, [t.id])]),
        el('td', {}, [badge(t)]), el('td', {}, [failingList(t)]),
        el('td', {'class': 'num'}, [(t.c ? t.c.length + ' ' : '') + (open ? '▾' : '▸')])]);
      tr.addEventListener('click', function () {
        st.open = open ? '' : String(t.n); render.paged = true; writeHash(); render();
      });
      body.appendChild(tr);
      if (open) {
        var cell = el('td', {colspan: '5'}, [callsView(t)]);
        body.appendChild(el('tr', {'class': 'detail', 'data-n': String(t.n)}, [cell]));
      }
    });
    var from = hit.length ? (p - 1) * PAGE + 1 : 0, to = Math.min(p * PAGE, hit.length);
    pager.setAttribute('data-matched', String(hit.length));
    pager.setAttribute('data-page', String(p));
    pager.setAttribute('data-pages', String(pages));
    document.getElementById('range').textContent = hit.length
      ? from + '-' + to + ' of ' + hit.length + ' matching traces (page ' + p + ' of ' + pages + ')'
      : 'no trace matches these filters';
    document.getElementById('prev').disabled = p <= 1;
    document.getElementById('next').disabled = p >= pages;
  }
  var inputs = {a: 'f-assertion', c: 'f-code', k: 'f-kind', q: 'f-search'};
  fill(document.getElementById('f-assertion'), A, function (f) { return A[f[0]]; });
  fill(document.getElementById('f-code'), C, function (f) { return C[f[1]]; });
  readHash();
  Object.keys(inputs).forEach(function (k) {
    var e = document.getElementById(inputs[k]);
    e.value = st[k];
    e.addEventListener(k === 'q' ? 'input' : 'change', function () {
      st[k] = e.value; st.p = '1'; st.open = ''; writeHash(); render();
    });
  });
  document.getElementById('prev').addEventListener('click', function () {
    st.p = String(parseInt(st.p, 10) - 1); render.paged = true; writeHash(); render();
  });
  document.getElementById('next').addEventListener('click', function () {
    st.p = String(parseInt(st.p, 10) + 1); render.paged = true; writeHash(); render();
  });
  render();
  document.body.setAttribute('data-ready', '1');
})();
"""
