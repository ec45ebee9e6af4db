// The transcript viewer (reporting/transcripts.py embeds this file and the data). The data: JSON, gzipped and
// base64-encoded (the browser's own DecompressionStream unpacks it): a string table `s`, dialogues `d`, turns `t`
// and predictions `p` as parallel index arrays; -1 is null. The list is filtered over the arrays; a dialogue's
// turns and replies are built only when it is opened, ClarifyAgent's module outputs only when they are opened.
"use strict";

async function unpack(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

// ClarifyAgent's module outputs: packed blocks of D.agentChunk predictions, each unpacked once, when first opened
const agentBlocks = JSON.parse(document.getElementById("agent-data").textContent);
const unpackedBlocks = new Map();
function agentOutput(pi, chunk) {
  const k = Math.floor(pi / chunk);
  if (!unpackedBlocks.has(k)) unpackedBlocks.set(k, unpack(agentBlocks[k]));
  return unpackedBlocks.get(k).then((block) => block[pi - k * chunk]);
}

function viewer(D) {
  const S = D.s, d = D.d, t = D.t, p = D.p;
  const nd = d.id.length, nt = t.turn.length, np = p.subject.length;
  const PAGE = 200;
  const $ = (id) => document.getElementById(id);
  const str = (i) => (i < 0 ? null : S[i]);
  const turnEnd = (di) => (di + 1 < nd ? d.t0[di + 1] : nt);
  const predEnd = (ti) => (ti + 1 < nt ? t.p0[ti + 1] : np);
  const el = (tag, attrs, ...children) => {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
    children.forEach((c) => e.append(c ?? ""));
    return e;
  };

  const predDialogue = new Int32Array(np);
  for (let di = 0; di < nd; di++) {
    for (let ti = d.t0[di]; ti < turnEnd(di); ti++) predDialogue.fill(di, t.p0[ti], predEnd(ti));
  }

  function fillOptions(id, column) {
    const seen = [...new Set(column)].filter((i) => i >= 0).sort((a, b) => S[a].localeCompare(S[b]));
    $(id).append(...seen.map((i) => el("option", { value: String(i) }, S[i])));
  }
  fillOptions("f-persona", d.persona);
  fillOptions("f-subtype", d.subtype);
  fillOptions("f-method", p.method);
  fillOptions("f-subject", p.subject);

  const chosen = (id) => ($(id).value === "" ? -1 : Number($(id).value));
  const keepPred = (pi, method, subject) =>
    (method < 0 || p.method[pi] === method) && (subject < 0 || p.subject[pi] === subject);

  let matches = [], shown = 0, nCorrect, nEvaluated, current = -1;

  function applyFilters() {
    const persona = chosen("f-persona"), subtype = chosen("f-subtype");
    const method = chosen("f-method"), subject = chosen("f-subject"), outcome = $("f-outcome").value;
    nCorrect = new Int32Array(nd);
    nEvaluated = new Int32Array(nd);
    const hasPred = new Uint8Array(nd);
    for (let pi = 0; pi < np; pi++) {
      if (!keepPred(pi, method, subject)) continue;
      const di = predDialogue[pi];
      hasPred[di] = 1;
      if (p.ok[pi] >= 0) { nEvaluated[di]++; nCorrect[di] += p.ok[pi]; }
    }
    matches = [];
    for (let di = 0; di < nd; di++) {
      if (!hasPred[di] || (persona >= 0 && d.persona[di] !== persona) || (subtype >= 0 && d.subtype[di] !== subtype)) continue;
      const wrong = nEvaluated[di] - nCorrect[di];
      if (outcome === "wrong" && wrong === 0) continue;
      if (outcome === "correct" && (wrong > 0 || nEvaluated[di] === 0)) continue;
      matches.push(di);
    }
    $("count").textContent = `${matches.length.toLocaleString()} of ${nd.toLocaleString()} dialogues`;
    $("list").replaceChildren();
    shown = 0;
    showMore();
  }

  function showMore() {
    const items = [];
    const end = Math.min(matches.length, shown + PAGE);
    for (; shown < end; shown++) {
      const di = matches[shown];
      const b = el("button", { type: "button", "data-dialogue": str(d.id[di]) },
        `${str(d.id[di])} · ${str(d.persona[di]) ?? "-"} · ${str(d.subtype[di]) ?? "-"} · ` +
        `${nCorrect[di]}/${nEvaluated[di]} correct`);
      b.addEventListener("click", () => openDialogue(di));
      items.push(el("li", {}, b));
    }
    $("list").append(...items);
    $("more").hidden = shown >= matches.length;
  }

  function outcomeText(pi) {
    if (p.ok[pi] === 1) return "correct";
    if (p.ok[pi] === 0) return "wrong";
    return `not evaluated (${str(p.status[pi])})`;
  }

  function agentDetails(pi) {
    if (!p.agent[pi]) return "";
    const pre = el("pre");
    const details = el("details", {}, el("summary", {}, "module outputs"), pre);
    details.addEventListener("toggle", () => {
      pre.textContent = "unpacking…";
      agentOutput(pi, D.agentChunk).then((text) => { pre.textContent = JSON.stringify(JSON.parse(text), null, 2); });
    }, { once: true });
    return details;
  }

  function predictionRow(pi) {
    const ok = p.ok[pi] === 1 ? "correct" : p.ok[pi] === 0 ? "wrong" : "";
    const score = p.score[pi] < 0 ? "" : `${p.score[pi]} (${str(p.judged[pi]) ?? "judge"})`;
    const reply = [str(p.reply[pi]) ?? "", str(p.error[pi]) ? `\n[error] ${str(p.error[pi])}` : ""].join("");
    const method = el("td", {}, str(p.method[pi]), agentDetails(pi));
    return el("tr", { class: ok, "data-method": str(p.method[pi]), "data-subject": str(p.subject[pi]) },
      el("td", {}, str(p.subject[pi])), method, el("td", {}, str(p.action[pi])),
      el("td", { class: "ok" }, outcomeText(pi)), el("td", {}, score), el("td", { class: "reply" }, reply));
  }

  function openDialogue(di) {
    const method = chosen("f-method"), subject = chosen("f-subject");
    const turns = [];
    for (let ti = d.t0[di]; ti < turnEnd(di); ti++) {
      const rows = [];
      for (let pi = t.p0[ti]; pi < predEnd(ti); pi++) if (keepPred(pi, method, subject)) rows.push(predictionRow(pi));
      const refq = str(t.refq[ti]);
      turns.push(el("section", { class: "turn", "data-turn": String(t.turn[ti]) },
        el("h3", {}, `Turn ${t.turn[ti]}`),
        el("p", { class: "user" }, el("b", {}, "User: "), str(t.user[ti]) ?? "(utterance not stored)"),
        el("p", { class: "ref" }, `Reference action: ${str(t.ref[ti])}`, refq ? ` · reference question: ${refq}` : ""),
        el("table", {}, el("thead", {}, el("tr", {}, ...["subject", "method", "decision", "outcome", "judge score",
          "reply"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows))));
    }
    $("dialogue").replaceChildren(el("h2", {}, str(d.id[di])),
      el("p", { class: "note" }, `persona ${str(d.persona[di]) ?? "-"} · subtype ${str(d.subtype[di]) ?? "-"}`), ...turns);
    document.querySelectorAll("#list button[aria-current]").forEach((b) => b.removeAttribute("aria-current"));
    const button = document.querySelector(`#list button[data-dialogue="${CSS.escape(str(d.id[di]))}"]`);
    if (button) button.setAttribute("aria-current", "true");
    current = di;
    history.replaceState(null, "", `#${encodeURIComponent(str(d.id[di]))}`);
  }

  document.querySelectorAll("#filters select").forEach((s) => s.addEventListener("change", () => {
    applyFilters();
    if (current >= 0) openDialogue(current);
  }));
  $("more").addEventListener("click", showMore);
  applyFilters();
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted) {
    const di = d.id.findIndex((i) => S[i] === wanted);
    if (di >= 0) openDialogue(di);
  }
  performance.mark("viewer-ready");
}

unpack(document.getElementById("data").textContent.trim()).then(viewer, (err) => {
  document.getElementById("count").textContent = `could not read the embedded data: ${err}`;
  throw err;
});
