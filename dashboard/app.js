// Sluice's dashboard: a table of the keys (api/overview: sorted, filtered and paged by the server), and
// the cards of the keys opened from it (api/status?key=...), both read again every refresh. No
// dependencies.
"use strict";
(function () {
  const meta = (n) => document.querySelector('meta[name="' + n + '"]').content;
  const csrf = meta("sluice-csrf");
  const refresh = Math.max(100, Number(meta("sluice-refresh-ms")) || 2000);
  const cards = document.getElementById("cards");
  const errorBox = document.getElementById("error");
  const tbody = document.querySelector("#keys tbody");
  const fmt = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
  const dur = (s) => s <= 0 ? "–" : s < 60 ? s.toFixed(1) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h";
  // waited is how long a line has waited at now (the database's clock), in seconds: 0 when oldest,
  // its oldest_queued, is left out because none waits.
  const waited = (oldest, now) => oldest ? (new Date(now) - new Date(oldest)) / 1000 : 0;
  // pausedAt is a pause still on at now: paused_until is left out when none was set, and may be past.
  const pausedAt = (until, now) => !!until && new Date(until) > new Date(now);
  const svgNS = "http://www.w3.org/2000/svg";
  const el = (tag, attrs, text) => {
    const e = tag.startsWith("svg:") ? document.createElementNS(svgNS, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // chart draws one series (per-step values scaled to a rate) against its limit.
  function chart(cls, values, limit, color, unit) {
    const W = 400, H = 110, L = 44, B = 16, T = 6;
    const max = Math.max(limit || 0, ...values, 1) * 1.1;
    const x = (i) => L + (values.length <= 1 ? 0 : i * (W - L - 4) / (values.length - 1));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const svg = el("svg:svg", { class: "chart " + cls, viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none" });
    svg.append(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B }));
    svg.append(el("svg:text", { x: 2, y: y(max / 1.1) + 4 }, fmt(max / 1.1)));
    svg.append(el("svg:text", { x: 2, y: H - B }, "0"));
    if (limit > 0) {
      svg.append(el("svg:line", { class: "limit", x1: L, y1: y(limit), x2: W, y2: y(limit) }));
      svg.append(el("svg:text", { x: W - 4, y: y(limit) - 3, "text-anchor": "end" }, "limit " + fmt(limit)));
    }
    const d = values.map((v, i) => (i ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1)).join(" ");
    svg.append(el("svg:path", { class: "series", d: d, stroke: color }));
    svg.append(el("svg:text", { x: L, y: H - 3 }, "-" + dur((values.length + 1) * stepS)));
    svg.append(el("svg:text", { x: W - 22, y: H - 3 }, "now"));
    const wrap = el("div");
    wrap.append(el("div", { class: "chart-title" }, unit), svg);
    return wrap;
  }

  let stepS = 10;

  function figure(field, value, label) {
    const f = el("div", { class: "figure" });
    f.append(el("div", { class: "v", "data-field": field }, value), el("div", { class: "l" }, label));
    return f;
  }

  // sections are the cards by key. A card stays in the page across refreshes and only its content is
  // redrawn: its form is never detached, so a click or what a user types is not lost to a refresh.
  const sections = new Map();

  function section(k, writable) {
    const key = k.configured.key;
    let sec = sections.get(key);
    if (!sec) {
      sec = el("section", { class: "card", "data-key": key });
      const close = el("button", { type: "button", class: "close", "data-action": "close", title: "close this card" }, "×");
      close.addEventListener("click", () => closeCard(key));
      sec.append(close, el("div", { class: "content" }));
      if (writable) sec.append(formOf(k));
      sections.set(key, sec);
    }
    sec.querySelector(":scope > .content").replaceWith(card(k));
    if (writable) formOf(k);
    return sec;
  }

  function card(k) {
    const c = el("div", { class: "content" });
    const e = k.effective, st = k.state, paused = pausedAt(st.paused_until, k.now);
    const badge = paused ? el("span", { class: "badge paused", "data-field": "state" }, "paused " + new Date(st.paused_until).toLocaleTimeString())
      : k.queued > 0 ? el("span", { class: "badge waiting", "data-field": "state" }, "waiting on " + (k.head_wait_reason || "its turn"))
      : el("span", { class: "badge", "data-field": "state" }, "flowing");
    const h = el("h2"); h.append(el("span", {}, k.configured.key), badge); c.append(h);
    const figs = el("div", { class: "figures" });
    figs.append(
      figure("queued", fmt(k.queued), "queued"),
      figure("inflight", fmt(k.admitted + k.running) + (e.max_concurrent ? " / " + fmt(e.max_concurrent) : ""), "in flight"),
      figure("inflight_tokens", fmt(st.inflight_tokens) + (e.max_inflight_tokens ? " / " + fmt(e.max_inflight_tokens) : ""), "in-flight tokens"),
      figure("oldest_wait", dur(waited(k.oldest_queued, k.now)), "oldest wait"),
      figure("requests_last_minute", fmt(k.requests_last_minute) + (e.requests_per_second ? " / " + fmt(e.requests_per_second * 60) : ""), "requests, last min"),
      figure("tokens_last_minute", fmt(k.tokens_last_minute) + (e.tokens_per_minute ? " / " + fmt(e.tokens_per_minute) : ""), "tokens, last min"));
    // Input and output budgets (Anthropic's ITPM and OTPM) show when set.
    if (e.input_tokens_per_minute > 0) figs.append(figure("input_tokens_last_minute", fmt(k.input_tokens_last_minute) + " / " + fmt(e.input_tokens_per_minute), "input tokens, last min"));
    if (e.output_tokens_per_minute > 0) figs.append(figure("output_tokens_last_minute", fmt(k.output_tokens_last_minute) + " / " + fmt(e.output_tokens_per_minute), "output tokens, last min"));
    figs.append(
      figure("head_wait_reason", k.queued > 0 ? (k.head_wait_reason || "its turn") : "–", "head waits on"),
      figure("learned", learned(k), "learned from headers"));
    c.append(figs);
    // The last step is still filling: it is left out rather than drawn as a fall.
    const done = k.usage.slice(0, -1);
    const req = done.map((p) => p.requests / stepS), tok = done.map((p) => p.tokens * 60 / stepS);
    if (e.tokens_per_minute > 0) c.append(chart("tokens", tok, e.tokens_per_minute, "var(--tok)", "tokens per minute"));
    if (e.input_tokens_per_minute > 0) c.append(chart("input_tokens", done.map((p) => p.input_tokens * 60 / stepS), e.input_tokens_per_minute, "var(--tok)", "input tokens per minute"));
    if (e.output_tokens_per_minute > 0) c.append(chart("output_tokens", done.map((p) => p.output_tokens * 60 / stepS), e.output_tokens_per_minute, "var(--tok)", "output tokens per minute"));
    const anyTokens = e.tokens_per_minute || e.input_tokens_per_minute || e.output_tokens_per_minute;
    if (e.requests_per_second > 0 || !anyTokens) c.append(chart("requests", req, e.requests_per_second, "var(--req)", "requests per second"));
    return c;
  }

  // LIMIT_FIELDS are the fields of a limit the steering form sets.
  const LIMIT_FIELDS = ["max_concurrent", "requests_per_second", "tokens_per_minute", "input_tokens_per_minute", "output_tokens_per_minute"];

  // forms are the steering forms by key: kept across refreshes, so that what a user types, and the
  // nodes a click lands on, survive the redraw of the card around them.
  const forms = new Map();

  function formOf(k) {
    let f = forms.get(k.configured.key);
    if (!f) {
      f = steer(k);
      forms.set(k.configured.key, f);
    }
    for (const n of LIMIT_FIELDS) {
      const input = f.elements[n], now = String(k.configured[n]);
      if (input.value === input.dataset.initial && document.activeElement !== input) input.value = now;
      input.dataset.initial = now;
    }
    return f;
  }

  function learned(k) {
    const c = k.configured, e = k.effective, parts = [];
    if (e.requests_per_second !== c.requests_per_second) parts.push(fmt(e.requests_per_second) + "/s");
    if (e.tokens_per_minute !== c.tokens_per_minute) parts.push(fmt(e.tokens_per_minute) + " tpm");
    if (e.input_tokens_per_minute !== c.input_tokens_per_minute) parts.push(fmt(e.input_tokens_per_minute) + " itpm");
    if (e.output_tokens_per_minute !== c.output_tokens_per_minute) parts.push(fmt(e.output_tokens_per_minute) + " otpm");
    return parts.length ? parts.join(", ") : "–";
  }

  // steer is the form that changes a key: its limits, a pause, a resume.
  function steer(k) {
    const f = el("form", { class: "steer", "data-key": k.configured.key });
    const input = (name, label, value) => {
      const l = el("label", {}, label);
      l.append(el("input", { name: name, type: "number", step: "any", value: value, "data-initial": value }));
      return l;
    };
    f.append(input("max_concurrent", "max concurrent", k.configured.max_concurrent),
      input("requests_per_second", "requests/s", k.configured.requests_per_second),
      input("tokens_per_minute", "tokens/min", k.configured.tokens_per_minute),
      input("input_tokens_per_minute", "input tokens/min", k.configured.input_tokens_per_minute),
      input("output_tokens_per_minute", "output tokens/min", k.configured.output_tokens_per_minute),
      el("button", { type: "submit", "data-action": "set" }, "Set"),
      input("pause_seconds", "pause (s)", 60),
      el("button", { type: "button", "data-action": "pause" }, "Pause"),
      el("button", { type: "button", "data-action": "resume" }, "Resume"));
    f.addEventListener("submit", (ev) => { ev.preventDefault(); act(f, "set"); });
    f.querySelector('[data-action="pause"]').addEventListener("click", () => act(f, "pause"));
    f.querySelector('[data-action="resume"]').addEventListener("click", () => act(f, "resume"));
    return f;
  }

  async function act(f, action) {
    const key = f.dataset.key, v = (n) => Number(f.elements[n].value);
    let path = "api/resume", body = { key };
    if (action === "pause") {
      path = "api/pause"; body.seconds = v("pause_seconds");
    } else if (action === "set") {
      // Only the fields changed: an unchanged rate keeps its burst.
      path = "api/limits";
      for (const n of LIMIT_FIELDS) {
        const input = f.elements[n];
        if (input.value === input.dataset.initial) continue;
        // An emptied or unreadable field is refused, never sent as 0 (which would lift a cap).
        if (input.value.trim() === "" || !input.validity.valid || !Number.isFinite(input.valueAsNumber)) {
          errorBox.dataset.sticky = "1";
          showError("set " + key + ": " + n + " must be a number, got \"" + input.value + "\"");
          return;
        }
        body[n] = v(n);
      }
    }
    try {
      const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Sluice-CSRF": csrf }, body: JSON.stringify(body) });
      if (!r.ok) throw new Error((await r.json()).error || r.statusText);
      delete errorBox.dataset.sticky;
      showError("");
    } catch (e) {
      errorBox.dataset.sticky = "1"; // a refused change stays on screen until the next change
      showError(action + " " + key + ": " + e.message);
    }
    load();
  }

  function showError(msg) {
    errorBox.textContent = msg;
    errorBox.style.display = msg ? "block" : "none";
  }

  // The overview's state: what the table asks of api/overview. opened are the keys whose cards show,
  // in the order they were opened.
  const view = { sort: "key", dir: "asc", prefix: "", page: 1, pages: 1 };
  const opened = [];
  let firstOverview = true;
  // AUTO_OPEN: a schema of this many keys or fewer opens every card at the first load, as the page
  // did before it had a table.
  const AUTO_OPEN = 12;
  let overviewSeq = 0, cardsSeq = 0;
  const rows = new Map();

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }

  // loadOverview reads the page of the table the view names. An answer to an older request (the view
  // changed since) is dropped.
  async function loadOverview() {
    const seq = ++overviewSeq;
    const q = new URLSearchParams({ sort: view.sort, dir: view.dir, page: String(view.page) });
    if (view.prefix) q.set("prefix", view.prefix);
    const o = await getJSON("api/overview?" + q);
    if (seq !== overviewSeq) return;
    view.pages = o.pages;
    if (!o.rows.length && view.page > o.pages) { // keys went: go back to the last page
      view.page = o.pages;
      return loadOverview();
    }
    if (firstOverview && !view.prefix && o.total <= AUTO_OPEN) {
      for (const k of o.rows) if (!opened.includes(k.key)) opened.push(k.key);
    }
    firstOverview = false;
    drawTable(o);
  }

  function cell(col, text) {
    return el("td", { "data-col": col }, text);
  }

  // drawTable updates the table's rows in place: a row stays in the page across refreshes (only its
  // cells' text changes), so that a click on its key is never lost to a redraw.
  function drawTable(o) {
    const trs = o.rows.map((k) => {
      let tr = rows.get(k.key);
      if (!tr) {
        tr = el("tr", { "data-key": k.key });
        const open = el("button", { type: "button", class: "key", "data-key": k.key }, k.key);
        open.addEventListener("click", () => openCard(k.key));
        const keyCell = el("td", { "data-col": "key" });
        keyCell.append(open);
        tr.append(keyCell, cell("queued"), cell("oldest_wait"), cell("inflight"), cell("use"), cell("paused"));
        rows.set(k.key, tr);
      }
      const set = (col, text) => { tr.querySelector('[data-col="' + col + '"]').textContent = text; };
      set("queued", fmt(k.queued));
      set("oldest_wait", dur(waited(k.oldest_queued, o.now)));
      set("inflight", fmt(k.inflight_count) + (k.max_concurrent ? " / " + fmt(k.max_concurrent) : ""));
      set("use", k.use > 0 ? Math.round(k.use * 100) + "% " + k.use_of.replace("_", " ") : "–");
      const paused = pausedAt(k.paused_until, o.now);
      set("paused", paused ? "until " + new Date(k.paused_until).toLocaleTimeString() : "–");
      tr.classList.toggle("open", opened.includes(k.key));
      tr.classList.toggle("paused", paused);
      return tr;
    });
    for (const key of rows.keys()) if (!o.rows.some((k) => k.key === key)) rows.delete(key);
    const same = trs.length === tbody.children.length && trs.every((tr, i) => tbody.children[i] === tr);
    if (!same) tbody.replaceChildren(...trs);
    if (!trs.length) {
      const td = el("td", { colspan: "6", class: "empty" }, o.params.prefix ? "No key starts with \"" + o.params.prefix + "\"." : "No limits yet in schema " + o.schema + ".");
      const tr = el("tr"); tr.append(td); tbody.replaceChildren(tr);
    }
    document.getElementById("total").textContent = fmt(o.total) + (o.total === 1 ? " key" : " keys") + (o.params.prefix ? " starting with \"" + o.params.prefix + "\"" : "");
    document.getElementById("updated").textContent = "updated " + new Date(o.now).toLocaleTimeString();
    document.getElementById("pageinfo").textContent = "page " + fmt(o.page) + " of " + fmt(o.pages);
    document.getElementById("prev").disabled = o.page <= 1;
    document.getElementById("next").disabled = o.page >= o.pages;
    for (const th of document.querySelectorAll("#keys th[data-sort]")) {
      th.setAttribute("aria-sort", th.dataset.sort !== o.params.sort ? "none" : o.params.desc ? "descending" : "ascending");
    }
  }

  // loadCards reads the status of the opened keys only: the charts' data of the others are never read.
  async function loadCards() {
    const seq = ++cardsSeq;
    const want = opened.slice();
    let keys = [], writable = false;
    if (want.length) {
      const s = await getJSON("api/status?" + new URLSearchParams(want.map((k) => ["key", k])));
      if (seq !== cardsSeq) return;
      stepS = s.step_s || 10;
      keys = s.keys, writable = s.writable;
      // A key that is gone is left out of the answer: its card closes.
      for (const k of want) if (!keys.some((x) => x.configured.key === k)) opened.splice(opened.indexOf(k), 1);
      keys.sort((a, b) => opened.indexOf(a.configured.key) - opened.indexOf(b.configured.key));
    }
    const secs = keys.filter((k) => opened.includes(k.configured.key)).map((k) => section(k, writable));
    const same = secs.length === cards.children.length && secs.every((sec, i) => cards.children[i] === sec);
    if (!same) { // cards opened or closed: lay them out again
      for (const key of sections.keys()) if (!opened.includes(key)) { sections.delete(key); forms.delete(key); }
      cards.replaceChildren(...secs);
      if (!secs.length) cards.append(el("div", { class: "empty hint" }, "Click a key in the table to open its card."));
    }
  }

  async function openCard(key) {
    if (!opened.includes(key)) opened.push(key);
    if (rows.has(key)) rows.get(key).classList.add("open");
    await refreshNow(loadCards);
    // The cards are below the table: bring the one opened into sight.
    const sec = sections.get(key);
    if (sec) sec.scrollIntoView({ block: "nearest" });
  }

  function closeCard(key) {
    const i = opened.indexOf(key);
    if (i >= 0) opened.splice(i, 1);
    if (rows.has(key)) rows.get(key).classList.remove("open");
    refreshNow(loadCards);
  }

  // refreshNow runs one read out of the loop's turn, for what the user just did.
  async function refreshNow(read) {
    try {
      await read();
      if (!errorBox.dataset.sticky) showError("");
    } catch (e) {
      showError("Cannot read the status: " + e.message);
    }
  }

  async function load() {
    try {
      // The table first: at the first load, it may open every card.
      await loadOverview();
      await loadCards();
      document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
      if (!errorBox.dataset.sticky) showError("");
    } catch (e) {
      showError("Cannot read the status: " + e.message);
    }
  }

  for (const th of document.querySelectorAll("#keys th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const col = th.dataset.sort;
      if (view.sort === col) view.dir = view.dir === "asc" ? "desc" : "asc";
      else view.sort = col, view.dir = col === "key" ? "asc" : "desc"; // the largest figures first
      view.page = 1;
      refreshNow(loadOverview);
    });
  }
  document.getElementById("prefix").addEventListener("input", (ev) => {
    view.prefix = ev.target.value;
    view.page = 1;
    refreshNow(loadOverview);
  });
  document.getElementById("prev").addEventListener("click", () => {
    if (view.page > 1) { view.page--; refreshNow(loadOverview); }
  });
  document.getElementById("next").addEventListener("click", () => {
    if (view.page < view.pages) { view.page++; refreshNow(loadOverview); }
  });

  // Each load starts a refresh after it ends, so that a slow answer never overwrites a newer one.
  (async function loop() {
    await load();
    setTimeout(loop, refresh);
  })();
})();
