// seatfence console: DOM helpers shared by the views.
//
// Everything is built with createElement / textContent: no innerHTML, no
// template strings parsed as HTML, so API data can never become markup and
// the page keeps working under `require-trusted-types-for 'script'`. No
// element gets a `style` attribute (the CSP has no 'unsafe-inline'): looks
// come from classes in console.css, sizes of bars from <meter>/<progress>
// and SVG geometry attributes.

const SVG_NS = "http://www.w3.org/2000/svg";

/** The model each container was last rendered from by renderIfChanged (kept off the DOM). */
const lastModel = new WeakMap();

/**
 * Build an element. `attrs` keys: `class`, `text` (textContent), `data`
 * (dataset entries), `on` ({event: handler}), `key` (data-key, used to
 * restore focus across re-renders), boolean attributes as true/false, any
 * other attribute as a string. Children: nodes, strings, null/false
 * (skipped) or arrays of those.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

/** As `h`, in the SVG namespace (for the charts). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

function applyAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") el.textContent = String(v);
    else if (k === "class") el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === "key") el.dataset.key = String(v);
    else if (k === "style") throw new Error("inline styles are refused by the CSP; use a class");
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/**
 * Replace `container`'s children with `children`, keeping keyboard focus:
 * when the focused element inside carried a `data-key`, the new element
 * with the same key is focused again, so a 2 s refresh never throws a
 * keyboard user back to the top of the page.
 */
export function render(container, ...children) {
  lastModel.delete(container); // whatever was memoized no longer shows
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset?.key : undefined;
  container.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  if (key !== undefined) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again && !again.disabled) again.focus({ preventScroll: true });
  }
}

/**
 * A render that skips the DOM work when the view model did not change
 * since the last call for this container (most 2 s polls change nothing).
 */
export function renderIfChanged(container, model, build) {
  const sig = JSON.stringify(model);
  if (lastModel.get(container) === sig) return;
  render(container, build(model));
  lastModel.set(container, sig);
}

/** A table: `columns` are header labels, `rows` are <tr> elements. */
export function table(caption, columns, rows, attrs = {}) {
  return h(
    "table",
    { class: "grid", ...attrs },
    caption ? h("caption", { text: caption }) : null,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", text: c })))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: columns.length, class: "muted", text: "none" }))),
  );
}

/** A small label: `kind` is ok | warn | crit | info | muted. */
export function badge(text, kind = "info") {
  return h("span", { class: `badge ${kind}`, text });
}

/** A "yes/no" cell that does not rely on colour alone. */
export function yesNo(v, yesKind = "ok", noKind = "crit") {
  return v ? badge("yes", yesKind) : badge("no", noKind);
}

// ---------------------------------------------------------------- formatting

/** Thousands-separated integer, or an en dash for a missing value. */
export function num(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: 2 });
}

/** A rate with one decimal (two significant digits below 0.1, so a slow trickle does not read 0.0). */
export function rate(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  if (v > 0 && v < 0.1) return v.toPrecision(2);
  return v.toFixed(v >= 100 ? 0 : 1);
}

/** A duration in ms, human sized: 850 ms, 3.2 s, 4 min 10 s, 2 h 5 min. */
export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** A time (ms since the epoch, or an RFC 3339 string) as `YYYY-MM-DD HH:MM:SSZ`. */
export function utc(t) {
  if (t === null || t === undefined || t === "") return "–";
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** A time with milliseconds, `YYYY-MM-DD HH:MM:SS.mmmZ` (steps of a move can be milliseconds apart). */
export function utcMs(t) {
  if (t === null || t === undefined || t === "") return "–";
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toISOString().replace("T", " ");
}

/** Only the clock part of utcMs: `HH:MM:SS.mmm`. */
export function clockMs(t) {
  if (t === null || t === undefined || t === "") return "–";
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toISOString().slice(11, 23);
}

/** An offset from a start, in ms: `+0 ms`, `+68 ms`, `+1,234 ms`, then `+12.5 s`, `+2 min 5 s`. */
export function offsetMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  const v = Math.max(0, ms);
  return v < 10000 ? `+${Math.round(v).toLocaleString("en-US")} ms` : `+${duration(v)}`;
}

/**
 * A count with its noun, singular for exactly one: `counted(1, "group")` →
 * "1 group", `counted(2, "group")` → "2 groups", `counted(3, "entry",
 * "entries")` → "3 entries"; an unknown count reads "– groups".
 */
export function counted(n, one, many = `${one}s`) {
  return `${num(n)} ${n === 1 ? one : many}`;
}

/** A list of ids as `1, 2, 3` (or an en dash). */
export function ids(list) {
  return Array.isArray(list) && list.length ? list.join(", ") : "–";
}

// ---------------------------------------------------------------- status line

/** The footer's status line (polite live region). */
export function setStatus(text, kind = "info") {
  const el = document.getElementById("status");
  if (!el) return;
  el.textContent = text;
  el.className = kind === "info" ? "" : kind;
}

// ---------------------------------------------------------------- answers

/**
 * Show what the edge answered to an action: the request, the status and
 * the JSON body, verbatim. `result` is a resolved answer ({status, body})
 * or an ApiError.
 */
export function showAnswer(container, label, result) {
  const ok = result && !(result instanceof Error);
  const status = ok ? result.status : result.status || "no answer";
  const code = ok ? "" : ` ${result.code}`;
  const body = ok ? result.body : result.body ?? { error: { code: result.code, message: result.message } };
  render(
    container,
    h(
      "div",
      { class: ["answer", ok ? "ok" : "crit"] },
      h("p", {}, h("strong", { text: label }), " → ", badge(`${status}${code}`, ok ? "ok" : "crit"), ` at ${utc(Date.now())}`),
      h("pre", { text: typeof body === "string" ? body : JSON.stringify(body, null, 2) }),
    ),
  );
}

// ---------------------------------------------------------------- confirmation

/**
 * Ask the operator to confirm an action in the page's <dialog>. `lines`
 * describe exactly what will happen. Resolves true on "Confirm", false on
 * "Cancel" or Escape. Focus starts on Cancel (the safe choice) and returns
 * to the element that opened the dialog.
 */
export function confirmAction({ title, lines, confirmLabel = "Confirm" }) {
  const dialog = document.getElementById("confirm-dialog");
  const ok = document.getElementById("confirm");
  const cancel = document.getElementById("confirm-cancel");
  if (dialog.open) return Promise.resolve(false); // one confirmation at a time
  const opener = document.activeElement;
  const openerKey = opener?.dataset?.key;
  document.getElementById("confirm-title").textContent = title;
  render(document.getElementById("confirm-body"), lines.map((l) => (l instanceof Node ? l : h("p", { text: l }))));
  ok.textContent = confirmLabel;

  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener("click", onOk);
      cancel.removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      // The opener may have been re-rendered meanwhile: find it again by its key.
      const back = opener && opener.isConnected ? opener : openerKey ? document.querySelector(`[data-key="${CSS.escape(openerKey)}"]`) : null;
      if (back) back.focus();
      resolve(answer);
    };
    const onOk = () => done(true);
    const onCancel = () => done(false);
    const onClose = () => done(false); // Escape closes the dialog
    ok.addEventListener("click", onOk);
    cancel.addEventListener("click", onCancel);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
    cancel.focus();
  });
}

/**
 * Run one action behind a button: disable it (and mark it busy) while the
 * request runs, then show the answer in `answerEl`. Returns the answer or
 * the ApiError.
 */
export async function runAction(button, answerEl, label, call) {
  if (button) {
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
  }
  render(answerEl, h("p", { class: "muted", text: `${label}: waiting for the edge…` }));
  let result;
  try {
    result = await call();
  } catch (e) {
    result = e;
  } finally {
    if (button) {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
  }
  showAnswer(answerEl, label, result);
  return result;
}

/** An input's datalist, refreshed in place (options only: the input keeps its value and focus). */
export function fillDatalist(list, values) {
  const next = [...new Set(values.map(String))];
  const current = Array.from(list.options, (o) => o.value);
  if (current.length === next.length && current.every((v, i) => v === next[i])) return;
  list.replaceChildren(...next.map((v) => h("option", { value: v })));
}
