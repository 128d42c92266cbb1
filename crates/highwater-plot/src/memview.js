// highwater's memory view: the step selector, the layout switch and the tooltips of one view
// (memview.rs draws the SVG; this only moves, hides and explains what is there).
window.hwMemView = window.hwMemView || function (root) {
  const data = JSON.parse(root.querySelector('.hwv-data').textContent);
  const svg = root.querySelector('svg');
  const tip = root.querySelector('.hwv-tip');
  const rects = svg.querySelector('.hwv-bands').children;
  const stack = svg.querySelector('.hwv-stack');
  const marks = svg.querySelector('.hwv-marks').children;
  const refusals = svg.querySelector('.hwv-refusals').children;
  const [LEFT, PLOT_W, TOP, H] = data.geometry;
  const NS = 'http://www.w3.org/2000/svg';
  const steps = data.steps;
  if (!steps.length) return;
  const lanes = new Map(data.lanes.map(l => [l[0], l]));
  let win = [steps.length ? steps[0][1] : 0, steps.length ? steps[steps.length - 1][2] : 1];
  let layout = 'address';
  let columns = [];

  const bytes = b => {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let u = 0, v = b;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    const digits = u === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2;
    return (+v.toFixed(digits)) + ' ' + units[u];
  };
  const esc = s => String(s).replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
  const stepOf = t => { const s = steps.find(s => t >= s[1] && t < s[2]); return s ? s[0] : null; };
  const xOf = t => LEFT + PLOT_W * (t - win[0]) / Math.max(1, win[1] - win[0]);
  const tOf = x => win[0] + (x - LEFT) / PLOT_W * (win[1] - win[0]);
  const place = (el, a, b) => {
    const x0 = Math.max(a, win[0]), x1 = Math.min(b, win[1]);
    if (x1 <= x0) { el.setAttribute('display', 'none'); return null; }
    el.removeAttribute('display');
    return [xOf(x0), Math.max(0.5, xOf(x1) - xOf(x0))];
  };

  function select(value) {
    const s = steps.find(s => String(s[0]) === String(value));
    win = s ? [s[1], s[2]] : [steps[0][1], steps[steps.length - 1][2]];
    data.bands.forEach((b, i) => {
      const r = rects[i];
      const p = place(r, b[0], b[1] === null ? win[1] : b[1]);
      if (p) { r.setAttribute('x', p[0].toFixed(1)); r.setAttribute('width', p[1].toFixed(1)); }
    });
    steps.forEach((s, i) => {
      const g = marks[i], p = place(g, s[1], s[2]);
      if (p) {
        g.children[0].setAttribute('x1', p[0]); g.children[0].setAttribute('x2', p[0]);
        g.children[1].setAttribute('x', p[0] + 3);
      }
    });
    data.refusals.forEach((r, i) => {
      const l = refusals[i], p = place(l, r[0], r[0] + 1);
      if (p) { l.setAttribute('x1', p[0]); l.setAttribute('x2', p[0]); }
    });
    const shown = s ? s[0] : data.shown;
    let drawn = false;
    svg.querySelectorAll('.hwv-pages').forEach(g => {
      if (g.dataset.step === String(shown)) { g.removeAttribute('display'); drawn = true; }
      else g.setAttribute('display', 'none');
    });
    const none = svg.querySelector('.hwv-nopages');
    if (none) { if (drawn) none.setAttribute('display', 'none'); else none.removeAttribute('display'); }
    root.querySelectorAll('.hwv-says').forEach(p => { p.hidden = p.dataset.step !== String(shown); });
    root.querySelector('.hwv-step').value = s ? String(s[0]) : 'all';
    if (layout === 'stack') drawStack();
  }

  // Bytes in use per family, sampled at the middle of each of 240 columns of the window.
  function drawStack() {
    const n = 240, fams = data.families.length;
    const changes = [];
    data.bands.forEach(b => {
      const end = b[1] === null ? Infinity : b[1];
      if (b[0] < win[1] && end > win[0]) {
        changes.push([b[0], b[4], b[5]]);
        if (end !== Infinity) changes.push([end, -b[4], b[5]]);
      }
    });
    changes.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const now = new Array(fams).fill(0);
    columns = [];
    let k = 0;
    for (let c = 0; c < n; c++) {
      const t = win[0] + (c + 0.5) / n * (win[1] - win[0]);
      while (k < changes.length && changes[k][0] <= t) { now[changes[k][2]] += changes[k][1]; k++; }
      columns.push(now.slice());
    }
    const top = Math.max(1, ...columns.map(col => col.reduce((a, b) => a + b, 0)));
    stack.replaceChildren();
    const base = new Array(n).fill(0);
    for (let f = 0; f < fams; f++) {
      if (!columns.some(col => col[f] > 0)) continue;
      let up = '', down = '';
      for (let c = 0; c < n; c++) {
        const x0 = LEFT + PLOT_W * c / n, x1 = LEFT + PLOT_W * (c + 1) / n;
        const y0 = TOP + H * (1 - base[c] / top), y1 = TOP + H * (1 - (base[c] + columns[c][f]) / top);
        up += `${c ? 'L' : 'M'}${x0.toFixed(1)},${y1.toFixed(1)}L${x1.toFixed(1)},${y1.toFixed(1)}`;
        down = `L${x1.toFixed(1)},${y0.toFixed(1)}L${x0.toFixed(1)},${y0.toFixed(1)}` + down;
        base[c] += columns[c][f];
      }
      const path = document.createElementNS(NS, 'path');
      path.setAttribute('d', up + down + 'Z');
      path.setAttribute('class', 'c' + (f % 11));
      path.dataset.family = f;
      stack.appendChild(path);
    }
    stack.dataset.top = top;
  }

  function setLayout(value) {
    layout = value;
    svg.querySelector('.hwv-bands').style.display = value === 'stack' ? 'none' : '';
    if (value === 'stack') { stack.removeAttribute('display'); drawStack(); }
    else stack.setAttribute('display', 'none');
  }

  // What is under a point of the SVG, as the tooltip's HTML (or null).
  function explain(x, y, target) {
    if (target && target.dataset && target.dataset.page !== undefined) {
      const l = lanes.get(+target.dataset.page);
      return `<b>page ${target.dataset.page}</b><br>${bytes(l[1])}`;
    }
    if (x < LEFT || x > LEFT + PLOT_W) return null;
    if (y >= TOP && y <= TOP + H) {
      const t = tOf(x);
      if (layout === 'stack') {
        const c = Math.min(columns.length - 1, Math.floor((x - LEFT) / PLOT_W * columns.length));
        let at = TOP + H, top = +stack.dataset.top;
        for (let f = 0; f < columns[c].length; f++) {
          const h = H * columns[c][f] / top;
          if (columns[c][f] > 0 && y <= at && y >= at - h) {
            return `<b>${esc(data.families[f])}</b><br>${bytes(columns[c][f])} in use, step ${stepOf(Math.round(t))}`;
          }
          at -= h;
        }
        return null;
      }
      let lane = null;
      for (const l of data.lanes) if (y >= l[2] && y < l[2] + l[3]) lane = l;
      if (!lane) return null;
      const offset = (y - lane[2]) / lane[3] * lane[1];
      const tolerance = 3 / lane[3] * lane[1];
      let best = null, bestDistance = Infinity;
      data.bands.forEach(b => {
        const end = b[1] === null ? Infinity : b[1];
        if (b[2] !== lane[0] || t < b[0] || t >= end) return;
        const d = offset < b[3] ? b[3] - offset : offset > b[3] + b[4] ? offset - b[3] - b[4] : 0;
        if (d < bestDistance) { best = b; bestDistance = d; }
      });
      if (!best || bestDistance > tolerance) {
        return `<b>free</b> in page ${lane[0]} (${bytes(lane[1])}), step ${stepOf(Math.round(t))}`;
      }
      const b = best;
      const from = b[7] >> 1, late = b[7] & 1;
      const [tensor, op] = data.labels[b[6]];
      const ended = b[1] === null ? 'still live when the trace ends'
        : `freed in step ${stepOf(b[1])}${late ? ' (late)' : ''}, ${b[1] - b[0]} events later`;
      return `<b>${esc(tensor)}</b><br>${esc(op)} · ${esc(data.families[b[5]])}<br>` +
        `${bytes(b[4])}, page ${b[2]} at offset ${bytes(b[3])}<br>` +
        `reserved in step ${from === 0 ? '0 (init)' : from}, ${ended}`;
    }
    return null;
  }

  svg.addEventListener('mousemove', ev => {
    const m = svg.getScreenCTM();
    if (!m) return;
    const p = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(m.inverse());
    const html = explain(p.x, p.y, ev.target);
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.hidden = false;
    const box = root.getBoundingClientRect();
    const left = Math.min(ev.clientX - box.left + 14, box.width - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, left) + 'px';
    tip.style.top = (ev.clientY - box.top + 14) + 'px';
  });
  svg.addEventListener('mouseleave', () => { tip.hidden = true; });
  svg.querySelectorAll('.hwv-pick').forEach(r =>
    r.addEventListener('click', () => select(r.dataset.step)));
  root.querySelector('.hwv-step').addEventListener('change', ev => select(ev.target.value));
  root.querySelector('.hwv-layout').addEventListener('change', ev => setLayout(ev.target.value));
  select(data.initial === null ? 'all' : data.initial);
};
