"""The page's style and scripts, inlined into every report (no file to ship beside it, nothing fetched).

:data:`ERRORS_SCRIPT` runs first and records every script error and ``console.error`` into the page itself
(``<body data-errors>`` and ``#page-errors``), so a headless browser's dump of the DOM says whether the page ran
cleanly. :data:`SCRIPT` makes the tables sortable, opens a rejected document (its text, its duplicate side by
side with the differences marked, its raw file), filters the sample by a search box, and reads the same
actions from the URL's hash: ``#open=<step/rule>:<n>``, ``#doc=<document ID>``, ``#search=<text>``,
``#sort=<table id>:<column>``, ``#only=<section id>`` (joined by ``&``), so a link can point at a document.
"""

ERRORS_SCRIPT = """
window.reportErrors = [];
window.addEventListener('error', function (e) { reportErrors.push(String(e.message || e)); });
window.addEventListener('unhandledrejection', function (e) { reportErrors.push('unhandled: ' + e.reason); });
(function () {
  var original = console.error;
  console.error = function () {
    reportErrors.push(Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})();
window.addEventListener('load', function () {
  document.body.dataset.errors = String(reportErrors.length);
  document.getElementById('page-errors').textContent = JSON.stringify(reportErrors);
});
"""

SCRIPT = """
(function () {
  'use strict';
  var sample = JSON.parse(document.getElementById('sample-data').textContent);
  var detail = document.getElementById('detail');
  var CHANGES = {'-': 'del', '+': 'ins', '~': 'rep'};

  function node(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function side(title, ops, keep, mark) {
    var column = node('div', 'side');
    column.appendChild(node('h4', '', title));
    var pre = node('pre', 'doc-text');
    ops.forEach(function (op) {
      var text = op[0] === '=' ? op[1] : (keep === 1 ? op[1] : op[2]);
      if (!text) return;
      pre.appendChild(op[0] === '=' ? document.createTextNode(text) : node(mark, 'diff-' + CHANGES[op[0]], text));
    });
    column.appendChild(pre);
    return column;
  }

  function show(reason, index) {
    var item = (sample[reason] || [])[index];
    if (!item) return false;
    document.querySelectorAll('li.rej.selected').forEach(function (li) { li.classList.remove('selected'); });
    var li = document.querySelector('li.rej[data-reason="' + CSS.escape(reason) + '"][data-index="' + index + '"]');
    if (li) li.classList.add('selected');
    detail.replaceChildren();
    detail.appendChild(node('h3', '', item.document));
    var facts = node('dl', 'facts');
    [['rule', item.reason], ['source', item.source_name], ['raw file', item.file],
     ['length', item.chars.toLocaleString('en-US') + ' characters' +
       (item.chars > item.text.length ? ' (the first ' + item.text.length.toLocaleString('en-US') + ' shown)' : '')]]
      .forEach(function (pair) {
        facts.appendChild(node('dt', '', pair[0]));
        facts.appendChild(node('dd', '', pair[1]));
      });
    Object.keys(item.metadata || {}).forEach(function (name) {
      facts.appendChild(node('dt', '', name));
      facts.appendChild(node('dd', '', JSON.stringify(item.metadata[name])));
    });
    if (item.duplicate_of) {
      facts.appendChild(node('dt', '', 'duplicate of'));
      facts.appendChild(node('dd', '', item.duplicate_of));
    }
    if (item.file_uri) {
      var link = node('a', '', 'open the raw file');
      link.href = item.file_uri;
      facts.children[5].append(' (', link, ')');
    }
    detail.appendChild(facts);
    if (item.diff) {
      var same = item.diff.every(function (op) { return op[0] === '='; });
      detail.appendChild(node('p', 'note', same ? 'The same text as the document it repeats.'
        : 'Differences marked: removed from the original, added in the duplicate.'));
      var pair = node('div', 'sides');
      pair.appendChild(side('kept: ' + item.duplicate_of, item.diff, 1, 'del'));
      var dropped = side('dropped: ' + item.document, item.diff, 2, 'ins');
      dropped.querySelector('pre').id = 'detail-text';
      pair.appendChild(dropped);
      detail.appendChild(pair);
    } else {
      if (item.duplicate_of) {
        detail.appendChild(node('p', 'note', 'The document it repeats was not found among the parts.'));
      }
      var text = node('pre', 'doc-text', item.text);
      text.id = 'detail-text';
      if (!item.text) text.appendChild(node('em', '', '(empty text)'));
      detail.appendChild(node('h4', '', 'text'));
      detail.appendChild(text);
    }
    if (item.rewritten !== undefined) {
      detail.appendChild(node('h4', '', 'as the rewriting steps had left it when it was dropped'));
      detail.appendChild(node('pre', 'doc-text', item.rewritten));
    }
    detail.hidden = false;
    return true;
  }

  document.querySelectorAll('li.rej').forEach(function (li) {
    li.addEventListener('click', function () { show(li.dataset.reason, Number(li.dataset.index)); });
    li.addEventListener('keydown', function (event) { if (event.key === 'Enter') li.click(); });
  });

  var search = document.getElementById('search');
  function filter(query) {
    var q = query.toLowerCase(), shown = 0;
    document.querySelectorAll('li.rej').forEach(function (li) {
      var item = sample[li.dataset.reason][Number(li.dataset.index)];
      var hay = (item.text + '\\n' + item.document + '\\n' + (item.original || '')).toLowerCase();
      li.hidden = q !== '' && hay.indexOf(q) < 0;
      if (!li.hidden) shown += 1;
    });
    document.getElementById('search-count').textContent = shown + ' shown';
  }
  if (search) search.addEventListener('input', function () { filter(search.value); });

  function sortTable(table, column) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var descending = table.dataset.sorted === String(column) && table.dataset.order !== 'desc';
    function key(row) {
      var cell = row.cells[column];
      var value = cell ? (cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent) : '';
      var number = parseFloat(value);
      return isNaN(number) ? value.toLowerCase() : number;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.dataset.sorted = String(column);
    table.dataset.order = descending ? 'desc' : 'asc';
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.setAttribute('aria-sort', i === column ? (descending ? 'descending' : 'ascending') : 'none');
    });
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
      th.addEventListener('click', function () { sortTable(table, column); });
    });
  });

  function fromHash() {
    location.hash.slice(1).split('&').forEach(function (part) {
      var at = part.indexOf('=');
      if (at < 0) return;
      var key = part.slice(0, at), value = decodeURIComponent(part.slice(at + 1));
      var target;
      if (key === 'open') {
        var colon = value.lastIndexOf(':');
        target = document.querySelector('li.rej[data-reason="' + CSS.escape(value.slice(0, colon)) +
                                        '"][data-index="' + CSS.escape(value.slice(colon + 1)) + '"]');
      } else if (key === 'doc') {
        target = document.querySelector('li.rej[data-document="' + CSS.escape(value) + '"]');
      } else if (key === 'search' && search) {
        search.value = value;
        filter(value);
      } else if (key === 'only') {
        document.querySelectorAll('main > section').forEach(function (section) {
          section.hidden = section.id !== value;
        });
      } else if (key === 'sort') {
        var split = value.lastIndexOf(':');
        var table = document.getElementById(value.slice(0, split));
        var th = table && table.tHead.rows[0].cells[Number(value.slice(split + 1))];
        if (th) th.click();
      }
      if (target) {
        target.click();
        if (location.hash.indexOf('only=') < 0) detail.scrollIntoView();
      }
    });
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
  document.body.dataset.ready = '1';
})();
"""

STYLE = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d9dee7; --soft: #f4f6fa; --accent: #3b6fb6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: var(--ink); }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1280px; }
section { border-bottom: 1px solid var(--line); padding: 10px 0 18px; }
h2 { font-size: 18px; margin: 14px 0 8px; }
h3 { font-size: 15px; margin: 12px 0 6px; word-break: break-all; }
h4 { font-size: 13px; margin: 8px 0 4px; color: var(--muted); }
.missing { background: #fff6e5; border: 1px solid #f0c36d; padding: 6px 10px; border-radius: 4px; margin: 6px 0; }
.missing li { margin: 2px 0; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: var(--soft); font-weight: 600; font-size: 12.5px; }
td small { color: var(--muted); }
td.text, th.text { text-align: left; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: ' \\2195'; color: #aab; }
table.sortable th[aria-sort=ascending]::after { content: ' \\2191'; color: var(--accent); }
table.sortable th[aria-sort=descending]::after { content: ' \\2193'; color: var(--accent); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 8px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; background: #fff; min-width: 130px; }
.card b { display: block; font-size: 18px; }
.card span { color: var(--muted); font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; }
.charts figure { margin: 0; }
figcaption { font-size: 12px; color: var(--muted); margin-bottom: 2px; }
svg.chart text.tick { font-size: 10px; fill: var(--muted); }
svg.chart text.axis { font-size: 11px; fill: var(--ink); }
svg.chart line.grid { stroke: #eef0f4; }
svg.chart line.axisline { stroke: #99a; }
.legend span { margin-right: 12px; font-size: 12px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
.dropped { display: grid; grid-template-columns: minmax(320px, 1fr) minmax(360px, 1.4fr); gap: 16px; }
.rules ul { list-style: none; padding: 0; margin: 2px 0 10px; }
li.rej { padding: 3px 6px; border: 1px solid transparent; border-radius: 4px; cursor: pointer; overflow: hidden;
         white-space: nowrap; text-overflow: ellipsis; font-size: 13px; }
li.rej:hover { background: var(--soft); }
li.rej.selected { border-color: var(--accent); background: #eaf1fb; }
li.rej code { color: var(--muted); margin-right: 6px; }
#detail { position: sticky; top: 8px; align-self: start; border: 1px solid var(--line); border-radius: 6px;
          padding: 4px 12px 12px; max-height: 95vh; overflow: auto; }
pre.doc-text { white-space: pre-wrap; word-break: break-word; background: var(--soft); padding: 6px 8px;
               border-radius: 4px; margin: 0; font: 12.5px/1.45 ui-monospace, 'DejaVu Sans Mono', monospace; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
del.diff-del, del.diff-rep { background: #fbd3d3; text-decoration: line-through; }
ins.diff-ins, ins.diff-rep { background: #cdeccd; text-decoration: none; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 4px 0; font-size: 13px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-all; }
.note { color: var(--muted); font-size: 12.5px; margin: 4px 0; }
input#search { padding: 4px 8px; width: 280px; border: 1px solid var(--line); border-radius: 4px; }
.tokens { font: 13px/1.9 ui-monospace, 'DejaVu Sans Mono', monospace; white-space: pre-wrap; word-break: break-word;
          border: 1px solid var(--line); border-radius: 4px; padding: 6px 8px; }
.tokens span { border-radius: 2px; }
.tokens span.shared { text-decoration: underline dotted; }
.t0 { background: #dbe8f7; } .t1 { background: #fde3c8; } .t2 { background: #d8eed5; }
.t3 { background: #f7d5d6; } .t4 { background: #e6dcef; } .t5 { background: #f6efc4; }
details summary { cursor: pointer; color: var(--accent); margin: 6px 0; }
.muted { color: var(--muted); }
.scroll { overflow-x: auto; max-width: 100%; }
"""
