// Sluice's dashboard, the ticket view: a key's waiting list (api/tickets), opened from the key's card;
// a ticket's explanation (api/explain), opened from the list or found by workflow ID. Both are read
// when asked, not at every refresh: an explanation reads every queued ticket. Pages are built from
// DOM nodes and textContent only: workflow IDs and keys are user data. No dependencies but app.js's
// SluiceURL.
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
  // The words of a ticket and of its explanation are the server's (api/tickets' and api/explain's
  // words, made by the code that prints sluice explain): the page only lays them out, capitalising a
  // sentence and ending it with a period.
  const capital = (s) => s.charAt(0).toUpperCase() + s.slice(1);

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
      b.addEventListener("click", () => openList(sec.dataset.key, false));
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

  // The views open are kept in the page's URL (SluiceURL, app.js): list (the key whose waiting list is
  // open), ticket (the ticket explained) or workflow and activity (the search). A user's action adds
  // an entry to the history; a load, and back and forward, open what the URL names.
  const URL_PARAMS = ["list", "ticket", "workflow", "activity"];
  const shown = { list: "", ask: null };

  function saveURL() {
    const set = [];
    if (shown.list) set.push(["list", shown.list]);
    if (shown.ask && shown.ask.id) set.push(["ticket", shown.ask.id]);
    else if (shown.ask) {
      set.push(["workflow", shown.ask.workflow]);
      if (shown.ask.activity) set.push(["activity", shown.ask.activity]);
    }
    SluiceURL.write(URL_PARAMS, set, true);
  }

  function closeList() {
    listSeq++, list.hidden = true, shown.list = "";
  }

  function closeExplanation() {
    explainSeq++, explained.hidden = true, shown.ask = null;
    explained.replaceChildren();
  }

  // restore opens the views the URL names, and closes the others.
  function restore() {
    const p = SluiceURL.params();
    if (p.get("list")) openList(p.get("list"), true);
    else closeList();
    let ask = null;
    if (p.get("ticket")) ask = { id: p.get("ticket") };
    else if (p.get("workflow")) {
      ask = { workflow: p.get("workflow") };
      if (p.get("activity")) ask.activity = p.get("activity");
    }
    document.getElementById("find-workflow").value = (ask && ask.workflow) || "";
    document.getElementById("find-activity").value = (ask && ask.activity) || "";
    if (ask) openExplanation(ask, ask.id ? Number(ask.id) : 0, true);
    else closeExplanation(), showError("");
  }

  // openList opens key's waiting list; fromURL when the URL asks for it (nothing added to the history).
  async function openList(key, fromURL) {
    const seq = ++listSeq;
    listKey = key, shown.list = key;
    if (!fromURL) saveURL();
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
      open.addEventListener("click", () => openExplanation({ id: String(t.id) }, t.id, false));
      const td = (col, text) => el("td", { "data-col": col }, text);
      const id = td("ticket");
      id.append(open);
      tr.append(td("place", t.place ? fmt(t.place) : "–"), id, td("workflow", t.workflow_id), td("activity_type", t.activity_type),
        td("waited", dur(waitedOf(t, d.now))), td("cost", t.words.cost), td("holds", t.words.holds));
      tbody.append(tr);
    }
    table.append(thead, tbody);
    const parts = [head(title, () => openList(listKey, true), () => { closeList(); saveURL(); }), table];
    if (!d.tickets.length) parts.push(el("p", { class: "note" }, "No ticket draws on " + d.key + "."));
    if (d.tickets.length >= d.max) parts.push(el("p", { class: "note" }, "The first " + fmt(d.max) + " are shown, those waiting first."));
    list.replaceChildren(...parts);
    list.hidden = false;
  }

  let explainSeq = 0, lastAsk = null;

  // openExplanation reads the explanation of the tickets ask names (api/explain's query: id, or
  // workflow and activity) and shows them; id is the ticket chosen in the list, marked there; fromURL
  // when the URL asks for it. A failed read clears the explanation shown before: it is not the answer.
  async function openExplanation(ask, id, fromURL) {
    const seq = ++explainSeq;
    lastAsk = ask, selected = id || 0, shown.ask = ask;
    if (!fromURL) saveURL();
    for (const tr of list.querySelectorAll("tbody tr")) tr.classList.toggle("selected", Number(tr.dataset.ticket) === selected);
    try {
      const d = await getJSON("api/explain?" + new URLSearchParams(ask));
      if (seq !== explainSeq) return;
      const title = ask.id ? "Ticket #" + ask.id : "Workflow " + ask.workflow + (ask.activity ? ", activity " + ask.activity : "") +
        ": " + fmt(d.tickets.length) + (d.tickets.length === 1 ? " ticket" : " tickets");
      explained.replaceChildren(head(title, () => openExplanation(lastAsk, selected, true), () => { closeExplanation(); saveURL(); }),
        ...d.tickets.map(explanation));
      explained.hidden = false;
      showError("");
      explained.scrollIntoView({ block: "nearest" });
    } catch (e) {
      if (seq !== explainSeq) return;
      explained.replaceChildren();
      explained.hidden = true;
      showError((ask.id ? "ticket " + ask.id : "workflow " + ask.workflow) + ": " + e.message);
    }
  }

  document.getElementById("find").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const ask = { workflow: document.getElementById("find-workflow").value };
    const activity = document.getElementById("find-activity").value;
    if (activity) ask.activity = activity;
    openExplanation(ask, 0, false);
  });
  window.addEventListener("popstate", restore);
  restore();

  function figureBox(field, value, label) {
    const f = el("div", { class: "figure" });
    f.append(el("div", { class: "v", "data-field": field }, value), el("div", { class: "l" }, label));
    return f;
  }

  // sentence is one of the server's sentences as the page shows it: capitalised, with a period.
  const sentence = (s) => capital(s) + ".";

  // explanation is one ticket's view: what holds it (or what became of it), its figures, its limits,
  // its link to Temporal, in the server's words (x.words).
  function explanation(x) {
    const t = x.ticket, e = x.explanation, w = x.words;
    const a = el("article", { class: "explain", "data-ticket": String(t.id) });
    a.append(el("h3", {}, "#" + t.id + " · " + t.workflow_id + " · " + t.activity_type + (t.attempt > 1 ? " (attempt " + t.attempt + ")" : "")));
    a.append(el("p", { class: "holds", "data-field": "holds" }, sentence(e ? w.holds : w.state)));
    if (w.refused) a.append(el("p", { class: "refused", "data-field": "refused" }, sentence(w.refused)));
    const figs = el("div", { class: "figures" });
    figs.append(
      figureBox("place", e ? fmt(e.place) + " in line " + e.line : "–", "place"),
      figureBox("cost", w.cost, "cost"),
      figureBox("waited", dur(waitedOf(t, e ? e.now : t.admitted_at || t.enqueued_at)), "waited"),
      figureBox("estimate", e ? w.expected : t.state, e ? "expected admission" : "state"));
    a.append(figs);
    if (w.expires) a.append(el("p", { class: "refused", "data-field": "expires" }, sentence(w.expires)));
    if (e) a.append(limitsTable(e, w.limits || []));
    if (x.temporal_url && /^https?:\/\//i.test(x.temporal_url)) {
      a.append(el("a", { href: x.temporal_url, target: "_blank", rel: "noopener noreferrer", class: "temporal", "data-field": "temporal" },
        "Open the workflow in Temporal's UI ↗"));
    }
    return a;
  }

  // limitsTable has a row per limit the ticket draws on, in the order a claim checks them (the
  // server's words of each): its room ("yes", or the dimension that refuses), its figures, the
  // tickets ahead (and held back elsewhere), and when it is ready, with the holders that have run
  // longer than any recent run.
  function limitsTable(e, limits) {
    const table = el("table", { class: "limits" });
    const hr = el("tr"), thead = el("thead"), tbody = el("tbody");
    for (const c of ["limit", "room", "figures", "tickets ahead", "ready"]) hr.append(el("th", {}, c));
    thead.append(hr);
    for (const w of limits) {
      const tr = el("tr", { "data-key": w.key, class: w.key === e.key ? "binds" : "" });
      const readyCell = el("td", { "data-col": "ready" });
      readyCell.append(el("span", { "data-field": "ready" }, w.ready));
      if (w.overdue) readyCell.append(el("div", { class: "note", "data-field": "overdue" }, capital(w.overdue)));
      tr.append(el("td", { "data-col": "key" }, w.key + (w.key === e.line ? " (its line)" : "")),
        el("td", { "data-col": "room" }, w.room),
        el("td", { "data-col": "figures" }, w.figures),
        el("td", { "data-col": "ahead" }, w.ahead), readyCell);
      tbody.append(tr);
    }
    table.append(thead, tbody);
    return table;
  }
})();
