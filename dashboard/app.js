// Sluice's dashboard: a table of the keys (api/overview: sorted, filtered and paged by the server), and
// the cards of the keys opened from it (api/status?key=...), both read again every refresh. No
// dependencies but allowances.js (SluiceAllowances), loaded before it.
"use strict";
// SluiceURL keeps the page's state in its URL's query, so that a link opens what it shows: each script
// writes its own parameters (app.js: key, sort, dir, prefix, page; tickets.js: list, ticket, workflow,
// activity), and reads them back at load and when the browser goes back or forward (popstate).
const SluiceURL = Object.freeze({
  params: () => new URLSearchParams(location.search),
  // write sets names to the pairs of set (the others of names are removed), adding an entry to the
  // history when push, else replacing the current one.
  write(names, set, push) {
    const p = new URLSearchParams(location.search);
    for (const n of names) p.delete(n);
    for (const [n, v] of set) p.append(n, v);
    const q = p.toString(), url = location.pathname + (q ? "?" + q : "") + location.hash;
    if (url === location.pathname + location.search + location.hash) return;
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
  },
});
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

  const ms = (t) => new Date(t).getTime();

  // chart draws one series against its limit. values are the rates (per unitS seconds) of the steps
  // that start at points' at, each drawn at its step's middle; the time axis runs from the first step
  // to now. steps (api/status's limit_steps) are the limit as it stood at each moment: the line is a
  // step where it changed, at effective[field]. Above it the burst is shaded: what a full bucket lets
  // through in one step (rate + burst × unitS / step), so that a point there reads as a burst, not a
  // breach. The limit's label sits clear of the line.
  function chart(cls, points, values, steps, now, field, burstField, unitS, color, unit) {
    const W = 400, H = 110, L = 44, B = 16, T = 6;
    const t0 = points.length ? ms(points[0].at) : ms(now) - stepS * 1000, t1 = Math.max(ms(now), t0 + 1);
    const x = (t) => L + (Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0) * (W - L - 4);
    const segs = limitSegments(steps, t0, t1, field, burstField, unitS);
    const max = Math.max(...segs.map((g) => g.rate), ...values, 1) * 1.1;
    const y = (v) => T + (H - T - B) * (1 - Math.min(v, max) / max);
    const svg = el("svg:svg", { class: "chart " + cls, viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", "data-limit-steps": segs.length });
    svg.append(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B }));
    svg.append(el("svg:text", { x: 2, y: y(max / 1.1) + 4 }, fmt(max / 1.1)));
    svg.append(el("svg:text", { x: 2, y: H - B }, "0"));
    segs.forEach((g, i) => {
      const x1 = x(g.from), x2 = x(g.to), top = y(g.ceiling), base = y(g.rate);
      if (base - top > 0.5) svg.append(el("svg:rect", { class: "burst", x: x1, y: top, width: x2 - x1, height: base - top }));
      svg.append(el("svg:line", { class: "limit", x1: x1, y1: base, x2: x2, y2: base, "data-rate": g.rate }));
      const prev = segs[i - 1];
      if (prev && prev.to === g.from) svg.append(el("svg:line", { class: "limit-rise", x1: x1, y1: y(prev.rate), x2: x1, y2: base }));
    });
    const label = limitLabel(segs, x, y, W, T);
    if (label) svg.append(label);
    // "burst" at the top left of the first band with room for it, clear of the limit's label.
    const clear = (bx, by) => !label || bx > W - 4 || bx + 30 < Number(label.dataset.x0) ||
      by - 9 > Number(label.getAttribute("y")) + 3 || by + 3 < Number(label.getAttribute("y")) - 9;
    const burst = segs.find((g) => y(g.rate) - y(g.ceiling) >= 12 && x(g.to) - x(g.from) >= 36 && clear(x(g.from) + 3, y(g.ceiling) + 10));
    if (burst) svg.append(el("svg:text", { class: "burst-label", x: x(burst.from) + 3, y: y(burst.ceiling) + 10 }, "burst"));
    const d = values.map((v, i) => (i ? "L" : "M") + x(ms(points[i].at) + stepS * 500).toFixed(1) + " " + y(v).toFixed(1)).join(" ");
    svg.append(el("svg:path", { class: "series", d: d, stroke: color }));
    svg.append(el("svg:text", { x: L, y: H - 3 }, "-" + dur((t1 - t0) / 1000)));
    svg.append(el("svg:text", { x: W - 22, y: H - 3 }, "now"));
    const wrap = el("div"), title = el("div", { class: "chart-title" }, unit);
    if (segs.length) title.append(el("span", { class: "legend" }, " · dashed: the limit then · shaded: burst (a full bucket in " + stepS + " s)"));
    wrap.append(title, svg);
    return wrap;
  }

  // limitSegments are the spans of [t0, t1] under each limit step that sets field, with its rate and
  // the ceiling of a step's burst; equal neighbours are one span, and a step that sets no such limit
  // (before the limit existed, or a budget not set then) draws nothing.
  function limitSegments(steps, t0, t1, field, burstField, unitS) {
    const out = [];
    steps.forEach((s, i) => {
      const from = Math.max(ms(s.at), t0), to = i + 1 < steps.length ? Math.min(ms(steps[i + 1].at), t1) : t1;
      const rate = s.effective[field] || 0, ceiling = rate + (s.effective[burstField] || 0) * unitS / stepS;
      if (to <= from || rate <= 0) return;
      const prev = out[out.length - 1];
      if (prev && prev.to === from && prev.rate === rate && prev.ceiling === ceiling) prev.to = to;
      else out.push({ from, to, rate, ceiling });
    });
    return out;
  }

  // limitLabel names the limit in force now at the chart's right end: above every part of the line
  // under it, or below when that would leave the chart. Its width is estimated (the chart is not yet in
  // the page to measure): 6.5 units a character at 10px is wider than the font's.
  function limitLabel(segs, x, y, W, T) {
    const last = segs[segs.length - 1];
    if (!last) return null;
    const text = "limit " + fmt(last.rate), x1 = W - 4, x0 = x1 - text.length * 6.5;
    const under = segs.filter((g) => x(g.to) >= x0 && x(g.from) <= x1).map((g) => y(g.rate));
    let base = Math.min(...under) - 5;
    if (base - 10 < T) base = Math.max(...under) + 12;
    return el("svg:text", { class: "limit-label", x: x1, y: base, "text-anchor": "end", "data-x0": x0 }, text);
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
      sec.append(close, el("div", { class: "content" }), historyBox());
      if (writable) sec.append(formOf(k));
      sections.set(key, sec);
    }
    sec.querySelector(":scope > .content").replaceWith(card(k));
    if (writable) formOf(k);
    // The list of changes is read when the card opens and again when the limit changed.
    const steps = k.limit_steps || [], sig = JSON.stringify([k.configured, k.effective, steps.length > 1 ? steps[steps.length - 1].at : ""]);
    if (sec.dataset.historySig !== sig) {
      sec.dataset.historySig = sig;
      loadHistory(key, sec.querySelector(":scope > .history ol"));
    }
    return sec;
  }

  // historyBox holds a card's recent limit changes (api/history): kept across refreshes, beside the
  // card's content that each refresh redraws.
  function historyBox() {
    const box = el("div", { class: "history" });
    box.append(el("div", { class: "chart-title" }, "recent limit changes"), el("ol", {}));
    return box;
  }

  // exact prints a figure of the history as set, as the sluice command does (three significant digits
  // under 1, so that 0.0001 is not 0), "none" for 0: no limit of that kind, nothing learned, or no
  // limit before the key was created.
  const exact = (n) => n === 0 ? "none" : Math.abs(n) < 1 ? String(Number(n.toPrecision(3)))
    : Number(n).toLocaleString("en-US", { maximumFractionDigits: 2 });

  // loadHistory fills list with key's last changes, newest first; an answer to an older read is dropped.
  async function loadHistory(key, list) {
    const seq = String(Number(list.dataset.seq || 0) + 1);
    list.dataset.seq = seq;
    try {
      const h = await getJSON("api/history?" + new URLSearchParams({ key: key, max: "5" }));
      if (list.dataset.seq !== seq) return;
      const items = h.changes.slice().reverse().map((c) => {
        const li = el("li", { "data-kind": c.kind });
        // The fields changed as the server lists them (pgqueue's LimitRecord.Changed), as the sluice
        // command prints them: a figure, or an allowance added, removed, resized or whose on-spent changed.
        const what = c.changed.map((f) => f.field + ": " + (f.before_allowance || f.after_allowance
          ? SluiceAllowances.historyOf(f.before_allowance) + " → " + SluiceAllowances.historyOf(f.after_allowance)
          : exact(f.before) + " → " + exact(f.after))).join(", ");
        li.append(el("time", { datetime: c.at }, new Date(c.at).toLocaleString()), " ", el("b", {}, c.kind), " by " + c.who + (what ? ": " + what : ""));
        return li;
      });
      list.replaceChildren(...(items.length ? items : [el("li", { class: "none" }, "no changes recorded")]));
    } catch (e) {
      if (list.dataset.seq === seq) list.replaceChildren(el("li", { class: "none" }, "Cannot read the history: " + e.message));
    }
  }

  function card(k) {
    const c = el("div", { class: "content" });
    const e = k.effective, st = k.state, paused = pausedAt(st.paused_until, k.now);
    const badge = paused ? el("span", { class: "badge paused", "data-field": "state" }, "paused " + new Date(st.paused_until).toLocaleTimeString())
      : k.queued > 0 ? el("span", { class: "badge waiting", "data-field": "state" }, "waiting on " + (k.head_wait_reason || "its turn"))
      : k.queued_drawing > 0 ? el("span", { class: "badge waiting", "data-field": "state" }, "holding tickets of other lines")
      : el("span", { class: "badge", "data-field": "state" }, "flowing");
    const h = el("h2"); h.append(el("span", {}, k.configured.key), badge); c.append(h);
    const figs = el("div", { class: "figures" });
    figs.append(
      // A tenant's cap has no line of its own: the tickets it holds wait in a provider's.
      figure("queued", fmt(k.queued) + (k.queued_drawing > k.queued ? " (+" + fmt(k.queued_drawing - k.queued) + " in other lines)" : ""), "queued"),
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
    // Windowed allowances (so much a day, a month, or in a rolling window): use, what remains, reset.
    const allowances = SluiceAllowances.card(k);
    if (allowances) c.append(allowances);
    // The last step is still filling: it is left out rather than drawn as a fall.
    const done = k.usage.slice(0, -1);
    // The limit as it stood over the window; a server without the history gives today's throughout.
    const steps = k.limit_steps && k.limit_steps.length ? k.limit_steps : [{ at: done.length ? done[0].at : k.now, effective: e }];
    const perMinute = (f) => done.map((p) => p[f] * 60 / stepS);
    const draw = (cls, values, field, burstField, unitS, color, unit) => chart(cls, done, values, steps, k.now, field, burstField, unitS, color, unit);
    if (e.tokens_per_minute > 0) c.append(draw("tokens", perMinute("tokens"), "tokens_per_minute", "token_burst", 60, "var(--tok)", "tokens per minute"));
    if (e.input_tokens_per_minute > 0) c.append(draw("input_tokens", perMinute("input_tokens"), "input_tokens_per_minute", "input_token_burst", 60, "var(--tok)", "input tokens per minute"));
    if (e.output_tokens_per_minute > 0) c.append(draw("output_tokens", perMinute("output_tokens"), "output_tokens_per_minute", "output_token_burst", 60, "var(--tok)", "output tokens per minute"));
    const anyTokens = e.tokens_per_minute || e.input_tokens_per_minute || e.output_tokens_per_minute;
    if (e.requests_per_second > 0 || !anyTokens) c.append(draw("requests", done.map((p) => p.requests / stepS), "requests_per_second", "burst", 1, "var(--req)", "requests per second"));
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
  const SORTS = ["key", "queued", "oldest_wait", "use"];
  const defaultDir = (sort) => sort === "key" ? "asc" : "desc"; // the largest figures first
  const URL_PARAMS = ["key", "sort", "dir", "prefix", "page"];

  // saveURL writes the view and the open cards into the URL: push for a user's action.
  function saveURL(push) {
    const set = opened.map((k) => ["key", k]);
    if (view.sort !== "key") set.push(["sort", view.sort]);
    if (view.dir !== defaultDir(view.sort)) set.push(["dir", view.dir]);
    if (view.prefix) set.push(["prefix", view.prefix]);
    if (view.page > 1) set.push(["page", String(view.page)]);
    SluiceURL.write(URL_PARAMS, set, push);
  }

  // readURL sets the view and the open cards to what the URL names; it reports whether it names keys.
  function readURL() {
    const p = SluiceURL.params();
    view.sort = SORTS.includes(p.get("sort")) ? p.get("sort") : "key";
    view.dir = ["asc", "desc"].includes(p.get("dir")) ? p.get("dir") : defaultDir(view.sort);
    view.prefix = p.get("prefix") || "";
    view.page = Math.max(1, Math.floor(Number(p.get("page"))) || 1);
    document.getElementById("prefix").value = view.prefix;
    opened.splice(0, opened.length, ...new Set(p.getAll("key")));
    return p.has("key");
  }
  // AUTO_OPEN: a schema of this many keys or fewer opens every card at the first load, as the page
  // did before it had a table.
  const AUTO_OPEN = 12;
  let overviewSeq = 0, cardsSeq = 0;
  const rows = new Map();

  // getJSON reads an answer of the API; a refusal throws its error, with its status and body.
  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw Object.assign(new Error(body.error || r.statusText), { status: r.status, body: body });
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
      saveURL(false);
      return loadOverview();
    }
    if (firstOverview && !urlKeys && !view.prefix && o.total <= AUTO_OPEN) {
      for (const k of o.rows) if (!opened.includes(k.key)) opened.push(k.key);
      saveURL(false);
    }
    firstOverview = false;
    drawTable(o);
  }

  // useOf names the limit of a row's use in the sluice command's words: "in-flight tokens", "output
  // tokens", or an allowance by its spec ("allowance tokens=10000/day").
  const useOf = (name) => name.startsWith("allowance ") ? name : name === "inflight_tokens" ? "in-flight tokens" : name.replaceAll("_", " ");

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
      set("use", k.use > 0 ? Math.round(k.use * 100) + "% " + useOf(k.use_of) : "–");
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
      let s;
      try {
        s = await getJSON("api/status?" + new URLSearchParams(want.map((k) => ["key", k])));
      } catch (e) {
        // A key that is gone is answered 404, naming it: its card closes, and the others are read again.
        if (e.status !== 404 || !e.body.unknown_keys || seq !== cardsSeq) throw e;
        for (const k of e.body.unknown_keys) if (opened.includes(k)) opened.splice(opened.indexOf(k), 1);
        saveURL(false);
        return loadCards();
      }
      if (seq !== cardsSeq) return;
      stepS = s.step_s || 10;
      keys = s.keys, writable = s.writable;
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
    saveURL(true);
    if (rows.has(key)) rows.get(key).classList.add("open");
    await refreshNow(loadCards);
    // The cards are below the table: bring the one opened into sight.
    const sec = sections.get(key);
    if (sec) sec.scrollIntoView({ block: "nearest" });
  }

  function closeCard(key) {
    const i = opened.indexOf(key);
    if (i >= 0) opened.splice(i, 1);
    saveURL(true);
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
      else view.sort = col, view.dir = defaultDir(col);
      view.page = 1;
      saveURL(true);
      refreshNow(loadOverview);
    });
  }
  document.getElementById("prefix").addEventListener("input", (ev) => {
    view.prefix = ev.target.value;
    view.page = 1;
    saveURL(false); // a key typed is no step back
    refreshNow(loadOverview);
  });
  document.getElementById("prev").addEventListener("click", () => {
    if (view.page > 1) { view.page--; saveURL(true); refreshNow(loadOverview); }
  });
  document.getElementById("next").addEventListener("click", () => {
    if (view.page < view.pages) { view.page++; saveURL(true); refreshNow(loadOverview); }
  });

  // The URL names the view and the cards at load; back and forward name them again.
  const urlKeys = readURL();
  window.addEventListener("popstate", () => {
    readURL();
    refreshNow(async () => { await loadOverview(); await loadCards(); });
  });

  // Each load starts a refresh after it ends, so that a slow answer never overwrites a newer one.
  (async function loop() {
    await load();
    setTimeout(loop, refresh);
  })();
})();
