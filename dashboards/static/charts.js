/* perfbisect charts: draws each <figure class="perf-chart"> with uPlot from the JSON the server
   embedded (dashboards/charts.py). Ratio to the control or value, the trials' min..max as a band,
   steps that passed as red lines/bands, failed trials as crosses on the axis. Zoom by dragging,
   by the buttons or by the keyboard (+, -, 0); arrow keys walk the commits and the read-out
   below the chart (an aria-live region) says commit, PR, value with its range and trials.
   A long history comes downsampled (about 1,400 points a series, every step and band extreme
   kept: dashboards/downsample.py); zoomed in, the chart asks spec.history_api for the window
   at full resolution (the bounded column encoding of /api/history) and draws it in place. */
(function () {
  "use strict";
  var fmt = function (v) {
    if (v === null || v === undefined) return "-";
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : Number(v.toPrecision(3)).toString();
  };
  var pct = function (v) { return (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + "%"; };
  var el = function (tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  };

  function hasRatio(spec) {
    return spec.series.some(function (s) { return s.points.some(function (p) { return p.ratio !== null; }); });
  }

  function aligned(spec, view) {
    var xs = [];
    spec.series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p.x); }); });
    xs = Array.from(new Set(xs)).sort(function (a, b) { return a - b; });
    var at = {}; xs.forEach(function (x, i) { at[x] = i; });
    var data = [xs], series = [{}], bands = [], meta = [];
    var key = view === "ratio" ? "ratio" : "value";
    spec.series.forEach(function (s) {
      var mid = xs.map(function () { return null; }), lo = mid.slice(), hi = mid.slice(), ctl = mid.slice();
      var byX = {};
      s.points.forEach(function (p) {
        var i = at[p.x]; byX[p.x] = p;
        mid[i] = p[key]; lo[i] = p[key + "_min"]; hi[i] = p[key + "_max"];
        ctl[i] = p.control;
      });
      var base = data.length;
      data.push(mid, hi, lo);
      series.push({label: s.label, stroke: s.color, width: 2, spanGaps: true, points: {show: true, size: 6}},
                  {label: s.label + " max", stroke: "transparent", points: {show: false}, spanGaps: true},
                  {label: s.label + " min", stroke: "transparent", points: {show: false}, spanGaps: true});
      bands.push({series: [base + 1, base + 2], fill: s.color + "33"});
      meta.push({spec: s, index: base, byX: byX});
      if (view === "value" && ctl.some(function (v) { return v !== null; })) {
        data.push(ctl);
        series.push({label: s.label + " control", stroke: s.color, dash: [6, 4], width: 1.5, spanGaps: true,
                     points: {show: false}});
      }
    });
    return {data: data, series: series, bands: bands, meta: meta, xs: xs};
  }

  function drawMarks(spec) {
    return function (u) {
      var ctx = u.ctx, top = u.bbox.top, height = u.bbox.height, dpr = devicePixelRatio || 1;
      ctx.save();
      var rows = [], boxes = [];  // per label row, the right edge of its last label: labels never overlap
      ctx.font = (11 * dpr) + "px system-ui, sans-serif"; ctx.textAlign = "left";
      spec.steps.slice().sort(function (a, b) { return a.x1 - b.x1; }).forEach(function (m) {
        var x0 = u.valToPos(m.x0 - (m.x0 === m.x1 ? 0 : 0.5), "x", true);
        var x1 = u.valToPos(m.x1, "x", true);
        if (x1 < u.bbox.left - 1 || x1 > u.bbox.left + u.bbox.width + 1) return;  // zoomed out of view
        var color = m.kind === "correctness" ? "#7a00b0" : "#b00020";
        if (m.x1 > m.x0) { ctx.fillStyle = color + "22"; ctx.fillRect(x0, top, x1 - x0, height); }
        ctx.strokeStyle = color; ctx.lineWidth = 1.5 * dpr; ctx.setLineDash([4 * dpr, 3 * dpr]);
        ctx.beginPath(); ctx.moveTo(x1, top); ctx.lineTo(x1, top + height); ctx.stroke();
        ctx.setLineDash([]); ctx.fillStyle = color;
        var w = ctx.measureText(m.label).width, pad = 4 * dpr;
        var left = Math.min(Math.max(x1 - w / 2, u.bbox.left), u.bbox.left + u.bbox.width - w);
        var row = 0;
        while (row < rows.length && rows[row] > left - pad) row++;
        if (row > 2) return;  // three rows full here: the legend and the list below name it
        rows[row] = left + w;
        var y = top + (12 + 13 * row) * dpr;
        ctx.fillText(m.label, left, y);
        boxes.push([left / dpr, (y - 11 * dpr) / dpr, (left + w) / dpr, y / dpr]);
      });
      u.root.dataset.labels = JSON.stringify(boxes);  // where the labels went, in CSS pixels (tests read it)
      ctx.strokeStyle = "#444"; ctx.lineWidth = 2 * dpr;
      spec.failed.forEach(function (f) {
        var x = u.valToPos(f.x, "x", true), y = top + height - 6 * dpr, r = 4 * dpr;
        ctx.beginPath(); ctx.moveTo(x - r, y - r); ctx.lineTo(x + r, y + r);
        ctx.moveTo(x + r, y - r); ctx.lineTo(x - r, y + r); ctx.stroke();
      });
      ctx.restore();
    };
  }

  function shaSplits(xs) {  // ticks only at measured commits, at least 80 px apart: labels never overlap
    return function (u, axisIdx, min, max) {
      var out = [], last = -Infinity;
      xs.forEach(function (x) {
        if (x < min || x > max) return;
        var px = u.valToPos(x, "x");
        if (px - last >= 80) { out.push(x); last = px; }
      });
      return out;
    };
  }

  function readout(spec, al, view, x) {
    var c = null, sha = null;
    al.meta.forEach(function (m) { if (m.byX[x] && !sha) sha = m.byX[x].sha; });
    if (!sha) return null;
    c = spec.commits[sha] || {};
    var frag = document.createDocumentFragment();
    var head = el("p");  // the links from the chart's templates (null off GitHub/GitLab)
    var code = spec.commit_url ? el("a", {href: spec.commit_url.replace("{sha}", sha)}) : el("span");
    code.appendChild(el("code", {}, sha.slice(0, 10)));
    head.appendChild(code);
    if (c.pr_number) {
      head.appendChild(document.createTextNode(" "));
      head.appendChild(spec.pr_url ? el("a", {href: spec.pr_url.replace("{pr}", c.pr_number)}, "#" + c.pr_number)
                                   : el("span", {}, "#" + c.pr_number));
    }
    head.appendChild(document.createTextNode(" " + (c.subject || "") + (c.date ? " (" + c.date + ")" : "") +
                                             " · commit " + x));
    frag.appendChild(head);
    var list = el("ul");
    al.meta.forEach(function (m) {
      var p = m.byX[x]; if (!p) return;
      var key = view === "ratio" ? "ratio" : "value";
      var range = p[key + "_min"] !== null && p[key + "_max"] !== null && p.trials > 1
        ? " [" + fmt(p[key + "_min"]) + " – " + fmt(p[key + "_max"]) + "]" : "";
      var unit = view === "ratio" ? " × control" : " " + (m.spec.unit || "");
      list.appendChild(el("li", {}, m.spec.label + ": " + fmt(p[key]) + range + unit + ", median of " + p.trials +
                          " trial" + (p.trials === 1 ? "" : "s") +
                          (view === "value" && p.control !== null ? ", control " + fmt(p.control) : "")));
    });
    frag.appendChild(list);
    var i = al.xs.indexOf(x), prev = null;
    if (spec.compare_url && i > 0) al.meta.forEach(function (m) { if (!prev && m.byX[al.xs[i - 1]]) prev = m.byX[al.xs[i - 1]].sha; });
    if (prev) {
      var more = el("p");
      more.appendChild(el("a", {href: spec.compare_url + "?base=" + prev + "&head=" + sha, "class": "compare-link"},
                          "compare with the previous measured commit " + prev.slice(0, 7)));
      frag.appendChild(more);
    }
    return frag;
  }

  function windowPoints(body, s, lo, hi) {  // one series of a /api/history?width= answer, as spec points
    var shas = {}, commits = body.commits;
    commits.index.forEach(function (x, i) { shas[x] = commits.sha[i]; });
    var found = null;
    body.cases.forEach(function (c) {
      if (c.case !== s.case) return;
      c.series.forEach(function (line) { if (line.fingerprint === s.fingerprint) found = line.points; });
    });
    if (!found) return [];
    var col = function (name, i) { return found[name] ? found[name][i] : null; };
    return found.index.map(function (x, i) {
      return {x: x, sha: shas[x], value: found.value[i], value_min: col("value_min", i), value_max: col("value_max", i),
              control: col("control_value", i), ratio: col("ratio", i), ratio_min: col("ratio_min", i),
              ratio_max: col("ratio_max", i), trials: found.trials[i]};
    }).filter(function (p) { return p.x >= lo && p.x <= hi; });
  }

  function windowCommits(spec, body) {  // what the read-out shows of the commits a zoom brought
    var c = body.commits;
    c.sha.forEach(function (sha, i) {
      if (spec.commits[sha]) return;
      var pr = c.pr_number ? c.pr_number[i] : null;
      spec.commits[sha] = {subject: c.subject ? c.subject[i] : "", pr_number: pr,
                           date: c.authored_at && c.authored_at[i] ? c.authored_at[i].slice(0, 10) : null};
    });
  }

  function hasControl(spec) {
    return spec.series.some(function (s) { return s.points.some(function (p) { return p.control !== null; }); });
  }

  function tooltip(spec, al, view, x) {
    var parts = [];
    al.meta.forEach(function (m) {
      var p = m.byX[x]; if (!p) return;
      if (!parts.length) parts.push(p.sha.slice(0, 7));
      var v = view === "ratio" ? p.ratio : p.value;
      parts.push((al.meta.length > 1 ? m.spec.label + " " : "") + fmt(v) + (view === "ratio" ? " × control" : " " + (m.spec.unit || "")));
    });
    return parts.join(" · ");
  }

  function legend(spec, box, view) {
    box.textContent = "";
    spec.series.forEach(function (s) {
      var item = el("li"); var sw = el("span", {"class": "swatch", "aria-hidden": "true"});
      sw.style.background = s.color; item.appendChild(sw); item.appendChild(document.createTextNode(s.label));
      box.appendChild(item);
    });
    if (view === "value" && hasControl(spec)) {
      var item = el("li", {"class": "legend-control"});
      item.appendChild(el("span", {"class": "swatch dashed", "aria-hidden": "true"}));
      item.appendChild(document.createTextNode("control (dashed, same colour): the reference kernel measured beside it"));
      box.appendChild(item);
    }
    var steps = spec.steps.filter(function (m) { return m.kind !== "correctness"; });
    var wrong = spec.steps.filter(function (m) { return m.kind === "correctness"; });
    if (steps.length) box.appendChild(el("li", {"class": "legend-step"}, "┆ step (" + steps.map(function (m) { return m.label; }).join(", ") + ")"));
    if (wrong.length) box.appendChild(el("li", {"class": "legend-wrong"}, "┆ wrong results (" + wrong.length + ")"));
    if (spec.failed.length) box.appendChild(el("li", {"class": "legend-failed"}, "× failed trial at " + spec.failed.length +
      " commit" + (spec.failed.length === 1 ? "" : "s") + " (" + spec.failed.map(function (f) { return f.statuses.join("/"); }).join(", ") + ")"));
  }

  function mount(fig) {
    var spec = JSON.parse(fig.querySelector("script[type='application/json']").textContent);
    var plot = fig.querySelector(".plot"), out = fig.querySelector(".readout"), box = fig.querySelector(".legend");
    var view = hasRatio(spec) ? "ratio" : "value", u = null, al = null, cursor = -1;
    var overview = spec.series.map(function (s) { return s.points; });  // as embedded: the whole range, bounded
    var bounded = !!spec.history_api && spec.series.some(function (s) { return s.total > s.points.length; });
    var asked = "all", timer = null;  // the window drawn: "all" (the overview) or "start:end"
    function refetch() {  // after a zoom settles: the visible window at full resolution, or back to the overview
      var xs = [];
      overview.forEach(function (ps) { ps.forEach(function (p) { xs.push(p.x); }); });
      var lo = Math.floor(u.scales.x.min), hi = Math.ceil(u.scales.x.max);
      var whole = lo <= Math.min.apply(null, xs) && hi >= Math.max.apply(null, xs);
      var key = whole ? "all" : lo + ":" + hi;
      if (key === asked) return;
      asked = key;
      if (whole) {
        spec.series.forEach(function (s, i) { s.points = overview[i]; });
        fig.dataset.window = ""; fig.dataset.loading = "false"; draw(); return;
      }
      fig.dataset.loading = "true";
      fetch(spec.history_api + "&start=" + Math.max(0, lo) + "&end=" + Math.max(0, hi), {headers: {Accept: "application/json"}})
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (body) {
          if (asked !== key) return;  // a later zoom asked for another window
          windowCommits(spec, body);
          spec.series.forEach(function (s, i) {  // the window in full, the overview's points around it
            var inside = windowPoints(body, s, lo, hi);
            s.points = overview[i].filter(function (p) { return p.x < lo; }).concat(
              inside, overview[i].filter(function (p) { return p.x > hi; }));
          });
          fig.dataset.window = key;
          draw();
        })
        .catch(function () { if (asked === key) asked = null; })  // the overview stays drawn; the next zoom asks again
        .then(function () {  // an earlier window's answer neither ends a later one's loading nor drops its request
          if (asked === key || asked === null) fig.dataset.loading = "false";
        });
    }
    fig.querySelectorAll("input[name$='-view']").forEach(function (r) {
      if (r.value === "ratio" && !hasRatio(spec)) { r.disabled = true; }
      r.checked = r.value === view;
      r.addEventListener("change", function () {
        if (!r.checked) return;
        view = r.value; draw(); legend(spec, box, view);
        show(cursor);  // the read-out follows the view: no stale "× control" after switching
      });
    });
    legend(spec, box, view);
    function show(idx) {
      if (!al || idx === null || idx === undefined || idx < 0) return;
      var content = readout(spec, al, view, al.xs[idx]);
      if (content) { out.textContent = ""; out.appendChild(content); }
    }
    var tip = el("div", {"class": "tip", "aria-hidden": "true"});  // the read-out is what screen readers get
    function hover(u) {
      var idx = u.cursor.idx;
      if (idx === null || idx === undefined || u.cursor.left < 0) { tip.style.display = "none"; return; }
      cursor = idx;
      show(idx);
      tip.textContent = tooltip(spec, al, view, al.xs[idx]);
      if (!tip.textContent) { tip.style.display = "none"; return; }
      tip.style.display = "block";
      var left = u.cursor.left + 12, width = tip.offsetWidth, room = u.over.clientWidth;
      tip.style.left = (left + width > room ? Math.max(0, u.cursor.left - width - 12) : left) + "px";
      tip.style.top = Math.max(0, u.cursor.top - 34) + "px";
    }
    function draw() {
      var keep = u ? [u.scales.x.min, u.scales.x.max] : null;
      if (u) u.destroy();
      al = aligned(spec, view);
      var width = Math.max(240, plot.clientWidth || 760);
      u = new uPlot({
        width: width, height: 280, series: al.series, bands: al.bands,
        legend: {show: false}, cursor: {drag: {x: true, y: false}},
        scales: {x: {time: false}},
        axes: [{splits: shaSplits(al.xs), values: function (u, vals) {
                  return vals.map(function (x) {
                    var m = al.meta.find(function (m) { return m.byX[x]; }); return m ? m.byX[x].sha.slice(0, 7) : String(x);
                  }); }, stroke: "#333"},
               {label: view === "ratio" ? "ratio to the control" : spec.unit, stroke: "#333", size: 60}],
        hooks: {draw: [drawMarks(spec)], setCursor: [hover],
                setScale: [function (u, key) {
                  if (key !== "x") return;
                  fig.dataset.zoomed = String(u.scales.x.min > al.xs[0] || u.scales.x.max < al.xs[al.xs.length - 1]);
                  if (bounded) { clearTimeout(timer); timer = setTimeout(refetch, 120); }
                }]}
      }, al.data, plot);
      if (keep && keep[0] !== null) u.setScale("x", {min: keep[0], max: keep[1]});
      u.over.appendChild(tip);
      fig.dataset.points = String(al.xs.length);  // what is drawn (the browser tests read it)
      fig.dataset.ready = "true";
    }
    function zoom(factor) {
      var min = u.scales.x.min, max = u.scales.x.max, mid = (min + max) / 2, half = Math.max((max - min) * factor / 2, 1);
      u.setScale("x", {min: mid - half, max: mid + half});
    }
    function reset() { u.setScale("x", {min: al.xs[0], max: al.xs[al.xs.length - 1]}); }
    fig.querySelector(".zoom-in").addEventListener("click", function () { zoom(0.5); });
    fig.querySelector(".zoom-out").addEventListener("click", function () { zoom(2); });
    fig.querySelector(".zoom-reset").addEventListener("click", reset);
    plot.addEventListener("keydown", function (e) {
      var keys = {ArrowRight: cursor + 1, ArrowLeft: cursor - 1, Home: 0, End: al.xs.length - 1};
      if (e.key in keys) {  // stays at either end instead of wrapping round
        cursor = Math.min(al.xs.length - 1, Math.max(0, keys[e.key]));
        var x = al.xs[cursor];
        u.setCursor({left: u.valToPos(x, "x"), top: u.bbox.height / (2 * (devicePixelRatio || 1))});
        show(cursor); e.preventDefault();
      } else if (e.key === "+" || e.key === "=") { zoom(0.5); e.preventDefault(); }
      else if (e.key === "-") { zoom(2); e.preventDefault(); }
      else if (e.key === "0") { reset(); e.preventDefault(); }
    });
    draw();
    cursor = al.xs.length - 1;  // the read-out starts on the newest commit, and so do the arrow keys
    show(cursor);
    var width = plot.clientWidth;
    new ResizeObserver(function () {  // the chart follows its box (a phone turned, a window resized)
      if (!u || Math.abs(plot.clientWidth - width) < 2) return;
      width = plot.clientWidth;
      u.setSize({width: Math.max(240, width), height: 280});
    }).observe(plot);
  }

  document.querySelectorAll("figure.perf-chart").forEach(mount);
})();
