// pyelmo serve: the page. Plain JavaScript, no dependencies; every request goes to this server's JSON API.
"use strict";

// The page's language (set by the server from --lang): its texts and examples (messages.js).
const LANG = document.documentElement.lang.startsWith("zh") ? "zh" : "en";
const TEXT = MESSAGES[LANG];
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
const SAMPLE_COLOURS = ["#9aa5b1", "#c9b07a", "#d9d9d9"];
const SAME_COLOUR = "#2ca02c", DIFFERENT_COLOUR = "#8c8c8c";  // as pyelmo demo's bars

const $ = (id) => document.getElementById(id);
let tokenized = [];       // tokens of each sentence, as the server tokenizes them
let lastSimilarity = null; // the last /v1/similarity answer, for redrawing the projection
let chosenLayer = null;
let chosenWord = null;
let modelDim = null;        // the served model's vector size
let ticket = 0;            // the latest choice: answers to an earlier one are dropped

// The text `key` of the page's language, its {name}s filled from `values`.
function t(key, values) {
  return TEXT[key].replace(/\{(\w+)\}/g, (_, name) => String(values[name]));
}

// A layer's name as the API gives it ("layer 0", "average"), in the page's language.
function layerName(name) {
  const n = /^layer (\d+)$/.exec(name);
  return n ? t("layer", {n: n[1]}) : name === "average" ? t("average") : name;
}

const quoted = (word) => t("quoted", {word});
// A sample corpus sense as the API gives it ("word/sense", or "other": another word's sentence), and its
// sense alone.
const senseName = (sense) => (sense === "other" ? t("otherSense") : sense);
const shortSense = (sense) => sense.split("/").pop();

// The API's answer; a failure throws an Error whose message says so in the page's language (with the
// API's own English message inside).
async function api(path, body) {
  let response, data;
  try {
    response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: {"Content-Type": "application/json"},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    data = await response.json();
  } catch (err) { throw new Error(t("connectionError", {message: err.message})); }
  if (!response.ok) {
    const e = data.error || {};
    const where = e.field ? t("fieldPrefix", {field: e.field}) : "";
    throw new Error(t(response.status >= 500 ? "serverError" : "requestError",
                      {where, message: e.message || response.statusText}));
  }
  return data;
}

function status(text, isError) {
  const el = $("status");
  el.textContent = text || "";
  el.classList.toggle("error", Boolean(isError));
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// viridis at a few stops, interpolated; value in [0, 1]
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function colour(value) {
  const t = Math.min(1, Math.max(0, value)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(t));
  const f = t - i;
  const rgb = VIRIDIS[i].map((a, k) => Math.round(a + f * (VIRIDIS[i + 1][k] - a)));
  return {css: `rgb(${rgb.join(",")})`, light: (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) > 140};
}

function sentencesFromBox() {
  return $("sentences").value.split("\n").map((s) => s.trim()).filter((s) => s.length > 0);
}

// Tokenize the box's sentences and show them as buttons; false when that failed.
async function analyse() {
  const sentences = sentencesFromBox();
  $("results").hidden = true;
  if (sentences.length === 0) { status(t("enterSentence"), true); return false; }
  status(t("tokenizing"));
  try {
    const data = await api("/v1/tokenize", {sentences});
    tokenized = data.sentences.map((s) => s.tokens);
  } catch (err) { status(err.message, true); return false; }
  const box = $("tokens");
  box.replaceChildren();
  tokenized.forEach((tokens, i) => {
    const row = el("div", {class: "sentence", "data-sentence": String(i)},
                   el("span", {class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}`, "aria-hidden": "true"}));
    tokens.forEach((token, j) => {
      const button = el("button", {type: "button", class: "token", "data-sentence": String(i),
                                   "data-position": String(j), text: token});
      button.addEventListener("click", () => chooseWord(i, j));
      row.append(button);
    });
    box.append(row);
  });
  status(t("clickWord"));
  return true;
}

// Choose the first occurrence of `word` (case-insensitive); false when no sentence has it.
async function chooseFirst(word) {
  for (const [i, tokens] of tokenized.entries()) {
    const j = tokens.findIndex((t) => t.toLowerCase() === word.toLowerCase());
    if (j >= 0) { await chooseWord(i, j); return true; }
  }
  return false;
}

// Show the box's sentences, keeping the chosen word when it is still there.
async function analyseAndChoose(word) {
  if ((await analyse()) && word) await chooseFirst(word);
}

async function chooseWord(sentence, position) {
  const word = tokenized[sentence][position];
  document.querySelectorAll(".token.chosen").forEach((b) => b.classList.remove("chosen"));
  document.querySelector(`.token[data-sentence="${sentence}"][data-position="${position}"]`).classList.add("chosen");
  // the chosen occurrence first, then the first occurrence in each other sentence that has the word
  const picks = [[sentence, position]];
  tokenized.forEach((tokens, i) => {
    if (i === sentence) return;
    const j = tokens.findIndex((t) => t.toLowerCase() === word.toLowerCase());
    if (j >= 0) picks.push([i, j]);
  });
  $("word-title").textContent = t("wordInSentence", {word, n: sentence + 1});
  $("results").hidden = false;
  status(t("computing", {word}));
  chosenWord = word;
  const mine = ++ticket;
  const tasks = [showPredictions(sentence, position, mine), showNeighbours(sentence, position, mine)];
  if (picks.length > 1) {
    tasks.push(showSimilarity(picks, mine));
  } else {
    lastSimilarity = null;
    $("heatmap").replaceChildren(el("caption", {text: t("onlyOnce", {word})}));
    $("projection").replaceChildren();
    $("projection-note").replaceChildren();
    $("legend").replaceChildren();
    $("layer-choice").replaceChildren();
  }
  const failures = (await Promise.allSettled(tasks)).filter((r) => r.status === "rejected");
  if (mine !== ticket) return;
  if (failures.length) status(failures.map((f) => f.reason.message).join(t("listSeparator")), true);
  else status(t("showing", {word}));
}

async function showSimilarity(picks, mine) {
  const data = await api("/v1/similarity", {
    sentences: picks.map(([i]) => tokenized[i]), positions: picks.map(([, j]) => j), project: true,
  });
  if (mine !== ticket) return;
  lastSimilarity = {data, picks};
  const table = $("heatmap");
  table.replaceChildren();
  const head = el("tr", {}, el("th", {scope: "col", text: t("sentenceColumn")}));
  data.layers.forEach((name) => head.append(el("th", {scope: "col", text: layerName(name)})));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  data.pairs.filter((p) => p.first === 0).forEach((pair) => {
    const [i] = picks[pair.second];
    const label = el("th", {scope: "row"},
                     el("span", {class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}`}),
                     `${i + 1}. ${tokenized[i].join(" ")}`);
    const row = el("tr", {"data-sentence": String(i)}, label);
    data.layers.forEach((name) => {
      const value = pair.by_layer[name];
      const c = colour(value);
      row.append(el("td", {class: "cell" + (c.light ? "" : " dark"), "data-layer": name, "data-value": String(value),
                           style: `background:${c.css}`, title: `${layerName(name)}: ${value}`, text: value.toFixed(3)}));
    });
    body.append(row);
  });
  table.append(body);
  chosenLayer = data.layers.includes(chosenLayer) ? chosenLayer : data.layers[data.layers.length - 2];
  layerButtons(data.layers);
  drawProjection();
}

function layerButtons(layers) {
  const box = $("layer-choice");
  box.replaceChildren();
  layers.forEach((name) => {
    const id = "layer-" + name.replace(/\W+/g, "-");
    const input = el("input", {type: "radio", name: "layer", id, value: name});
    input.checked = name === chosenLayer;
    input.addEventListener("change", () => { chosenLayer = name; drawProjection(); });
    box.append(el("label", {for: id}, input, " " + layerName(name)));
  });
}

function drawProjection() {
  const box = $("projection");
  box.replaceChildren();
  if (!lastSimilarity) return;
  const {data, picks} = lastSimilarity;
  const points = data.projection.points[chosenLayer];
  const n = data.projection.sentences;
  const senses = [...new Set(data.projection.sample.map((s) => s.sense))];
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const pad = 0.08, size = 320;
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const sx = (x) => size * (pad + (1 - 2 * pad) * (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5));
  const sy = (y) => size * (1 - pad - (1 - 2 * pad) * (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5));
  const plot = svg("svg", {viewBox: `0 0 ${size} ${size}`, role: "img", class: "plot",
                           "aria-label": t("projectionLabel", {layer: layerName(chosenLayer)})});
  plot.append(svg("rect", {x: 0, y: 0, width: size, height: size, class: "plot-bg"}));
  points.forEach((p, k) => {
    if (k < n) return;
    const sample = data.projection.sample[k - n];
    const dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 4, fill: SAMPLE_COLOURS[senses.indexOf(sample.sense) % SAMPLE_COLOURS.length],
                               "fill-opacity": 0.75});
    dot.append(svg("title"));
    dot.firstChild.textContent = t("sampleDot", {sense: senseName(sample.sense), sentence: sample.sentence});
    plot.append(dot);
  });
  points.slice(0, n).forEach((p, k) => {
    const [i] = picks[k];
    const dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 8, fill: PALETTE[i % PALETTE.length],
                               stroke: "#000", "stroke-width": 1.2});
    dot.append(svg("title"));
    dot.firstChild.textContent = `${i + 1}. ${tokenized[i].join(" ")}`;
    plot.append(dot);
    // labels alternate right and left of their dot, so that two dots on one spot keep both numbers
    const label = svg("text", {x: sx(p[0]) + (k % 2 ? -10 : 10), y: sy(p[1]) + 4, class: "plot-label",
                               "text-anchor": k % 2 ? "end" : "start"});
    label.textContent = String(i + 1);
    plot.append(label);
  });
  box.append(plot);
  const kept = data.projection.variance_kept[chosenLayer];
  $("projection-note").textContent = t("projectionNote", {percent: Math.round(100 * kept),
                                                          layer: layerName(chosenLayer),
                                                          dim: modelDim || t("theDimensions")});
  const legend = $("legend");
  legend.replaceChildren();
  picks.forEach(([i]) => legend.append(el("span", {},
    el("span", {class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}`}), t("sentenceN", {n: i + 1}))));
  senses.forEach((s, k) => legend.append(el("span", {},
    el("span", {class: "swatch small", style: `background:${SAMPLE_COLOURS[k % SAMPLE_COLOURS.length]}`}),
    t("sampleSense", {sense: senseName(s)}))));
  if (!senses.length) legend.append(el("span", {class: "muted", text: t("notInSample")}));
}

// Empty the box `id` and ask the API; a failure is shown in the box as a `tag` element (data: null), and
// an answer to an earlier choice than `mine` is dropped (data: null, the box left alone).
async function askInto(id, path, body, tag, mine) {
  const box = $(id);
  box.replaceChildren();
  let data = null;
  try {
    data = await api(path, body);
  } catch (err) {
    if (mine === ticket) box.append(el(tag, {class: "muted", text: err.message}));
  }
  return [box, mine === ticket ? data : null];
}

async function showPredictions(sentence, position, mine) {
  const [box, data] = await askInto("predictions", "/v1/predict", {sentence: tokenized[sentence], position, k: 8}, "p",
                                    mine);
  if (!data) return;
  const masked = tokenized[sentence].map((t, j) => (j === position ? "___" : t)).join(" ");
  box.append(el("p", {class: "masked", text: masked}));
  for (const direction of ["combined", "forward", "backward"]) {
    const list = el("ol", {class: "prediction-list", "data-direction": direction});
    data[direction].forEach((item) => list.append(el("li", {},
      el("span", {class: "bar", style: `width:${Math.max(2, Math.round(item.probability * 100))}%`}),
      el("span", {class: "word", text: item.word}), el("span", {class: "prob", text: item.probability.toFixed(3)}))));
    box.append(el("div", {}, el("h4", {text: t(direction)}), list));
  }
}

async function showNeighbours(sentence, position, mine) {
  $("senses").replaceChildren();
  $("senses-query").replaceChildren();
  const [box, data] = await askInto("neighbours", "/v1/neighbours", {sentence: tokenized[sentence], position, k: 5},
                                    "li", mine);
  if (!data) {
    if (mine === ticket) $("senses").append(el("p", {class: "muted", text: box.textContent}));
    return;
  }
  showSenses(data, sentence);
  const names = Object.keys(data.layers);
  const top = names[names.length - 2];
  data.layers[top].forEach((nb) => {
    const tokens = nb.sentence.split(" ");
    const item = el("li", {});
    tokens.forEach((t, j) => item.append(j === nb.position ? el("mark", {text: t}) : t, " "));
    item.append(el("span", {class: "muted", text: t("neighbourNote", {sense: nb.sense || t("otherWordSentence"),
                                                          similarity: nb.similarity.toFixed(3)})}));
    box.append(item);
  });
}

// How the layers separate the word's senses in the sample corpus (the bars of pyelmo demo), and how
// similar the chosen occurrence is to each sense's contexts.
function showSenses(data, sentence) {
  const box = $("senses");
  const word = data.word;
  $("senses-word").textContent = quoted(word);
  const s = data.senses;
  if (!s) {
    box.append(el("p", {class: "muted", text: t("noSenses", {word})}));
    return;
  }
  const layers = Object.keys(s.same_sense);
  const values = layers.flatMap((n) => [s.same_sense[n], s.different_senses[n]]);
  const pad = Math.max(0.05 * (Math.max(...values) - Math.min(...values)), 0.01);
  const lo = Math.max(0, Math.min(...values) - 3 * pad), hi = Math.min(1, Math.max(...values)) + 3 * pad;
  const [w, h, left, bottom, top] = [360, 210, 34, 24, 22];
  const group = (w - left) / layers.length, bar = group * 0.32;
  const y = (v) => top + (h - top - bottom) * (1 - (v - lo) / (hi - lo));
  const plot = svg("svg", {viewBox: `0 0 ${w} ${h}`, role: "img", class: "plot bars",
                           "aria-label": t("barsLabel", {word})});
  for (const v of [lo, (lo + hi) / 2, hi]) {
    plot.append(svg("line", {x1: left, x2: w, y1: y(v), y2: y(v), class: "gridline"}));
    const tick = svg("text", {x: left - 4, y: y(v) + 4, class: "tick", "text-anchor": "end"});
    tick.textContent = v.toFixed(2);
    plot.append(tick);
  }
  layers.forEach((name, k) => {
    const x = left + k * group + group * 0.18;
    [[s.same_sense[name], SAME_COLOUR, "same"], [s.different_senses[name], DIFFERENT_COLOUR, "different"]]
      .forEach(([v, fill, kind], b) => {
        const rect = svg("rect", {x: x + b * bar, y: y(v), width: bar - 2, height: Math.max(0, y(lo) - y(v)), fill,
                                  class: "bar", "data-layer": name, "data-kind": kind, "data-value": String(v)});
        rect.append(svg("title"));
        rect.firstChild.textContent = t("barTitle", {layer: layerName(name), value: v.toFixed(3),
                                                       kind: t(kind === "same" ? "sameSense" : "differentSenses")});
        plot.append(rect);
      });
    const gap = s.same_sense[name] - s.different_senses[name];
    const label = svg("text", {x: x + bar, y: y(Math.max(s.same_sense[name], s.different_senses[name])) - 5,
                               class: "gap", "text-anchor": "middle"});
    label.textContent = (gap >= 0 ? "+" : "") + gap.toFixed(3);
    plot.append(label);
    const axis = svg("text", {x: x + bar, y: h - 6, class: "tick", "text-anchor": "middle"});
    axis.textContent = layerName(name);
    plot.append(axis);
  });
  const senses = Object.entries(s.contexts).map(([sense, n]) => t("contextCount", {sense: shortSense(sense), n}))
    .join(t("comma"));
  box.append(plot, el("div", {class: "legend"},
    el("span", {}, el("span", {class: "swatch small", style: `background:${SAME_COLOUR}`}), t("sameSense")),
    el("span", {}, el("span", {class: "swatch small", style: `background:${DIFFERENT_COLOUR}`}), t("differentSenses")),
    el("span", {class: "muted", text: t("sensesLegend", {senses})})));
  // the chosen occurrence against each sense's contexts
  const query = $("senses-query");
  const table = el("table", {class: "lean"}, el("caption", {
    text: t("queryCaption", {word: tokenized[sentence][data.position], n: sentence + 1})}));
  const head = el("tr", {}, el("th", {scope: "col", text: t("senseColumn")}));
  layers.forEach((name) => head.append(el("th", {scope: "col", text: layerName(name)})));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  const rows = Object.entries(s.query).filter(([, v]) => v);
  rows.forEach(([sense, means]) => {
    const row = el("tr", {}, el("th", {scope: "row", text: shortSense(sense)}));
    layers.forEach((name) => {
      const best = Math.max(...rows.map(([, m]) => m[name]));
      row.append(el("td", {class: means[name] === best && rows.length > 1 ? "best" : "", "data-layer": name,
                           text: means[name].toFixed(3)}));
    });
    body.append(row);
  });
  table.append(body);
  query.append(table, el("p", {class: "muted", text: t("queryNote")}));
}

async function loadExample(example) {
  $("sentences").value = example.sentences.join("\n");
  await analyseAndChoose(example.word);
}

// The page's fixed texts in its language, the first messages and a button per example.
function showTexts() {
  document.querySelectorAll("[data-t]").forEach((node) => { node.textContent = t(node.dataset.t); });
  $("model-info").textContent = t("loadingModel");
  const [before, after] = TEXT.sensesTitle.split("{word}");  // the word's place in the heading
  $("senses-title").replaceChildren(before, el("span", {id: "senses-word"}), after);
  status(t("loading"));
  $("layer-choice").setAttribute("aria-label", t("layerChoice"));
  EXAMPLES[LANG].forEach((example) => {
    const button = el("button", {type: "button", class: "example", "data-example": example.word, text: example.word});
    button.addEventListener("click", () => loadExample(example));
    $("examples").append(" ", button);
  });
}

async function init() {
  showTexts();
  const examples = EXAMPLES[LANG];
  $("sentences").value = examples.flatMap((e) => e.sentences).join("\n");
  $("analyse").addEventListener("click", () => analyseAndChoose(chosenWord));
  $("sentences").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); analyseAndChoose(chosenWord); }
  });
  try {
    const info = await api("/v1/models");
    const m = info.models[0];
    modelDim = m.dim;
    $("model-info").textContent = t("modelInfo", {id: m.id, source: m.source, layers: m.layers, dim: m.dim})
      + (m.predict ? t("modelHead") : "");
  } catch (err) { $("model-info").textContent = err.message; }
  await analyseAndChoose(examples[0].word);  // open on the point: the first example's word in sentence 1, compared
}

init();
