// driver-review live page. Polls ../live once a second (status + new history points) and
// redraws; #/driver/<id> shows ../drivers/<id>/explain. Every number taken verbatim from
// the status document carries data-k (its JSON path) and data-v (its value), so a test
// can check the page against /status. Text is always set with textContent.
"use strict";
(function () {
  const POLL_MS = 1000, MAX_BACKOFF_MS = 8000;
  const VERDICTS = ["approved", "rejected", "error", "confirmed"];
  const state = { token: null, since: 0, history: [], status: null, windowS: 600, failures: 0, timer: null };

  // -- the token: from the fragment once, then the tab's sessionStorage ------------------
  function takeToken() {
    const m = /(?:^#|[#&])token=([^&]*)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem("driver-review-token", decodeURIComponent(m[1]));
      const rest = location.hash.replace(/[#&]?token=[^&]*/, "").replace(/^#&/, "#");
      history.replaceState(null, "", location.pathname + location.search + (rest === "#" ? "" : rest));
    }
    state.token = sessionStorage.getItem("driver-review-token");
  }

  async function getJSON(path) {
    const headers = { accept: "application/json" };
    if (state.token) headers.authorization = "Bearer " + state.token;
    const r = await fetch(new URL(path, location.href), { headers, cache: "no-store" });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error(body.detail || `HTTP ${r.status}`);
      e.status = r.status;
      throw e;
    }
    return body;
  }

  // -- DOM helpers -------------------------------------------------------------------
  function h(tag, props, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === "class") n.className = v;
      else if (k === "style") n.style.cssText = v;
      else n.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) if (kid != null && kid !== false) n.append(kid instanceof Node ? kid : String(kid));
    return n;
  }
  const $ = (id) => document.getElementById(id);
  function fill(node, ...kids) { node.replaceChildren(...kids.flat().filter((k) => k != null)); }

  function fmt(v, digits) {
    if (v == null) return "–";
    if (typeof v === "number") {
      if (Number.isInteger(v) && digits == null) return v.toLocaleString("en-US");
      return v.toLocaleString("en-US", { maximumFractionDigits: digits ?? 2, minimumFractionDigits: digits ?? 0 });
    }
    return String(v);
  }
  function dur(s) {
    if (s == null) return "–";
    if (s < 0.001) return s > 0 ? "<1 ms" : "0 ms";
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 120) return `${s.toFixed(1)} s`;
    if (s < 7200) return `${(s / 60).toFixed(1)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }
  function at(doc, path) { return path.reduce((o, k) => (o == null ? undefined : o[k]), doc); }
  // A number shown as the status has it: data-k/data-v for tests, text for people.
  function num(path, text) {
    const v = at(state.status, path);
    return h("span", { class: "num", "data-k": JSON.stringify(path), "data-v": JSON.stringify(v ?? null) },
      text ? text(v) : fmt(v));
  }
  function row(k, ...v) { return h("div", { class: "row" }, h("span", { class: "k" }, k), h("span", { class: "v" }, ...v)); }
  function bar(parts, total) {
    const b = h("div", { class: "bar" });
    for (const [cls, n] of parts) if (n > 0 && total > 0) b.append(h("i", { class: cls, style: `width:${Math.min(100, (100 * n) / total)}%` }));
    return b;
  }
  const sum = (o) => Object.values(o || {}).reduce((a, b) => a + (typeof b === "number" ? b : 0), 0);
  const last = () => state.history[state.history.length - 1];

  // -- the live view -----------------------------------------------------------------
  // In the configured order (``stages``); a pool that did not answer is still drawn.
  // The configured order, whichever pools answered (/status always names every stage).
  function stages(s) { return s.stages; }

  function renderHeader(s) {
    $("instance").textContent = s.instance;
    const health = $("health");
    health.textContent = s.refused ? "refusing work" : s.ok ? "ok" : "degraded";
    health.className = "pill " + (s.ok ? "ok" : "bad");
    $("updated").textContent = "status of " + new Date(s.at * 1000).toLocaleTimeString();
    document.body.dataset.at = String(s.at);
  }

  function kpi(label, value, sub, cls) {
    return h("div", { class: "kpi " + (cls || "") }, h("div", { class: "l" }, label), h("div", { class: "v" }, value), sub ? h("div", { class: "s" }, sub) : null);
  }

  function renderKpis(s) {
    const p = last();
    const dps = p ? sum(p.decisions_per_s) : null;
    const queued = sum(Object.fromEntries(Object.entries(s.backlog || {}).map(([k, b]) => [k, b.queued])));
    const lag = s.watermark > 0 ? s.at - s.watermark : null;
    const age = s.oldest_review_age_s;
    const q = s.quarantined || {};
    fill($("kpis"),
      kpi("decisions/s", h("span", { id: "kpi-dps" }, dps == null ? "–" : fmt(dps, 1)), `${fmt(sum(at(s, ["counters", "verdicts"])))} decided`),
      kpi("backlog", fmt(queued), h("span", {}, "high water ", num(["high_water"])), queued > 0.8 * (s.high_water || Infinity) ? "warn" : ""),
      kpi("leased", num(["leased"]), h("span", {}, num(["leases"]), " leases")),
      // A driver never reviewed counts as reviewed at the epoch: say so instead of "20,000 d".
      kpi("oldest review", num(["oldest_review_age_s"], (v) => (v > 1e8 ? "not yet" : dur(v))),
        age > 1e8 ? "some drivers never reviewed yet" : "age of the least recently reviewed", age > 86400 ? "warn" : ""),
      kpi("watermark lag", lag == null ? "none yet" : dur(lag), s.watermark > 0 ? new Date(s.watermark * 1000).toLocaleTimeString() : "no poll held yet"),
      kpi("quarantined", num(["quarantined", "total"]), h("span", {}, num(["quarantined", "parked"]), " parked · ", num(["quarantined", "held"]), " held"), q.total ? "warn" : ""),
      kpi("drivers", num(["ledger", "drivers"]), h("span", {}, num(["ledger", "in_review"]), " in review")),
      kpi("cache hit ratio", num(["cache", "hit_ratio"], (v) => (v == null ? "–" : (100 * v).toFixed(1) + "%")), h("span", {}, num(["cache", "entries"]), " entries")));
  }

  function sourceNode(s) {
    const poller = s.poller, ing = s.ingress;
    const n = h("div", { class: "node source", "data-node": "source" }, h("h3", {}, "catalog & pings"));
    if (poller) {
      n.append(row("polls", num(["poller", "polls"]), " every ", num(["poller", "interval_s"], dur)),
        row("changes read", num(["poller", "changes_read"])),
        row("poll failures", num(["poller", "failures"])));
    } else n.append(h("div", { class: "reason" }, "no poller (not a service)"));
    if (ing) {
      n.append(row("pings accepted", num(["ingress", "accepted"])),
        row("duplicates · thin", num(["ingress", "duplicates"]), " · ", num(["ingress", "thin"])),
        row("refused · full", h("span", { class: "num" }, fmt(sum(ing.refused))), " · ", num(["ingress", "intake_full"])),
        row("pings quarantined", h("span", { class: "num" }, fmt(sum(ing.quarantined)))));
    } else n.append(h("div", { class: "reason" }, "webhook ingress not answering"));
    return n;
  }

  function intakeNode(s) {
    const w = s.window || {};
    const queued = Object.values(s.backlog || {}).reduce((a, b) => a + (b.queued || 0), 0);
    return h("div", { class: "node", "data-node": "intake" }, h("h3", {}, "intake", h("span", { class: "muted" }, "window ", num(["window", "bucket_s"], dur))),
      row("events · news", num(["window", "events"]), " · ", num(["window", "news"])),
      row("queued · coalesced", num(["window", "queued"]), " · ", num(["window", "coalesced"])),
      row("backlog / high water", h("span", { class: "num" }, fmt(queued)), " / ", num(["high_water"])),
      bar([["fresh", queued]], s.high_water || 1),
      row("intake calls", num(["counters", "intake_calls"])),
      row("refused (full)", num(["counters", "refused"])));
  }

  function stageNode(s, stage, i, p) {
    const b = (s.backlog || {})[stage] || {}, pool = (s.pools || {})[stage] || {};
    // Held: a check endpoint caps the stage (the pool will not grow); at the limit: its
    // workers wait for permits, as they should when the pipeline runs at the vendor's rate.
    const held = (pool.held_by || []).length > 0;
    const atLimit = !held && (pool.waiting_for_permit || 0) > 0;
    // Workers whose event loop did not answer the pool in time: a check that blocks.
    const silent = (pool.not_answering || 0) > 0;
    const dots = h("div", { class: "dots", title: "workers: min / current / max" });
    for (let k = 0; k < (pool.max_workers || 0); k++) dots.append(h("i", { class: (k < pool.workers ? "on" : "") + (k < pool.min_workers ? " min" : "") }));
    const dps = p ? p.decisions_per_s[stage] : null;
    const spark = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    spark.setAttribute("class", "spark");
    Charts.spark(spark, state.history.map((q) => ((q.backlog[stage] || [0, 0])[0] + (q.backlog[stage] || [0, 0])[1])), Charts.PALETTE[i % 8]);
    return h("div", { class: "node stage" + (held ? " held" : ""), "data-stage": stage },
      h("h3", {}, stage, held ? h("span", { class: "tag" }, "held by check endpoint")
        : silent ? h("span", { class: "tag" }, "worker not answering")
        : atLimit ? h("span", { class: "tag muted" }, "at rate limit") : null),
      row("backlog", num(["backlog", stage, "queued"])),
      bar([["fresh", b.fresh], ["stale", b.stale]], Math.max(b.queued || 0, 1)),
      h("div", { class: "lanes" }, h("b", { class: "f" }, "fresh ", num(["backlog", stage, "fresh"])), h("b", { class: "s" }, "stale ", num(["backlog", stage, "stale"]))),
      row("workers min / now / max", num(["pools", stage, "min_workers"]), " / ", num(["pools", stage, "workers"]), " / ", num(["pools", stage, "max_workers"])),
      dots,
      row("leased · in flight", num(["leased_by_stage", stage]), " · ", num(["pools", stage, "in_flight"])),
      row("waiting for permits", num(["pools", stage, "waiting_for_permit"])),
      row("not answering", num(["pools", stage, "not_answering"])),
      row("decisions/s", h("span", { class: "num", "data-dps": stage }, dps == null ? "–" : fmt(dps, 1))),
      row("appr · rej · err", ...["approved", "rejected", "error"].flatMap((k, j) => [j ? " · " : null, num(["counters", "verdicts_by_stage", stage, k], (x) => fmt(x ?? 0))]).filter(Boolean)),
      spark,
      h("div", { class: "reason", title: pool.last_reason || "" }, (pool.held_by || []).length ? "held by " + pool.held_by.join(", ") : (pool.last_reason || "\u00a0")));
  }

  function sinkNode(s, p) {
    const dps = p ? sum(p.decisions_per_s) : null;
    const n = h("div", { class: "node sink", "data-node": "decisions" }, h("h3", {}, "decisions", h("span", { class: "muted num" }, dps == null ? "" : fmt(dps, 1) + "/s")));
    for (const verdict of VERDICTS) n.append(row(verdict, num(["counters", "verdicts", verdict], (x) => fmt(x ?? 0))));
    n.append(row("published · rejected", num(["ledger", "published"]), " · ", num(["ledger", "rejected"])),
      row("erroring (retried)", num(["ledger", "erroring"])),
      row("leases expired", num(["counters", "leases_expired"])));
    return n;
  }

  function renderFlow(s) {
    const p = last();
    const nodes = [sourceNode(s), intakeNode(s), ...stages(s).map((st, i) => stageNode(s, st, i, p)), sinkNode(s, p)];
    const out = [];
    nodes.forEach((n, i) => { if (i) out.push(h("div", { class: "arrow" }, "→")); out.push(n); });
    fill($("flow"), out);
  }

  function renderEndpoints(s) {
    const gov = s.governor || {};
    const p = last();
    const head = h("tr", {}, ...["endpoint", "state", "answers/s vs limit"].map((t) => h("th", {}, t)),
      ...["answers/s", "rate set", "learnt limit", "safe", "header", "429s", "503s"].map((t) => h("th", { class: "n" }, t)),
      ...["paused", "quota"].map((t) => h("th", {}, t)));
    const rows = Object.keys(gov).map((key) => {
      const g = gov[key], e = p && p.endpoints[key];
      const limit = g.limit_estimate || g.header_rate || g.rate || 1;
      const answers = e ? e.answers_per_s : null;
      const ratio = answers != null ? answers / limit : 0;
      const paused = g.paused_for_s > 0;
      return h("tr", { "data-endpoint": key },
        h("td", { class: "key" }, key),
        h("td", {}, h("span", { class: "badge " + (paused ? "paused" : g.state || "") }, paused ? "paused" : g.state || "–")),
        h("td", { class: "ratebar" }, bar([[ratio > 1 ? "bad" : ratio > 0.9 ? "warn" : "ok", answers || 0]], Math.max(limit, answers || 0))),
        h("td", { class: "n" }, answers == null ? "–" : fmt(answers, 1)),
        h("td", { class: "n" }, num(["governor", key, "rate"], (v) => fmt(v, 1))),
        h("td", { class: "n" }, num(["governor", key, "limit_estimate"], (v) => (v == null ? "learning" : fmt(v, 1)))),
        h("td", { class: "n" }, num(["governor", key, "safe_rate"], (v) => fmt(v, 1))),
        h("td", { class: "n" }, num(["governor", key, "header_rate"], (v) => fmt(v, 1))),
        h("td", { class: "n" }, num(["governor", key, "429s"])),
        h("td", { class: "n" }, num(["governor", key, "503s"])),
        h("td", {}, paused ? `${dur(g.paused_for_s)} · ${g.pause_reason || ""}` : "–"),
        h("td", {}, g.quota ? `${g.quota} (${dur(g.quota_window_s)})` : "–"));
    });
    fill($("endpoints"), h("thead", {}, head), h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 12, class: "muted" }, "no endpoint called yet"))]));
  }

  function renderWindow(s) {
    const w = s.window || {};
    const hist = (w.history || []).slice(-6).reverse();
    fill($("window"), h("dl", { class: "kv" },
      h("dt", {}, "bucket"), h("dd", {}, num(["window", "bucket_s"], dur), " from ", w.bucket_start ? new Date(w.bucket_start * 1000).toLocaleTimeString() : "–"),
      h("dt", {}, "events → news"), h("dd", {}, num(["window", "events"]), " → ", num(["window", "news"])),
      h("dt", {}, "queued · coalesced"), h("dd", {}, num(["window", "queued"]), " · ", num(["window", "coalesced"])),
      h("dt", {}, "watermark"), h("dd", {}, s.watermark > 0 ? new Date(s.watermark * 1000).toISOString().replace(".000", "") : "none yet"),
      h("dt", {}, "earlier buckets"), h("dd", {}, hist.length ? hist.map((b) => `${b.events}/${b.coalesced}`).join("  ") : "–")),
      h("div", { class: "muted" }, "earlier buckets: events / coalesced, newest first"));
  }

  function renderLedger(s) {
    const q = s.quarantined || {};
    const kinds = Object.entries(q.by_kind || {}).map(([k, n]) => `${k} ${n}`).join(", ");
    fill($("ledger"), h("dl", { class: "kv" },
      h("dt", {}, "drivers"), h("dd", {}, num(["ledger", "drivers"])),
      h("dt", {}, "in review"), h("dd", {}, num(["ledger", "in_review"]), " (", num(["ledger", "queued"]), " queued, ", num(["ledger", "leased"]), " leased)"),
      h("dt", {}, "published · rejected"), h("dd", {}, num(["ledger", "published"]), " · ", num(["ledger", "rejected"])),
      h("dt", {}, "quarantined rows"), h("dd", {}, num(["quarantined", "total"]), kinds ? ` (${kinds})` : ""),
      h("dt", {}, "released · forgotten"), h("dd", {}, num(["quarantined", "released"]), " · ", num(["quarantined", "forgotten"]))));
  }

  function renderUnavailable(s) {
    const parts = Object.entries(s.unavailable || {});
    fill($("unavailable"), s.refused ? h("div", { class: "banner" }, s.refused) : null,
      parts.length ? h("dl", { class: "kv" }, parts.flatMap(([k, why]) => [h("dt", {}, k), h("dd", {}, why)])) : h("div", { class: "muted" }, "every part answered"));
  }

  function renderCharts(s) {
    // The charts span what history there is, a minute at least, up to the whole window:
    // a service started a minute ago is not a sliver at the right edge.
    const now = s.at, hist = state.history;
    const span = hist.length ? now - hist[0].t : 0;
    const opts = { windowS: Math.min(state.windowS, Math.max(60, Math.ceil(span / 60) * 60)), now };
    const rate = [];
    Object.keys(s.governor || {}).forEach((key, i) => {
      const c = Charts.PALETTE[i % 8];
      rate.push({ name: key + " answers/s", color: c, points: hist.map((q) => [q.t, q.endpoints[key] ? q.endpoints[key].answers_per_s : null]) });
      rate.push({ name: "learnt limit", color: c, dash: "5 3", points: hist.map((q) => [q.t, q.endpoints[key] ? q.endpoints[key].limit : null]) });
    });
    Charts.line($("chart-rate"), rate, opts);
    Charts.legend($("legend-rate"), rate);
    const st = stages(s);
    const backlog = st.map((stage, i) => ({ name: stage, color: Charts.PALETTE[i % 8], points: hist.map((q) => [q.t, q.backlog[stage] ? q.backlog[stage][0] + q.backlog[stage][1] : null]) }));
    Charts.line($("chart-backlog"), backlog, opts);
    Charts.legend($("legend-backlog"), backlog);
    const dps = st.map((stage, i) => ({ name: stage, color: Charts.PALETTE[i % 8], points: hist.map((q) => [q.t, q.decisions_per_s[stage] ?? null]) }));
    Charts.line($("chart-decisions"), dps, opts);
    Charts.legend($("legend-decisions"), dps);
  }

  function renderLive() {
    const s = state.status;
    if (!s) return;
    renderHeader(s); renderKpis(s); renderFlow(s); renderEndpoints(s);
    renderWindow(s); renderLedger(s); renderUnavailable(s); renderCharts(s);
  }

  function banner(text) { const b = $("banner"); b.hidden = !text; b.textContent = text || ""; }

  async function poll() {
    try {
      const doc = await getJSON(`../live?since=${state.since}`);
      state.status = doc.status;
      state.windowS = doc.window_s || state.windowS;
      for (const p of doc.history) if (p.t > state.since) { state.history.push(p); state.since = p.t; }
      const cut = doc.status.at - state.windowS;
      while (state.history.length && state.history[0].t < cut) state.history.shift();
      state.failures = 0;
      $("conn").textContent = "live"; $("conn").className = "conn live";
      banner(null);
      if (!$("live").hidden) renderLive();
    } catch (e) {
      state.failures += 1;
      $("conn").textContent = "stale"; $("conn").className = "conn stale";
      banner(e.status === 401 ? "This endpoint needs its admin token: open this page as …/ui/#token=<value of DRIVER_REVIEW_ADMIN_TOKEN>." : `status unavailable: ${e.message}`);
    }
    const wait = Math.min(MAX_BACKOFF_MS, POLL_MS * 2 ** Math.min(state.failures, 3));
    state.timer = setTimeout(poll, wait);
  }

  // -- the driver page -----------------------------------------------------------------
  function badge(text) { return h("span", { class: "badge " + String(text).replace(/[^a-z_]/g, "") }, text); }
  function when(epoch) { return epoch > 0 ? new Date(epoch * 1000).toISOString().replace(".000", "") : "never"; }

  async function showDriver(id) {
    const main = $("driver");
    fill(main, h("div", { class: "card" }, "loading ", id, " …"));
    let doc;
    try {
      doc = await getJSON(`../drivers/${encodeURIComponent(id)}/explain`);
    } catch (e) {
      fill(main, h("div", { class: "card" }, h("a", { href: "#/" }, "← pipeline"), h("p", { class: "banner", "data-error": "" }, e.message)));
      return;
    }
    const L = doc.ledger;
    const ledger = L ? h("dl", { class: "kv" },
      h("dt", {}, "version · stage"), h("dd", {}, L.version, " at ", L.stage || "no stage (final)"),
      h("dt", {}, "status · work"), h("dd", {}, badge(L.status), " ", badge(L.work)),
      h("dt", {}, "last decision"), h("dd", {}, L.decided_stage, " ", L.decided_version || "–", " ", badge(L.verdict), " at ", when(L.reviewed_at)),
      h("dt", {}, "changed at"), h("dd", {}, when(L.changed_at)),
      h("dt", {}, "errors"), h("dd", {}, fmt(L.errors)))
      : h("div", { class: "muted" }, doc.service ? `not in the ledger (${doc.service})` : "not in the ledger of this instance");
    const versions = doc.versions.slice().reverse().map((v) => h("div", { class: "card version", "data-version": v.version },
      h("h3", {}, "version ", v.version),
      h("table", { class: "grid" },
        h("thead", {}, h("tr", {}, ...["reviewed at", "stage", "verdict", "lane", "took", "waited", "worker"].map((t) => h("th", {}, t)))),
        h("tbody", {}, v.decisions.flatMap((d) => [
          h("tr", { "data-decision": d.stage }, h("td", { class: "key" }, d.reviewed_at), h("td", {}, d.stage), h("td", {}, badge(d.verdict)),
            h("td", {}, d.lane), h("td", { class: "n" }, dur(d.duration_s)), h("td", { class: "n" }, dur(d.waited_s)), h("td", { class: "key" }, d.worker)),
          h("tr", {}, h("td", { colspan: 7 }, h("div", { class: "checks" }, d.checks.map((c) => h("div", { class: "check", "data-check": c.name },
            h("span", { class: "name" }, c.name), badge(c.outcome), h("span", { class: "num" }, dur(c.duration_s)), h("span", { class: c.reason ? "" : "muted" }, c.reason || "—")))))),
        ])))));
    const bad = doc.quarantined.length ? h("div", { class: "card" }, h("h2", {}, "Quarantined rows"),
      h("table", { class: "grid" }, h("tbody", {}, doc.quarantined.map((q) => h("tr", {}, h("td", { class: "key" }, q.seen_at), h("td", {}, q.source), h("td", {}, q.kind), h("td", {}, q.reason)))))) : null;
    fill(main,
      h("div", { class: "head" }, h("a", { href: "#/" }, "← pipeline"), h("h1", {}, doc.driver_id),
        h("span", { class: "muted" }, `${doc.decisions} decision${doc.decisions === 1 ? "" : "s"} on ${doc.versions.length} version${doc.versions.length === 1 ? "" : "s"}`, doc.data_dir ? ` · ${doc.data_dir}/reviews/` : "")),
      h("div", { class: "card" }, h("h2", {}, "Ledger entry"), ledger), ...versions, bad);
  }

  function route() {
    const m = /^#\/driver\/(.+)$/.exec(location.hash);
    $("live").hidden = !!m;
    $("driver").hidden = !m;
    if (m) showDriver(decodeURIComponent(m[1]));
    else renderLive();
  }

  document.addEventListener("DOMContentLoaded", () => {
    takeToken();
    $("find").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const id = $("find-id").value.trim();
      if (id) location.hash = "#/driver/" + encodeURIComponent(id);
    });
    window.addEventListener("hashchange", route);
    route();
    poll();
  });
})();
