// Sluice's dashboard, allowances: the words and figures of a limit's windowed allowances (so many
// requests, tokens or money an hour, day, week or month, or in a rolling window) on the cards and in
// the history (app.js); the ticket view shows the server's words instead (api/explain's words).
// Amounts are whole numbers in the meter's unit, money in micro-units (1,000,000 is one unit of the
// currency); a browser reads JSON numbers as doubles, exact to 2^53 (9 × 10^15), far above any real
// allowance. Instants are shown in UTC, with how far they are from the server's clock (now), never
// the browser's. Pages are built from DOM nodes and textContent only: keys are user data. No
// dependencies.
"use strict";
const SluiceAllowances = (function () {
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const grouped = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: 0 });

  // micros writes micro-units as a decimal with 2 to 6 decimals, as the sluice command does (0.50,
  // 1.234567), its whole part grouped when group is set (1,250.00).
  function micros(n, group) {
    const neg = n < 0;
    n = Math.abs(Math.round(Number(n) || 0));
    const whole = Math.floor(n / 1e6), frac = String(n % 1e6).padStart(6, "0").replace(/0+$/, "").padEnd(2, "0");
    return (neg ? "-" : "") + (group ? grouped(whole) : String(whole)) + "." + frac;
  }

  const UNITS = { requests: "request", tokens: "token", input_tokens: "input token", output_tokens: "output token" };

  // amount is n in a's unit, as people read it: "0.25 USD", "50,000 tokens", "1 request".
  function amount(a, n) {
    if (a.meter === "money") return micros(n, true) + " " + a.currency;
    const unit = UNITS[a.meter] || a.meter;
    return grouped(n) + " " + (UNITS[a.meter] && Number(n) !== 1 ? unit + "s" : unit);
  }

  // rolling writes a rolling period (nanoseconds) as the syntax does: 24h, 1h30m, 45s.
  function rolling(ns) {
    let s = Math.round(Number(ns) / 1e9), out = "";
    for (const [size, name] of [[3600, "h"], [60, "m"], [1, "s"]]) {
      const n = Math.floor(s / size);
      if (n > 0) { out += n + name; s -= n * size; }
    }
    return out || "0s";
  }

  // specOf is allowance a in the operators' syntax, as the server writes it (throttle's
  // Allowance.String): usd=0.50/day, tokens=50000/day@America/Los_Angeles, requests=100/24h.
  function specOf(a) {
    const meter = a.meter === "money" ? String(a.currency).toLowerCase() : a.meter;
    const n = a.meter === "money" ? micros(a.amount, false) : String(a.amount);
    return meter + "=" + n + "/" + (a.calendar || rolling(a.rolling)) + (a.zone ? "@" + a.zone : "");
  }

  // sameAllowance reports whether a and b count the same meter over the same period (their amounts
  // may differ: one configured, one lowered to what headers taught).
  const sameAllowance = (a, b) => a.meter === b.meter && (a.currency || "") === (b.currency || "") &&
    (a.calendar || "") === (b.calendar || "") && (a.zone || "") === (b.zone || "") && (a.rolling || 0) === (b.rolling || 0);

  const onSpent = (a) => a.on_spent || "wait";

  // span is a duration of s seconds (s >= 0) in its two largest units: 12h, 3h 12m, 45s.
  function span(s) {
    s = Math.round(s);
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
    const parts = d ? [[d, "d"], [h, "h"]] : h ? [[h, "h"], [m, "m"]] : m ? [[m, "m"], [sec, "s"]] : [[sec, "s"]];
    return parts.filter(([n], i) => i === 0 || n).map(([n, u]) => n + u).join(" ");
  }

  // relative is instant t from now: "in 3h 12m", "5m ago".
  function relative(t, now) {
    const s = (new Date(t) - new Date(now)) / 1000;
    return s >= 0 ? "in " + span(s) : span(-s) + " ago";
  }

  // utc is instant t in UTC, its time of day on now's day, else (or with no now) with its date, as the
  // sluice command writes it: "18:00:00 UTC", "2026-01-02 00:00:00 UTC".
  function utc(t, now) {
    const iso = new Date(t).toISOString(), day = now ? new Date(now).toISOString().slice(0, 10) : "";
    const clock = iso.slice(11, 19) + " UTC";
    return iso.slice(0, 10) === day ? clock : iso.slice(0, 10) + " " + clock;
  }

  // local is instant t on the clock of zone, for a calendar allowance in a zone: "2026-01-02 00:00
  // America/Los_Angeles"; "" when the browser does not know the zone.
  function local(t, zone) {
    try {
      const p = {};
      const f = new Intl.DateTimeFormat("en-US", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
      for (const x of f.formatToParts(new Date(t))) p[x.type] = x.value;
      return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + " " + zone;
    } catch (e) {
      return "";
    }
  }

  // when is instant t in UTC and from now: "2026-01-02 00:00:00 UTC (in 12h)"; for an allowance in a
  // zone, with the zone's clock too.
  function when(t, now, a) {
    const there = a && a.zone ? local(t, a.zone) : "";
    return utc(t, now) + " (" + relative(t, now) + (there ? ", " + there : "") + ")";
  }

  // resetOf says when an allowance's status (api/status's allowances) counts from 0 again.
  function resetOf(s, now) {
    const a = s.allowance;
    if (a.calendar) return s.resets_at ? "resets " + when(s.resets_at, now, a) : "";
    return s.resets_at ? "all back " + when(s.resets_at, now) : "nothing counted in the last " + rolling(a.rolling);
  }

  // historyOf is an allowance of the limit history with what it does when spent, as the sluice
  // command prints it: "usd=0.50/day (refuse)", "requests=100/24h (wait)", or "none" where it is absent.
  const historyOf = (a) => a ? specOf(a) + " (" + onSpent(a) + ")" : "none";

  // card is the allowances' part of key k's card (api/status's key): each allowance's spec, a bar of
  // its use, what it used of its amount, what remains and when it resets, and what a ticket it has no
  // room for does (wait or refuse); a spent one is marked. Null when the limit has none.
  function card(k) {
    const list = k.allowances || [];
    if (!list.length) return null;
    const box = el("div", { class: "allowances", "data-field": "allowances" });
    const ul = el("ul");
    for (const s of list) ul.append(item(s, k));
    box.append(el("div", { class: "chart-title" }, "allowances"), ul);
    return box;
  }

  function item(s, k) {
    const a = s.allowance, spent = s.remaining <= 0, share = a.amount > 0 ? Math.min(1, s.used / a.amount) : 1;
    const li = el("li", { class: "allowance" + (spent ? " spent" : ""), "data-spec": s.spec });
    const configured = ((k.configured && k.configured.allowances) || []).find((c) => sameAllowance(c, a) && c.amount !== a.amount);
    const head = el("div", { class: "allowance-head" });
    head.append(el("b", { "data-part": "spec" }, s.spec + (configured ? " (set " + amount(configured, configured.amount) + ", lowered by the headers)" : "")),
      el("span", { class: "tag on-spent " + onSpent(a), "data-part": "on_spent", title: "what a ticket it has no room for does" },
        "on spent: " + (onSpent(a) === "refuse" ? "refuse" : "wait")));
    if (spent) head.append(el("span", { class: "tag spent", "data-part": "spent" }, "spent"));
    const bar = el("div", { class: "bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(a.amount),
      "aria-valuenow": String(Math.min(s.used, a.amount)), "aria-label": s.spec });
    const fill = el("div", { class: "fill" });
    fill.style.width = (share * 100).toFixed(1) + "%";
    bar.append(fill);
    const figs = el("div", { class: "allowance-figures" });
    figs.append(el("span", { "data-part": "used" }, "used " + amount(a, s.used) + " of " + amount(a, a.amount)), " · ",
      el("span", { "data-part": "remaining" }, amount(a, s.remaining) + " left"));
    const reset = resetOf(s, k.now);
    if (reset) figs.append(" · ", el("span", { "data-part": "resets" }, reset));
    li.append(head, bar, figs);
    return li;
  }

  return Object.freeze({ amount, specOf, historyOf, card });
})();
