// diel dashboard: reads the JSON endpoints of diel/dashboard/app.py and draws the page.
//
// Every few seconds (info.poll_ms) the page asks /api/versions, one short string a study
// that changes whenever the study does. A panel (studies, study, table, plot, trial) is
// fetched again only when what it shows changed, and, while a search keeps changing it,
// no more often than COST times the time its last refresh took (each panel at most about
// 1/COST of a core): a costly plot of a big study is redrawn less often, so the dashboard
// stays a small load beside the search. A hidden tab stops asking until it is shown.
// What is chosen (study, plot kind, trial) lives in the address's #fragment.
// Plotly's JavaScript (a few MB) loads beside the first requests, not before them.
// performance.mark("diel:table") and ("diel:plot") mark the first table and plot drawn;
// "diel:plotly" when Plotly's script has run, "diel:plot-data" when the first plot's data came.
"use strict";

const COST = 40;
const state = {
  info: {poll_ms: 2000, page_sizes: [50]},
  versions: {}, study: null, detail: null,
  kind: "history", trial: null,
  sort: "", status: "", where: [], offset: 0, limit: 50,
  marked: {},
};
const $ = (id) => document.getElementById(id);

// -- helpers -------------------------------------------------------------------------------
// The server's CPU time for an answer (its Server-Timing header), by answer: what a panel
// counts as the cost of fetching it, rather than the wait, which the search's load inflates.
const serverMs = new WeakMap();

async function getJSON(path, params) {
  const url = new URL(path, document.baseURI);
  for (const [key, value] of Object.entries(params || {})) {
    for (const item of [].concat(value)) {
      if (item !== null && item !== undefined && item !== "") url.searchParams.append(key, item);
    }
  }
  const response = await fetch(url, {cache: "no-store"});
  const body = await response.json();
  if (!response.ok) throw Object.assign(new Error(body.error || response.statusText), {status: response.status});
  const timing = /dur=([\d.]+)/.exec(response.headers.get("Server-Timing") || "");
  if (timing) serverMs.set(body, Number(timing[1]));
  return body;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fmt(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    const size = Math.abs(value);
    return size !== 0 && (size >= 1e5 || size < 1e-3) ? value.toExponential(3) : String(+value.toPrecision(4));
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function clock(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  return isNaN(when) ? iso : when.toLocaleTimeString();
}

function mark(name) {
  if (!state.marked[name]) {
    state.marked[name] = true;
    performance.mark("diel:" + name);
  }
}

let plotlyLoaded = null;
function plotly() {   // Plotly, once its script has run (downloaded since the page began: preload)
  if (!plotlyLoaded) {
    plotlyLoaded = new Promise((resolve, reject) => {
      const script = el("script", {src: state.info.plotly, async: true});
      script.addEventListener("load", () => { mark("plotly"); resolve(window.Plotly); });
      script.addEventListener("error", () => reject(new Error("could not load " + state.info.plotly)));
      document.head.append(script);
    });
  }
  return plotlyLoaded;
}

function purge(node) {
  if (window.Plotly) Plotly.purge(node);
}

function show(id, text) {
  const node = $(id);
  node.textContent = text || "";
  node.hidden = !text;
}

// -- panels --------------------------------------------------------------------------------
// A panel redraws when key() changes; refresh(user) skips the cost throttle for a click.
// Its cost is the server's CPU time for the answer and the time to draw it; waiting (for the
// network, Plotly's script, the first table) is not counted.
// Options: before (what to wait for before drawing), every (the shortest pace, in polls).
class Panel {
  constructor(name, key, load, draw, {before = () => null, every = 1} = {}) {
    Object.assign(this, {name, key, load, draw, before, every});
    this.drawn = null; this.answer = null; this.loading = false; this.again = false; this.notBefore = 0;
    this.settled = new Promise((resolve) => { this.settle = resolve; });   // first refresh over
  }

  async refresh(user) {
    const key = this.key();
    if (key === null || key === this.drawn) return;
    if (!user && performance.now() < this.notBefore) return;
    if (this.loading) { this.again = true; return; }
    this.loading = true;
    let took = 0;
    try {
      let started = performance.now();
      const data = await this.load();
      took = serverMs.get(data) ?? performance.now() - started;
      const text = JSON.stringify(data);   // the same answer as last time: nothing to redraw
      if (this.key() === key && text !== this.answer) {
        await this.before();
        if (this.key() === key) {
          started = performance.now();
          await this.draw(data);
          took += performance.now() - started;
          this.answer = text;
        }
      }
      if (this.key() !== key) this.again = true;
      this.drawn = key;
    } catch (error) {
      this.drawn = key;   // shown once; the next change of the study tries again
      this.answer = null;
      failed(this.name, error);
    } finally {
      this.loading = false;
      this.settle();
      this.notBefore = performance.now() + Math.max(this.every * state.info.poll_ms, COST * took);
      if (this.again) { this.again = false; this.refresh(true); }
    }
  }
}

function failed(panel, error) {
  if (panel === "table") show("table-message", error.message);
  else if (panel === "plot") { show("plot-message", error.message); purge($("plot")); }
  else show("problem", `${panel}: ${error.message}`);
}

const version = () => state.versions[state.study];
const panels = {
  // the counts beside the table: every 5th check at most while the study changes
  studies: new Panel("studies", () => JSON.stringify(state.versions),
                     () => getJSON("api/studies"), drawStudies, {every: 5}),
  study: new Panel("study", () => (version() ? state.study + "@" + version() : null),
                   () => getJSON("api/study", {study: state.study}), drawStudy, {every: 5}),
  table: new Panel("table", () => (version() ? JSON.stringify(
                     [state.study, version(), state.sort, state.status, state.where, state.offset, state.limit]) : null),
                   () => getJSON("api/trials", {study: state.study, sort: state.sort, status: state.status,
                                                where: state.where, offset: state.offset, limit: state.limit}),
                   drawTable),
  plot: new Panel("plot", () => (version() ? [state.study, state.kind, version()].join("\n") : null),
                  () => getJSON("api/plot", {study: state.study, kind: state.kind})
                    .then((answer) => { mark("plot-data"); return answer; }), drawPlot,
                  // the table first: drawing a big plot holds the page a while
                  {before: () => Promise.all([plotly(), panels.table.settled])}),
  trial: new Panel("trial", () => (version() && state.trial !== null ? [state.study, state.trial, version()].join("\n") : null),
                   () => getJSON("api/trial", {study: state.study, number: state.trial}), drawTrial,
                   {before: plotly}),
};

async function refreshAll(user) {
  await Promise.all(Object.values(panels).map((panel) => panel.refresh(user)));
}

// -- the address's fragment ------------------------------------------------------------------
function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.study = params.get("study");
  state.kind = params.get("kind") || "history";
  const trial = params.get("trial");
  state.trial = trial !== null && /^\d+$/.test(trial) ? Number(trial) : null;
}

function writeHash() {
  const params = new URLSearchParams();
  if (state.study !== null) params.set("study", state.study);
  params.set("kind", state.kind);
  if (state.trial !== null) params.set("trial", state.trial);
  history.replaceState(null, "", "#" + params.toString());
}

function choose(changes) {
  Object.assign(state, changes);
  writeHash();
  refreshAll(true);
}

// What belonged to the study shown before: its detail, plot, filters, sort and page.
function forgetStudyView() {
  state.detail = null;
  purge($("plot"));
  panels.plot.answer = null;
  Object.assign(state, {offset: 0, sort: "", where: [], status: ""});
  $("where").value = ""; $("status").value = "";
  drawTrialHint();
}

function chooseStudy(name) {
  if (name === state.study) return;
  forgetStudyView();
  choose({study: name, trial: null});
}

// -- studies -------------------------------------------------------------------------------
function runText(run) {
  if (!run) return ["idle", "no run holds this study now"];
  const age = run.heartbeat_age_s === null ? "?" : Math.round(run.heartbeat_age_s);
  return run.live ? ["running", `running on ${run.host} (pid ${run.pid}) since ${clock(run.started_at)}; heartbeat ${age} s ago`]
                  : ["stale", `a run on ${run.host} (pid ${run.pid}) holds the study but has not beaten for ${age} s`];
}

function sizeText(bytes) {   // 12.5 MB, as diel studies shows it
  const units = ["B", "kB", "MB", "GB", "TB"];
  let size = bytes, unit = 0;
  while (size >= 1000 && unit < units.length - 1) { size /= 1000; unit += 1; }
  return unit === 0 ? `${size} B` : `${size.toFixed(1)} ${units[unit]}`;
}

function drawStudies(data) {
  const list = $("studies");
  list.replaceChildren(...data.studies.map((study) => {
    const [kind, text] = runText(study.run);
    const best = study.front !== null && study.front !== undefined ? `front of ${study.front}` :
                 study.best !== null ? `best ${fmt(study.best)}` : "no ok trial yet";
    return el("li", {class: study.name === state.study ? "chosen" : null, dataset: {study: study.name},
                     onclick: () => chooseStudy(study.name)},
              el("span", {class: "dot " + kind, title: text}), el("strong", {}, study.name),
              el("div", {class: "muted"}, `${study.strategy} · ${study.trials} trials · ${best}` +
                 (study.checkpoint_bytes ? ` · ${sizeText(study.checkpoint_bytes)} of checkpoints` : "")),
              el("div", {class: "counts"}, ["ok", "running", "paused", "pruned", "failed"].filter((s) => study[s])
                 .map((s) => el("span", {class: "status-" + s}, `${study[s]} ${s}`))));
  }));
  if (!data.studies.length) list.replaceChildren(el("li", {class: "muted"}, "no study yet"));
  if (state.study === null && data.studies.length) {
    const live = data.studies.filter((s) => s.run && s.run.live);
    const pick = (live.length ? live : data.studies.slice().sort(
      (a, b) => String(b.updated_at).localeCompare(String(a.updated_at))))[0];
    chooseStudy(pick.name);
  } else if (state.study !== null && !(state.study in state.versions)) {
    $("study").replaceChildren(el("p", {class: "message"},
      `Study ${state.study} is not in the database yet; waiting for it to appear.`));
  }
}

function drawStudy(detail) {
  state.detail = detail;
  for (const li of $("studies").children) li.classList.toggle("chosen", li.dataset.study === detail.name);
  if (!(state.kind in detail.kinds)) { state.kind = "history"; writeHash(); panels.plot.refresh(true); }
  const [kind, text] = runText(detail.run);
  const objectives = detail.objectives.map((o) => `${o.direction} ${o.expression}`).join(", ");
  const workers = detail.workers.map((w) => el("tr", {},
    el("td", {}, w.copy === null ? "not yet reported" : `copy ${w.copy}`), el("td", {}, w.trials),
    ...["ok", "running", "pruned", "failed"].map((s) => el("td", {class: w[s] ? "status-" + s : "muted"}, w[s])),
    el("td", {}, clock(w.last_finished_at))));
  const open = new Set([...$("study").querySelectorAll("details[open]")].map((d) => d.dataset.part));
  $("study").replaceChildren(
    el("h2", {}, detail.name, " ", el("span", {class: "badge " + kind}, kind)),
    el("p", {}, `${detail.strategy} search, ${objectives}; ${detail.trials} trials. ${text}.`),
    el("details", {dataset: {part: "workers"}, open: open.has("workers")},
      el("summary", {}, `worker copies (module ${detail.settings.workers || "?"}), as seen in the trials`),
      el("table", {class: "small"}, el("thead", {}, el("tr", {}, ["copy", "trials", "ok", "running", "pruned",
        "failed", "last finished"].map((h) => el("th", {}, h)))), el("tbody", {}, workers))),
    el("details", {dataset: {part: "settings"}, open: open.has("settings")},
      el("summary", {}, "search settings as stored"),
      el("pre", {}, JSON.stringify(detail.settings, null, 1))));
  $("kinds").replaceChildren(...Object.entries(detail.kinds).map(([name, help]) =>
    el("button", {type: "button", title: help, class: name === state.kind ? "on" : null,
                  dataset: {kind: name}, onclick: () => { choose({kind: name}); drawKinds(); }}, name)));
}

function drawKinds() {
  for (const button of $("kinds").children) button.classList.toggle("on", button.dataset.kind === state.kind);
}

// -- trial table ---------------------------------------------------------------------------
function columns(page) {
  const detail = state.detail || {objectives: [], params: []};
  const out = [{key: "number", label: "#"}, {key: "status", label: "status"}];
  if (detail.objectives.length > 1) {
    detail.objectives.forEach((o, i) => out.push({key: i ? null : "objective", label: o.expression,
                                                   get: (row) => (row.objectives || {})[o.expression]}));
  } else {
    out.push({key: "objective", label: "objective"});
  }
  for (const key of ["accuracy", "loss", "time", "epoch", "worker", "attempts"]) out.push({key, label: key});
  const params = [...new Set([...detail.params, ...page.params])];
  for (const name of params) out.push({key: "params." + name, label: name, get: (row) => row.params[name]});
  out.push({key: null, label: "finished", get: (row) => clock(row.finished_at), title: (row) => row.finished_at});
  out.push({key: null, label: "error", get: (row) => row.error, title: (row) => row.error, cls: "error"});
  return out;
}

function sortBy(key) {
  const [current, order] = state.sort.split(":");
  const next = current === key ? (order === "desc" ? "asc" : "desc") : "asc";
  choose({sort: key + ":" + next, offset: 0});
}

const drawnTable = {head: null, rows: null};   // what the table shows, to rebuild only what changed

function drawTable(page) {
  show("table-message", "");
  const cols = columns(page);
  const [sorted, order] = state.sort.split(":");
  const head = JSON.stringify([cols.map((c) => c.label), state.sort]);
  if (head !== drawnTable.head) {
    drawnTable.head = head;
    drawnTable.rows = null;
    $("trials").tHead.replaceChildren(el("tr", {}, cols.map((c) => el("th", {
      class: c.key ? "sortable" : null, title: c.key ? `sort by ${c.key}` : null, dataset: {key: c.key || ""},
      onclick: c.key ? () => sortBy(c.key) : null},
      c.label, c.key && c.key === sorted ? (order === "desc" ? " ▼" : " ▲") : ""))));
  }
  const rows = JSON.stringify(page.rows);
  if (rows !== drawnTable.rows) {
    drawnTable.rows = rows;
    drawRows(page, cols);
  }
  const last = Math.min(page.offset + page.rows.length, page.total);
  $("range").textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : "no trials match";
  $("prev").disabled = page.offset === 0;
  $("next").disabled = last >= page.total;
  mark("table");
}

// Rows are kept by trial number and moved, not rebuilt: a live search mostly adds a row
// or two a poll, and the page then changes that much.
function drawRows(page, cols) {
  const body = $("trials").tBodies[0];
  const kept = new Map([...body.rows].map((tr) => [tr.dataset.sig, tr]));
  const rows = page.rows.map((row) => {
    const cells = cols.map((c) => [fmt(c.get ? c.get(row) : row[c.key]), c.title ? c.title(row) : null]);
    const sig = JSON.stringify([row.number, row.status, cells]);
    const found = kept.get(sig);
    if (found) { kept.delete(sig); return found; }
    return el("tr", {
      class: "status-" + row.status + (row.number === state.trial ? " chosen" : ""),
      dataset: {number: row.number, status: row.status, sig},
      onclick: () => { choose({trial: row.number}); markChosenRow(); }},
      cells.map(([text, title], i) => el("td", {class: cols[i].cls || null, title}, text)));
  });
  for (const tr of kept.values()) tr.remove();
  rows.forEach((tr, i) => { if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null); });
}

function markChosenRow() {
  for (const tr of $("trials").tBodies[0].rows) tr.classList.toggle("chosen", Number(tr.dataset.number) === state.trial);
}

// -- plots ---------------------------------------------------------------------------------
async function drawPlot(answer) {
  show("plot-note", answer.note);
  show("plot-message", answer.message);
  const node = $("plot");
  if (!answer.figure) { purge(node); return; }
  const layout = Object.assign({}, answer.figure.layout, {autosize: true, uirevision: state.study + "/" + state.kind});
  delete layout.width;
  await Plotly.react(node, answer.figure.data, layout, {responsive: true, displaylogo: false});
  mark("plot");
}

// -- one trial -----------------------------------------------------------------------------
function drawTrialHint() {
  panels.trial.answer = null;
  $("trial").replaceChildren(el("h2", {}, "Trial"),
    el("p", {class: "muted"}, "Click a trial in the table for its parameters and per-epoch curves."));
}

async function drawTrial(trial) {
  const facts = [["status", trial.status], ["objective", trial.objective], ["accuracy", trial.accuracy],
                 ["loss", trial.loss], ["time", trial.time], ["epoch", trial.epoch], ["worker", trial.worker],
                 ["attempts", trial.attempts], ["started", trial.started_at], ["finished", trial.finished_at]]
    .concat(Object.entries(trial.objectives || {}))
    .concat(Object.entries(trial.params).map(([k, v]) => ["params." + k, v]))
    .concat(Object.entries(trial.metrics).map(([k, v]) => ["metrics." + k, v]))
    .filter(([, v]) => v !== null && v !== undefined);
  const chart = el("div", {id: "trial-plot", class: "plot"});
  $("trial").replaceChildren(...[
    el("h2", {}, `Trial ${trial.number} `, el("span", {class: "badge status-" + trial.status}, trial.status)),
    el("table", {class: "small facts"}, el("tbody", {}, facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, fmt(v)))))),
    trial.error ? el("pre", {class: "error"}, trial.error) : null,
    lineageTable(trial.segments || [], trial.number),
    distributionsTable(trial.distributions || {}),
    trial.epochs.length ? chart : el("p", {class: "muted"}, "This trial reported no per-epoch metrics."),
  ].filter(Boolean));
  if (!trial.epochs.length) return;
  const names = [...new Set(trial.epochs.flatMap((e) => Object.keys(e.metrics)))].sort();
  const epochs = trial.epochs.map((e) => e.epoch);
  const layout = {height: 140 * names.length + 70, margin: {l: 60, r: 10, t: 10, b: 40}, showlegend: false,
                  grid: {rows: names.length, columns: 1, pattern: "coupled"},
                  template: "plotly_white", uirevision: "trial"};
  const data = names.map((name, i) => {
    const axis = i ? String(i + 1) : "";
    layout["yaxis" + axis] = {title: {text: name}};
    const values = trial.epochs.map((e) => (typeof e.metrics[name] === "number" ? e.metrics[name] : null));
    const symbols = values.map((_, j) => (trial.status === "pruned" && j === values.length - 1 ? "x" : "circle"));
    return {x: epochs, y: values, name, type: "scatter", mode: "lines+markers", yaxis: "y" + axis,
            marker: {symbol: symbols, size: 7}};
  });
  layout.xaxis = {title: {text: "epoch"}, tickformat: "d"};
  await Plotly.react(chart, data, layout, {responsive: true, displaylogo: false});
}

// A trial whose parameters changed as it ran (population-based training): a row a segment,
// the parameters that changed (all of them in the first), and whose checkpoint it went on from.
function lineageTable(segments, number) {
  if (segments.length < 2 && !segments.some((s) => s.parent_trial !== null)) return null;
  const rows = segments.map((s, i) => {
    const before = i ? segments[i - 1].params : {};
    const changed = Object.entries(s.params).filter(([k, v]) => !i || JSON.stringify(before[k]) !== JSON.stringify(v));
    return el("tr", {}, el("td", {}, String(s.from_step)), el("td", {}, fmt(s.to_step)),
      el("td", {}, s.parent_trial === null ? "" :
        `${s.parent_trial === number ? "own" : "trial " + s.parent_trial} step ${fmt(s.parent_step)}`),
      el("td", {}, changed.map(([k, v]) => `${k}=${fmt(v)}`).join(", ")));
  });
  return el("details", {open: true, class: "lineage"}, el("summary", {}, `lineage: ${segments.length} segments`),
    el("table", {class: "small"}, el("thead", {}, el("tr", {}, ...["from", "to", "parent", "parameters"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
}

// The distributions of the parameters the trial's function asked for as it ran (define-by-run).
function distributionsTable(distributions) {
  const names = Object.keys(distributions);
  if (!names.length) return null;
  return el("details", {class: "distributions"}, el("summary", {}, `suggested as it ran: ${names.join(", ")}`),
    el("table", {class: "small facts"}, el("tbody", {}, names.map((name) =>
      el("tr", {}, el("th", {}, name), el("td", {}, fmt(distributions[name])))))));
}

// -- the loop ------------------------------------------------------------------------------
function live(on, text, title) {   // the indicator's text changes only with its state: no repaint a poll
  const node = $("live");
  if (node.textContent !== text) node.textContent = text;
  node.className = "live " + (on ? "on" : "off");
  node.title = title;
}

async function tick() {
  try {
    state.versions = (await getJSON("api/versions")).versions;
    live(true, "live", "following the database: last checked " + new Date().toLocaleTimeString());
    if (!$("problem").hidden) show("problem", "");
    refreshAll(false);   // the panels refresh at their own pace; the next check does not wait
  } catch (error) {
    if (error.status === 401) show("problem", error.message);   // restarted, with another token
    live(false, "no answer from the dashboard server; retrying", error.message);
  } finally {   // a hidden tab asks again once it is shown
    if (document.hidden) document.addEventListener("visibilitychange", tick, {once: true});
    else setTimeout(tick, state.info.poll_ms);
  }
}

// The filters typed in the box, one a comma, as diel results --where takes them; a comma
// inside a quoted value is the value's (name="a,b"). A value is quoted when it starts
// with ' or " right after the operator; the server reads each filter and says what is wrong.
function splitFilters(text) {
  const filter = /\s*([^,<>=!]*[<>=!]+\s*(?:"[^"]*"|'[^']*')?[^,]*)/y;
  const out = [];
  for (let at = 0; at < text.length;) {
    filter.lastIndex = at;
    const found = filter.exec(text);   // else no operator: up to the comma, for the server to refuse
    const comma = text.indexOf(",", at);
    const end = found ? filter.lastIndex : comma < 0 ? text.length : comma;
    out.push((found ? found[1] : text.slice(at, end)).trim());
    at = end + 1;   // past the comma
  }
  return out.filter(Boolean);
}

function wireControls() {
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const where = splitFilters($("where").value);
    choose({where, status: $("status").value, offset: 0});
  });
  $("status").addEventListener("change", () => choose({status: $("status").value, offset: 0}));
  $("prev").addEventListener("click", () => choose({offset: Math.max(0, state.offset - state.limit)}));
  $("next").addEventListener("click", () => choose({offset: state.offset + state.limit}));
  $("limit").replaceChildren(...state.info.page_sizes.map((n) => el("option", {selected: n === state.limit}, n)));
  $("limit").addEventListener("change", () => choose({limit: Number($("limit").value), offset: 0}));
  window.addEventListener("hashchange", () => {
    const before = state.study;
    readHash();
    if (state.study !== before) forgetStudyView();   // back or forward to another study
    drawKinds();
    markChosenRow();
    refreshAll(true);
  });
}

function start() {
  readHash();
  state.info = JSON.parse($("info").textContent);
  $("database").textContent = state.info.database;
  document.title = `diel dashboard · ${state.info.database}`;
  wireControls();
  plotly().catch((error) => show("problem", error.message));
  tick();
}

start();
