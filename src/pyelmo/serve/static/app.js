// pyelmo serve: the page. Plain JavaScript, no dependencies; every request goes to this server's JSON API.
"use strict";

const EXAMPLES = {
  bank: ["I deposited money in the bank.", "The boat stopped near the river bank."],
  apple: ["I ate an apple.", "Apple released a new iPhone."],
  play: ["Children play in the park.", "The actor will play a role.", "I want to play music."],
};
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
const SAMPLE_COLOURS = ["#9aa5b1", "#c9b07a", "#d9d9d9"];

const $ = (id) => document.getElementById(id);
let tokenized = [];       // tokens of each sentence, as the server tokenizes them
let lastSimilarity = null; // the last /v1/similarity answer, for redrawing the projection
let chosenLayer = null;

async function api(path, body) {
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: {"Content-Type": "application/json"},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) {
    const e = data.error || {};
    throw new Error((e.field ? e.field + ": " : "") + (e.message || response.statusText));
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

async function analyse() {
  const sentences = sentencesFromBox();
  $("results").hidden = true;
  if (sentences.length === 0) { status("Enter at least one sentence.", true); return; }
  status("Tokenizing…");
  try {
    const data = await api("/v1/tokenize", {sentences});
    tokenized = data.sentences.map((s) => s.tokens);
  } catch (err) { status(err.message, true); return; }
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
  status("Click a word to compare it with the same word in the other sentences.");
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
  $("word-title").textContent = `"${word}" in sentence ${sentence + 1}`;
  $("results").hidden = false;
  status(`Computing "${word}"…`);
  const tasks = [showPredictions(sentence, position), showNeighbours(sentence, position)];
  if (picks.length > 1) {
    tasks.push(showSimilarity(picks));
  } else {
    lastSimilarity = null;
    $("heatmap").replaceChildren(el("caption", {text: `"${word}" occurs in no other sentence.`}));
    $("projection").replaceChildren();
    $("legend").replaceChildren();
    $("layer-choice").replaceChildren();
  }
  const failures = (await Promise.allSettled(tasks)).filter((r) => r.status === "rejected");
  if (failures.length) status(failures.map((f) => f.reason.message).join("; "), true);
  else status(`Showing "${word}".`);
}

async function showSimilarity(picks) {
  const data = await api("/v1/similarity", {
    sentences: picks.map(([i]) => tokenized[i]), positions: picks.map(([, j]) => j), project: true,
  });
  lastSimilarity = {data, picks};
  const table = $("heatmap");
  table.replaceChildren();
  const head = el("tr", {}, el("th", {scope: "col", text: "sentence"}));
  data.layers.forEach((name) => head.append(el("th", {scope: "col", text: name})));
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
                           style: `background:${c.css}`, title: `${name}: ${value}`, text: value.toFixed(3)}));
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
    box.append(el("label", {for: id}, input, " " + name));
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
                           "aria-label": `2-D projection at ${chosenLayer}`});
  plot.append(svg("rect", {x: 0, y: 0, width: size, height: size, class: "plot-bg"}));
  points.forEach((p, k) => {
    if (k < n) return;
    const sample = data.projection.sample[k - n];
    const dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 4, fill: SAMPLE_COLOURS[senses.indexOf(sample.sense) % SAMPLE_COLOURS.length],
                               "fill-opacity": 0.75});
    dot.append(svg("title"));
    dot.firstChild.textContent = `sample (${sample.sense}): ${sample.sentence}`;
    plot.append(dot);
  });
  points.slice(0, n).forEach((p, k) => {
    const [i] = picks[k];
    const dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 8, fill: PALETTE[i % PALETTE.length],
                               stroke: "#000", "stroke-width": 1.2});
    dot.append(svg("title"));
    dot.firstChild.textContent = `${i + 1}. ${tokenized[i].join(" ")}`;
    plot.append(dot);
    const label = svg("text", {x: sx(p[0]) + 10, y: sy(p[1]) + 4, class: "plot-label"});
    label.textContent = String(i + 1);
    plot.append(label);
  });
  box.append(plot);
  const legend = $("legend");
  legend.replaceChildren();
  picks.forEach(([i]) => legend.append(el("span", {},
    el("span", {class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}`}), `sentence ${i + 1}`)));
  senses.forEach((s, k) => legend.append(el("span", {},
    el("span", {class: "swatch small", style: `background:${SAMPLE_COLOURS[k % SAMPLE_COLOURS.length]}`}), `sample corpus: ${s}`)));
  if (!senses.length) legend.append(el("span", {class: "muted", text: "(the word is not in the sample corpus)"}));
}

// Empty the box `id` and ask the API; a failure is shown in the box as a `tag` element (data: null).
async function askInto(id, path, body, tag) {
  const box = $(id);
  box.replaceChildren();
  try {
    return [box, await api(path, body)];
  } catch (err) {
    box.append(el(tag, {class: "muted", text: err.message}));
    return [box, null];
  }
}

async function showPredictions(sentence, position) {
  const [box, data] = await askInto("predictions", "/v1/predict", {sentence: tokenized[sentence], position, k: 8}, "p");
  if (!data) return;
  const masked = tokenized[sentence].map((t, j) => (j === position ? "___" : t)).join(" ");
  box.append(el("p", {class: "masked", text: masked}));
  for (const direction of ["combined", "forward", "backward"]) {
    const list = el("ol", {class: "prediction-list", "data-direction": direction});
    data[direction].forEach((item) => list.append(el("li", {},
      el("span", {class: "bar", style: `width:${Math.max(2, Math.round(item.probability * 100))}%`}),
      el("span", {class: "word", text: item.word}), el("span", {class: "prob", text: item.probability.toFixed(3)}))));
    box.append(el("div", {}, el("h4", {text: direction}), list));
  }
}

async function showNeighbours(sentence, position) {
  const [box, data] = await askInto("neighbours", "/v1/neighbours", {sentence: tokenized[sentence], position, k: 5}, "li");
  if (!data) return;
  const names = Object.keys(data.layers);
  const top = names[names.length - 2];
  data.layers[top].forEach((nb) => {
    const tokens = nb.sentence.split(" ");
    const item = el("li", {});
    tokens.forEach((t, j) => item.append(j === nb.position ? el("mark", {text: t}) : t, " "));
    item.append(el("span", {class: "muted", text: `(${nb.sense || "another word's sentence"}, ${nb.similarity.toFixed(3)})`}));
    box.append(item);
  });
}

function loadExample(name) {
  $("sentences").value = EXAMPLES[name].join("\n");
  analyse();
}

async function init() {
  $("sentences").value = [...EXAMPLES.bank, ...EXAMPLES.apple, ...EXAMPLES.play].join("\n");
  $("analyse").addEventListener("click", analyse);
  $("sentences").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); analyse(); }
  });
  document.querySelectorAll(".example").forEach((b) => b.addEventListener("click", () => loadExample(b.dataset.example)));
  try {
    const info = await api("/v1/models");
    const m = info.models[0];
    $("model-info").textContent = `model ${m.id} (${m.source}): ${m.layers} layers of ${m.dim} dimensions`
      + (m.predict ? "; with its language-model head" : "");
  } catch (err) { $("model-info").textContent = err.message; }
  analyse();
}

init();
