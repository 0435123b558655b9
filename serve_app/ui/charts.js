// Small SVG charts for the live page, written here instead of vendoring a library: a
// time-series line chart and a sparkline. Text goes in with textContent only, never
// as markup (endpoint keys and stage names come from configuration and the network).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#5aa9ff", "#3fb37f", "#e0a030", "#c678dd", "#e5534b", "#56c2c2", "#d19a66", "#98c379"];

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  // A round upper bound for an axis (1, 2, 2.5 or 5 times a power of ten) and how many
  // divisions make round ticks of it.
  const DIVISIONS = { 1: 5, 2: 4, 2.5: 5, 5: 5, 10: 5 };
  function niceAxis(v) {
    if (!(v > 0)) return [1, 4];
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p * 1.0000001) return [m * p, DIVISIONS[m]];
    return [10 * p, 5];
  }
  const niceMax = (v) => niceAxis(v)[0];

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + "k";
    return Number.isInteger(v) ? String(v) : String(Number(v.toFixed(v < 10 ? 2 : 1)));
  }

  // series: [{name, color, dash, points: [[t, v|null], ...]}]; t in epoch seconds.
  function line(svg, series, opts) {
    const o = Object.assign({ windowS: 600, now: Date.now() / 1000 }, opts || {});
    const box = svg.getBoundingClientRect();
    const W = Math.max(200, Math.round(box.width)), H = Math.max(80, Math.round(box.height));
    const L = 38, R = 8, T = 8, B = 18;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const t1 = o.now, t0 = t1 - o.windowS;
    let vmax = 0;
    for (const s of series) for (const [t, v] of s.points) if (t >= t0 && v != null && v > vmax) vmax = v;
    const [ymax, divisions] = niceAxis(vmax);
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    for (let i = 0; i <= divisions; i++) {
      const v = (ymax * i) / divisions, yy = y(v);
      el("line", { class: "grid", x1: L, x2: W - R, y1: yy, y2: yy }, svg);
      el("text", { x: L - 4, y: yy + 3, "text-anchor": "end" }, svg).textContent = fmt(v);
    }
    // Time ticks: every 10 s up to a minute, every 30 s to 3 min, else every 1 or 2 min.
    const stepS = o.windowS <= 60 ? 10 : o.windowS <= 180 ? 30 : o.windowS <= 360 ? 60 : 120;
    for (let a = 0; a <= o.windowS + 0.001; a += stepS) {
      const xx = x(t1 - a);
      el("line", { class: "grid", x1: xx, x2: xx, y1: T, y2: H - B }, svg);
      el("text", { x: xx, y: H - 5, "text-anchor": a === 0 ? "end" : "middle" }, svg).textContent =
        a === 0 ? "now" : a % 60 === 0 ? `-${a / 60}m` : a < 60 ? `-${a}s` : `-${Math.floor(a / 60)}m${a % 60}s`;
    }
    el("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }, svg);
    series.forEach((s, i) => {
      let d = "", pen = false;
      for (const [t, v] of s.points) {
        if (t < t0 || v == null) { pen = false; continue; }
        d += `${pen ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      }
      if (!d) return;
      const path = el("path", { d, stroke: s.color || PALETTE[i % PALETTE.length], "data-series": s.name }, svg);
      if (s.dash) path.setAttribute("stroke-dasharray", s.dash);
    });
  }

  function legend(div, series) {
    while (div.firstChild) div.removeChild(div.firstChild);
    for (const s of series) {
      const span = document.createElement("span");
      span.style.setProperty("--c", s.color);
      if (s.dash) span.className = "dash";
      span.textContent = s.name;
      div.appendChild(span);
    }
  }

  function spark(svg, values, color) {
    const W = 200, H = 28;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (values.length < 2) return;
    const vmax = niceMax(Math.max(...values));
    const pts = values.map((v, i) => `${((i / (values.length - 1)) * W).toFixed(1)},${(H - 1 - (v / vmax) * (H - 3)).toFixed(1)}`);
    el("polygon", { points: `0,${H} ${pts.join(" ")} ${W},${H}`, fill: color, "fill-opacity": 0.18 }, svg);
    el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.2,
      "vector-effect": "non-scaling-stroke" }, svg);
  }

  window.Charts = { line, legend, spark, PALETTE, fmt };
})();
