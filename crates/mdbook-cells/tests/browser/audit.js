<script>
// The book audit, run in a copy of each built page: what a reader would see wrong, and how
// much they read. `{findings, words}` lands as JSON in body[data-audit]. Findings:
// - a table wider than the content column (clipped or scrolled sideways);
// - a literal backtick in a caption, a table cell or a badge (markdown that was not rendered);
// - a figure element drawn with too little contrast against what it is drawn on;
// - a figure or table without a number, or without the evidence it rests on (the build
//   report's own tables aside: they are the engine's account of the build, not evidence);
// - a glossary whose terms are out of alphabetical order;
// - figures that disagree on one page: a band's width and its edges, a log's count of failed
//   reserves and the table that lists them, the build report's counts and its total.
// Words: the page's main text outside code blocks, tables, figures, folded sections and the
// engine's badges and notes (captions count: a reader reads them).
(() => {
  const rgb = s => {
    const m = (s || '').match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(x => x).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const over = (c, a, bg) => [0, 1, 2].map(i => c[i] * a + bg[i] * (1 - a));
  const contrast = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  // The colour a figure is drawn on: the first ancestor with an opaque background.
  const backdrop = e => {
    for (let n = e; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0.5) return c;
    }
    return [255, 255, 255, 1];
  };
  const where = e => {
    const c = e.closest('.cell');
    if (!c) return 'prose';
    const label = c.querySelector('.cell-caption, figcaption, .cell-label');
    return (c.id || (label && label.textContent) || 'a cell').slice(0, 60);
  };
  const main = document.querySelector('main');
  const column = main.clientWidth;
  const out = [];
  main.querySelectorAll('table').forEach(t => {
    if (t.scrollWidth > column + 2)
      out.push(`overflow: a table ${t.scrollWidth}px wide in a ${column}px column (${where(t)})`);
  });
  main.querySelectorAll('.cell-caption, figcaption, .cell-table td, .cell-table th, .cell-badge')
    .forEach(e => {
      if (e.textContent.includes('`'))
        out.push(`backtick: ${e.tagName.toLowerCase()} "${e.textContent.trim().slice(0, 70)}" (${where(e)})`);
    });
  main.querySelectorAll('figure.cell-figure svg').forEach(svg => {
    const box = svg.getBoundingClientRect();
    const bg = backdrop(svg);
    const big = r => r.width * r.height > 0.5 * box.width * box.height;
    const shapes = [...svg.querySelectorAll('rect, path, polygon, circle')];
    // What a text is drawn on: the last filled shape before it whose box holds its centre.
    const under = t => {
      const r = t.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;
      let found = bg;
      for (const s of shapes) {
        if (!(s.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)) break;
        const b = s.getBoundingClientRect(), st = getComputedStyle(s), c = rgb(st.fill);
        if (c && c[3] > 0 && !big(b) && x >= b.left && x <= b.right && y >= b.top && y <= b.bottom)
          found = over(c, c[3] * Number(st.fillOpacity) * Number(st.opacity), bg);
      }
      return found;
    };
    svg.querySelectorAll('text, rect, path, line, polyline, polygon, circle').forEach(e => {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden') return;
      // Backgrounds (a shape over half the figure) are meant to blend in.
      if (e.tagName !== 'text' && big(e.getBoundingClientRect())) return;
      if (e.tagName === 'text' && !e.textContent.trim()) return;
      const back = e.tagName === 'text' ? under(e) : bg;
      const seen = [[s.fill, Number(s.fillOpacity)], [s.stroke, Number(s.strokeOpacity)]]
        .map(([c, a]) => [rgb(c), a])
        .filter(([c]) => c && c[3] > 0)
        .map(([c, a]) => contrast(over(c, c[3] * a * Number(s.opacity), back), back));
      const least = e.tagName === 'text' ? 2 : 1.15;
      if (seen.length && Math.max(...seen) < least)
        out.push(`invisible: ${e.tagName} "${(e.textContent || '').trim().slice(0, 30)}" at contrast ${Math.max(...seen).toFixed(2)} (${where(e)})`);
    });
  });
  main.querySelectorAll('figure.cell-figure, table').forEach(e => {
    if (e.closest('.cell-report')) return;
    const kind = e.tagName === 'TABLE' ? 'Table' : 'Figure';
    const cell = e.closest('.cell');
    const caption = cell && cell.querySelector('.cell-caption, figcaption');
    const label = caption && caption.querySelector('.cell-label');
    if (!label || !new RegExp(`^${kind} [0-9.]+`).test(label.textContent.trim()))
      out.push(`unnumbered: a ${kind.toLowerCase()} (${where(e)})`);
    if (!caption || !caption.querySelector('.cell-evidence'))
      out.push(`unlabelled: a ${kind.toLowerCase()} says nothing of its evidence (${where(e)})`);
  });
  // Figures that disagree on one page (issue 51). Sizes as the book writes them, in MiB.
  const UNIT = { B: 1 / 1048576, KiB: 1 / 1024, MiB: 1, GiB: 1024 };
  const SIZE = '([0-9][0-9.]*) (B|KiB|MiB|GiB)';
  const mib = (v, u) => Number(v) * UNIT[u];
  const close = (a, b, slack) => Math.abs(a - b) <= slack + 0.02 * Math.max(a, b);
  // A band's stated width against its edges: "X wide" beside one range "A … B" in the same
  // row or paragraph may not be narrower than the range, nor wider unless it says "at most".
  main.querySelectorAll('tr, p, li').forEach(e => {
    const t = e.textContent;
    const w = t.match(new RegExp(`(at most )?${SIZE} wide`));
    const ranges = [...t.matchAll(new RegExp(`([0-9][0-9.]*)(?: (B|KiB|MiB|GiB))? ?(?:…|–) ?${SIZE}`, 'g'))];
    if (!w || ranges.length !== 1) return;
    const [, a, au, b, bu] = ranges[0];
    const [width, apart] = [mib(w[2], w[3]), mib(b, bu) - mib(a, au || bu)];
    // The edges are printed to about three digits: each may be off by half its last one.
    const slack = 0.01 * UNIT[bu];
    if (apart > width + slack || (!w[1] && !close(width, apart, slack)))
      out.push(`width: "${w[0]}" beside ${ranges[0][0]}, ${(apart / UNIT[w[3]]).toFixed(2)} ${w[3]} apart (${where(e)})`);
  });
  // A count against its table: a log line "N failed reserves, pages …" on the page lists N
  // pages, and agrees size by size with one of the page's table cells that lists the same
  // sizes as "SIZE ×k".
  const lists = [...main.querySelectorAll('td')]
    .map(td => [...td.textContent.matchAll(new RegExp(`${SIZE} ×([0-9]+)`, 'g'))]
      .map(m => [mib(m[1], m[2]), Number(m[3])]))
    .filter(l => l.length);
  main.querySelectorAll('pre').forEach(pre => {
    for (const m of pre.textContent.matchAll(/([0-9]+) failed reserves, pages ([^|\n]*)/g)) {
      const pages = [...m[2].matchAll(new RegExp(SIZE, 'g'))].map(p => mib(p[1], p[2]));
      if (pages.length !== Number(m[1]))
        out.push(`count: "${m[1]} failed reserves" lists ${pages.length} pages (${where(pre)})`);
      const count = (list, size) =>
        list.filter(([s]) => close(s, size, 0.5)).reduce((n, [, k]) => n + k, 0);
      const sizes = [...new Set(pages)];
      const same = lists.filter(l => l.length === sizes.length && sizes.every(s => count(l, s) > 0));
      if (same.length && !same.some(l => sizes.every(s => count(l, s) === pages.filter(p => p === s).length)))
        out.push(`count: "${m[1]} failed reserves" in a log agrees with no table listing those sizes (${where(pre)})`);
    }
  });
  // The build report's cells, counted by where their output came from, sum to the whole.
  main.querySelectorAll('.cell-report p').forEach(p => {
    const m = p.textContent.match(/^([0-9]+) cells in [^:]*:([^;]*);/);
    if (!m) return;
    const parts = m[2].replace(/\([^)]*\)/g, '').split(/,| and /)
      .map(c => c.trim().match(/^([0-9]+) /)).filter(x => x).map(x => Number(x[1]));
    const sum = parts.reduce((a, b) => a + b, 0);
    if (sum !== Number(m[1]))
      out.push(`sum: the build report's ${m[1]} cells are counted as ${parts.join(' + ')} = ${sum}`);
  });
  const h1 = main.querySelector('h1');
  if (h1 && h1.textContent.trim() === 'Glossary') {
    // A term opens its paragraph in bold.
    const terms = [...main.querySelectorAll('p > strong:first-child')]
      .filter(b => b.parentElement.textContent.trimStart().startsWith(b.textContent))
      .map(b => b.textContent.trim().replace(/[.:]$/, ''));
    const key = t => t.toLowerCase().replace(/[^a-z0-9 ]/g, '');
    terms.forEach((t, i) => {
      if (i > 0 && key(terms[i - 1]).localeCompare(key(t)) > 0)
        out.push(`glossary: "${t}" comes after "${terms[i - 1]}"`);
    });
  }
  const unread = 'pre, table, figure, details, svg, script, style, .cell-badge, .cell-export, ' +
    '.cell-note, .cell-report';
  let words = 0;
  const walk = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let t = walk.nextNode(); t; t = walk.nextNode())
    if (!t.parentElement.closest(unread))
      words += t.textContent.split(/\s+/).filter(w => w).length;
  document.body.setAttribute('data-audit', JSON.stringify({ findings: out, words }));
})();
</script>
