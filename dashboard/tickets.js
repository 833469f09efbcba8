// Sluice's dashboard, the ticket view: a key's waiting list (api/tickets), opened from the key's card;
// a ticket's explanation (api/explain), opened from the list or found by workflow ID. Both are read
// when asked, not at every refresh: an explanation reads every queued ticket. Pages are built from
// DOM nodes and textContent only: workflow IDs and keys are user data. No dependencies but
// allowances.js (SluiceAllowances), loaded before it.
"use strict";
(function () {
  const cards = document.getElementById("cards");
  const panel = document.getElementById("tickets");
  const list = document.getElementById("ticketlist");
  const explained = document.getElementById("explained");
  const errorBox = document.getElementById("ticket-error");
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmt = (n) => Number(n || 0).toLocaleString("en-US", { maximumFractionDigits: 1 });
  const dur = (s) => s < 60 ? s.toFixed(1) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h";
  const secs = (a, b) => (new Date(a) - new Date(b)) / 1000;
  const clock = (t) => new Date(t).toLocaleTimeString();
  const costText = (input, output) => fmt(input) + " in / " + fmt(output) + " out";
  const human = (name) => String(name).replaceAll("_", " ");

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }

  function showError(msg) {
    errorBox.textContent = msg;
  }

  // Each card gets a button that opens its key's waiting list. The cards belong to app.js, which adds
  // and removes them: the button is added to each new one as it comes.
  function decorate() {
    for (const sec of cards.querySelectorAll(":scope > section.card")) {
      if (sec.querySelector(":scope > button.waiting-list")) continue;
      const b = el("button", { type: "button", class: "waiting-list", "data-action": "tickets" }, "waiting list ›");
      b.addEventListener("click", () => openList(sec.dataset.key));
      sec.append(b);
    }
  }
  new MutationObserver(decorate).observe(cards, { childList: true });
  decorate();

  // head is a view's title line with its reload and close buttons.
  function head(title, reload, close) {
    const h = el("div", { class: "head" });
    const r = el("button", { type: "button", "data-action": "reload", title: "read again" }, "↻ reload");
    const c = el("button", { type: "button", "data-action": "close", title: "close" }, "×");
    r.addEventListener("click", reload);
    c.addEventListener("click", close);
    h.append(el("h2", {}, title), r, c);
    return h;
  }

  let listKey = "", listSeq = 0, selected = 0;

  async function openList(key) {
    const seq = ++listSeq;
    listKey = key;
    try {
      const d = await getJSON("api/tickets?" + new URLSearchParams({ key: key }));
      if (seq !== listSeq) return;
      drawList(d);
      showError("");
      panel.scrollIntoView({ block: "nearest" });
    } catch (e) {
      if (seq === listSeq) showError("waiting list of " + key + ": " + e.message);
    }
  }

  // waitedOf is how long ticket t waited for admission, at now while it is queued.
  const waitedOf = (t, now) => secs(t.admitted_at || now, t.enqueued_at);

  // holdsOf is what holds a ticket of the list, in a few words.
  function holdsOf(t) {
    if (t.state !== "queued") return t.state;
    switch (t.waits_for || "") {
      case "": return "nothing: the next claim admits it";
      case "not_before": return "its retry's backoff";
      case "ahead": return "tickets ahead in " + t.waits_on;
      case "unknown_limit": return t.waits_on + " does not exist";
      default: return t.waits_on + ": " + human(t.waits_for);
    }
  }

  function drawList(d) {
    const queued = d.tickets.filter((t) => t.state === "queued").length;
    const title = d.key + ": " + fmt(queued) + " waiting, " + fmt(d.tickets.length - queued) + " admitted or running";
    const table = el("table", { class: "waiting" });
    const hr = el("tr");
    for (const c of ["place", "ticket", "workflow", "activity type", "waited", "cost in / out", "what holds it"]) hr.append(el("th", {}, c));
    const thead = el("thead"), tbody = el("tbody");
    thead.append(hr);
    for (const t of d.tickets) {
      const tr = el("tr", { "data-ticket": String(t.id), class: t.state + (t.id === selected ? " selected" : "") });
      const open = el("button", { type: "button", class: "ticket", "data-ticket": String(t.id) }, "#" + t.id);
      open.addEventListener("click", () => openExplanation({ id: String(t.id) }, t.id));
      const td = (col, text) => el("td", { "data-col": col }, text);
      const id = td("ticket");
      id.append(open);
      tr.append(td("place", t.place ? fmt(t.place) : "–"), id, td("workflow", t.workflow_id), td("activity_type", t.activity_type),
        td("waited", dur(waitedOf(t, d.now))), td("cost", costText(t.cost - t.output_cost, t.output_cost)), td("holds", holdsOf(t)));
      tbody.append(tr);
    }
    table.append(thead, tbody);
    const parts = [head(title, () => openList(listKey), () => { listSeq++; list.hidden = true; }), table];
    if (!d.tickets.length) parts.push(el("p", { class: "note" }, "No ticket draws on " + d.key + "."));
    if (d.tickets.length >= d.max) parts.push(el("p", { class: "note" }, "The first " + fmt(d.max) + " are shown, those waiting first."));
    list.replaceChildren(...parts);
    list.hidden = false;
  }

  let explainSeq = 0, lastAsk = null;

  // openExplanation reads the explanation of the tickets ask names (api/explain's query: id, or
  // workflow and activity) and shows them; id is the ticket chosen in the list, marked there.
  async function openExplanation(ask, id) {
    const seq = ++explainSeq;
    lastAsk = ask, selected = id || 0;
    for (const tr of list.querySelectorAll("tbody tr")) tr.classList.toggle("selected", Number(tr.dataset.ticket) === selected);
    try {
      const d = await getJSON("api/explain?" + new URLSearchParams(ask));
      if (seq !== explainSeq) return;
      const title = ask.id ? "Ticket #" + ask.id : "Workflow " + ask.workflow + (ask.activity ? ", activity " + ask.activity : "") +
        ": " + fmt(d.tickets.length) + (d.tickets.length === 1 ? " ticket" : " tickets");
      explained.replaceChildren(head(title, () => openExplanation(lastAsk, selected), () => { explainSeq++; explained.hidden = true; }),
        ...d.tickets.map(explanation));
      explained.hidden = false;
      showError("");
      explained.scrollIntoView({ block: "nearest" });
    } catch (e) {
      if (seq === explainSeq) showError((ask.id ? "ticket " + ask.id : "workflow " + ask.workflow) + ": " + e.message);
    }
  }

  document.getElementById("find").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const ask = { workflow: document.getElementById("find-workflow").value };
    const activity = document.getElementById("find-activity").value;
    if (activity) ask.activity = activity;
    openExplanation(ask, 0);
  });

  function figure(field, value, label) {
    const f = el("div", { class: "figure" });
    f.append(el("div", { class: "v", "data-field": field }, value), el("div", { class: "l" }, label));
    return f;
  }

  // explanation is one ticket's view: what holds it, its figures, its limits, its link to Temporal.
  function explanation(x) {
    const t = x.ticket, e = x.explanation;
    const a = el("article", { class: "explain", "data-ticket": String(t.id) });
    a.append(el("h3", {}, "#" + t.id + " · " + t.workflow_id + " · " + t.activity_type + (t.attempt > 1 ? " (attempt " + t.attempt + ")" : "")));
    a.append(el("p", { class: "holds", "data-field": "holds" }, e ? holdsSentence(t, e) : stateSentence(t, x.refusal)));
    if (e && e.refused) a.append(el("p", { class: "refused", "data-field": "refused" }, refusedSentence(t, e)));
    const figs = el("div", { class: "figures" });
    figs.append(
      figure("place", e ? fmt(e.place) + " in line " + e.line : "–", "place"),
      figure("cost", costText(t.cost - t.output_cost, t.output_cost), "cost"),
      figure("waited", dur(waitedOf(t, e ? e.now : t.admitted_at || t.enqueued_at)), "waited"),
      figure("estimate", e ? estimateText(e) : t.state, e ? "expected admission" : "state"));
    a.append(figs);
    if (e) a.append(limitsTable(e, x.allowances || {}));
    if (x.temporal_url && /^https?:\/\//i.test(x.temporal_url)) {
      a.append(el("a", { href: x.temporal_url, target: "_blank", rel: "noopener noreferrer", class: "temporal", "data-field": "temporal" },
        "Open the workflow in Temporal's UI ↗"));
    }
    return a;
  }

  function stateSentence(t, refusal) {
    if (t.state === "finished" && refusal) {
      return "Refused at " + clock(t.finished_at) + ": " + SluiceAllowances.refusalText(refusal, t.finished_at) +
        ". Its activity fails with this, not retried, once the outcome is delivered to Temporal.";
    }
    const waited = " after waiting " + dur(waitedOf(t, t.admitted_at)) + ".";
    switch (t.state) {
      case "admitted": return "Admitted at " + clock(t.admitted_at) + waited + " It holds its limits while its worker starts it.";
      case "running": return "Running since " + clock(t.admitted_at) + waited;
      case "finished": return "Finished at " + clock(t.finished_at) + ": its outcome waits to be delivered to Temporal.";
      default: return "Handed back to Temporal for a retry, which takes its place in line.";
    }
  }

  // holdsSentence says in one sentence what holds a queued ticket (throttle.Explanation's waits_for).
  function holdsSentence(t, e) {
    switch (e.waits_for || "") {
      case "": return "Nothing holds it: every limit has room and nothing is ahead, so the next claim admits it.";
      case "not_before": return "Its retry's backoff holds it until " + clock(t.not_before) + ".";
      case "ahead": return "Every limit has room for it, but " + fmt(e.place - 1) + (e.place === 2 ? " ticket" : " tickets") + " ahead of it in line " + e.line + " go first.";
      case "unknown_limit": return "It draws on " + e.key + ", a limit that does not exist: no claim admits it until it is set.";
    }
    const w = e.limits.find((l) => l.key === e.key);
    if (e.waits_for === "allowance" && w && w.spent) {
      return "Waits for " + SluiceAllowances.spentWhy(e.key, w.spent, e.now) + (w.ahead ? "; " + fmt(w.ahead) + (w.ahead === 1 ? " ticket" : " tickets") + " ahead of it there." : ".");
    }
    const what = e.waits_for === "paused" ? "pause" : human(e.waits_for) + " limit";
    return "Held by " + e.key + "'s " + what + (w ? ": " + binding(w, e) : "") + ".";
  }

  const level = (b) => (b && b.level) || 0;

  // binding gives the figures of the dimension by which limit w refuses the ticket of e.
  function binding(w, e) {
    const l = w.limit, s = w.state, c = e.cost || {}, total = (c.input || 0) + (c.output || 0);
    const until = w.retry_at ? ", enough at " + clock(w.retry_at) : "";
    switch (w.reason) {
      case "concurrency": return fmt(s.inflight_count) + " of " + fmt(l.max_concurrent) + " slots taken";
      case "inflight_tokens": return fmt(s.inflight_tokens) + " of " + fmt(l.max_inflight_tokens) + " in-flight tokens reserved, and it needs " + fmt(total);
      case "rate": return fmt(level(s.requests)) + " of " + fmt(l.burst) + " requests in the bucket at " + fmt(l.requests_per_second) + "/s" + until;
      case "tokens": return fmt(level(s.tokens)) + " tokens left at " + fmt(l.tokens_per_minute) + "/min, and it needs " + fmt(total) + until;
      case "input_tokens": return fmt(level(s.input_tokens)) + " input tokens left at " + fmt(l.input_tokens_per_minute) + "/min, and it needs " + fmt(c.input) + until;
      case "output_tokens": return fmt(level(s.output_tokens)) + " output tokens left at " + fmt(l.output_tokens_per_minute) + "/min, and it needs " + fmt(c.output) + until;
      case "paused": return "paused until " + clock(s.paused_until);
      case "allowance": if (w.spent) return SluiceAllowances.spentWhy(w.key, w.spent, e.now);
    }
    return human(w.reason);
  }

  // refusedSentence says that the next claim refuses the ticket of e for a spent allowance, and why.
  function refusedSentence(t, e) {
    const sp = e.refused, w = e.limits.find((l) => l.spent && SluiceAllowances.sameAllowance(l.spent.allowance, sp.allowance));
    return "It will be refused: " + SluiceAllowances.spentWhy(w ? w.key : "its limit", sp, e.now) +
      "; the next claim fails its activity (" + SluiceAllowances.refusedWhy(sp, t.deadline, e.now) + ").";
  }

  // figuresOf lists every dimension limit w sets, with its use at the explanation's instant, and its
  // allowances (uses: api/explain's allowances of w's key).
  function figuresOf(w, now, uses) {
    const l = w.limit, s = w.state, parts = [];
    if (l.max_concurrent) parts.push("slots " + fmt(s.inflight_count) + " / " + fmt(l.max_concurrent));
    if (l.max_inflight_tokens) parts.push("in-flight tokens " + fmt(s.inflight_tokens) + " / " + fmt(l.max_inflight_tokens));
    if (l.requests_per_second) parts.push("requests " + fmt(level(s.requests)) + " / " + fmt(l.burst) + " at " + fmt(l.requests_per_second) + "/s");
    if (l.tokens_per_minute) parts.push("tokens " + fmt(level(s.tokens)) + " / " + fmt(l.token_burst) + " at " + fmt(l.tokens_per_minute) + "/min");
    if (l.input_tokens_per_minute) parts.push("input tokens " + fmt(level(s.input_tokens)) + " / " + fmt(l.input_token_burst) + " at " + fmt(l.input_tokens_per_minute) + "/min");
    if (l.output_tokens_per_minute) parts.push("output tokens " + fmt(level(s.output_tokens)) + " / " + fmt(l.output_token_burst) + " at " + fmt(l.output_tokens_per_minute) + "/min");
    if (s.paused_until && new Date(s.paused_until) > new Date(now)) parts.push("paused until " + clock(s.paused_until));
    for (const u of uses || []) parts.push(SluiceAllowances.useOf(u));
    return parts.length ? parts.join(" · ") : "no limit set";
  }

  // when is an instant the explanation estimates, or why it is not known.
  function when(at, unknown, now) {
    if (!at) return "not known: " + (unknown || "no estimate");
    const s = secs(at, now);
    return s < 0.5 ? "now" : clock(at) + ", in " + dur(s);
  }

  function estimateText(e) {
    if (e.refused) return "none: the next claim refuses it";
    const s = when(e.estimate, e.unknown, e.now);
    return e.expires ? s + ": past its deadline, Temporal is expected to time it out first" : s;
  }

  // limitsTable has a row per limit the ticket draws on, in the order a claim checks them.
  function limitsTable(e, allowances) {
    const table = el("table", { class: "limits" });
    const hr = el("tr"), thead = el("thead"), tbody = el("tbody");
    for (const c of ["limit", "room", "figures", "tickets ahead", "ready"]) hr.append(el("th", {}, c));
    thead.append(hr);
    for (const w of e.limits) {
      const tr = el("tr", { "data-key": w.key, class: w.key === e.key ? "binds" : "" });
      const ahead = w.ahead ? fmt(w.ahead) + " (" + costText(w.ahead_cost.input, w.ahead_cost.output) + ")" : "0";
      tr.append(el("td", { "data-col": "key" }, w.key + (w.key === e.line ? " (its line)" : "")),
        el("td", { "data-col": "room" }, w.room ? "room" : "no: " + human(w.reason)),
        el("td", { "data-col": "figures" }, figuresOf(w, e.now, allowances[w.key])),
        el("td", { "data-col": "ahead" }, ahead),
        el("td", { "data-col": "ready" }, when(w.ready_at, w.unknown, e.now)));
      tbody.append(tr);
    }
    table.append(thead, tbody);
    return table;
  }
})();
