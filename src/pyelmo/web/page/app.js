// The page: ELMo run in the browser by ONNX Runtime Web (WebAssembly) on model.onnx, no server code.
// Two sentences and a word -> the cosine similarity of the word's vectors per layer (and their average),
// shown as a table and written as JSON into <pre id="result"> (what the browser test reads).
import * as ort from "./ort/ort.wasm.bundle.min.mjs";

const CONFIG = JSON.parse(document.getElementById("page-config").textContent);
const T = CONFIG.texts;
const $ = (id) => document.getElementById(id);
ort.env.wasm.numThreads = 1;  // a plain static server is not cross-origin isolated: no threads
let session = null;

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function fill(text, values) {
  return text.replace(/\{(\w+)\}/g, (_, key) => values[key]);
}

async function model() {
  if (!session) {
    status(T.loading);
    session = await ort.InferenceSession.create("model.onnx", {executionProviders: ["wasm"]});
  }
  return session;
}

// The layers (layers, batch, tokens, dim) of tokenized sentences, run as one batch as pyelmo's embedder does.
async function embed(sentences) {
  const ids = pyelmoText.batchToIds(sentences);
  const out = await (await model()).run({char_ids: new ort.Tensor("int64", ids.data, ids.dims)});
  return out.layers;
}

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let k = 0; k < a.length; k++) { dot += a[k] * b[k]; na += a[k] * a[k]; nb += b[k] * b[k]; }
  return dot / Math.max(Math.sqrt(na) * Math.sqrt(nb), 1e-24);
}

// vectors[layer][sentence] of the word (the token at positions[sentence]), with the layers' average appended
function wordVectors(layers, positions) {
  const [count, batch, tokens, dim] = layers.dims;
  const at = (l, s) => Array.from(layers.data.subarray(((l * batch + s) * tokens + positions[s]) * dim, ((l * batch + s) * tokens + positions[s] + 1) * dim));
  const vectors = [];
  for (let l = 0; l < count; l++) vectors.push(positions.map((_, s) => at(l, s)));
  vectors.push(positions.map((_, s) => vectors[0][s].map((_, k) => vectors.reduce((sum, layer, l) => (l < count ? sum + layer[s][k] : sum), 0) / count)));
  return vectors;
}

// A layer's name as pyelmo names it ("layer 0", "average": the result's keys) and as the page shows it
const layerKey = (l, count) => (l < count ? `layer ${l}` : "average");
const layerName = (l, count) => (l < count ? fill(T.layer, {n: l}) : T.average);

function showTokens(tokenized, positions) {
  const box = $("tokens");
  box.replaceChildren();
  tokenized.forEach((tokens, s) => {
    const line = el("div", {class: "sentence"});
    tokens.forEach((token, j) => line.append(el("span", {class: j === positions[s] ? "token chosen" : "token", text: token}), " "));
    box.append(line);
  });
}

function showSimilarities(names, similarities) {
  const rows = names.map((key, l) => {
    const value = similarities[key], name = layerName(l, names.length - 1);
    const bar = el("span", {class: "bar", style: `width: ${Math.max(0, value) * 100}%`});
    return el("tr", {}, el("th", {scope: "row", text: name}),
      el("td", {class: "value", dataset: {layer: key}, text: value.toFixed(3)}),
      el("td", {class: "bar-cell"}, bar), el("td", {class: "muted", text: l === 0 ? T.layer0Note : (l < names.length - 1 ? T.lstmNote : T.averageNote)}));
  });
  $("similarities").replaceChildren(...rows);
}

async function compare() {
  const sentences = [$("first").value, $("second").value];
  const word = $("word").value.trim();
  $("result").textContent = "";
  const tokenized = sentences.map((s) => pyelmoText.tokenize(s, CONFIG.lang));
  const positions = tokenized.map((tokens) => tokens.findIndex((t) => t.toLowerCase() === word.toLowerCase()));
  showTokens(tokenized, positions);
  const missing = positions.findIndex((p) => p < 0);
  if (!word || missing >= 0) {
    $("table").hidden = true;
    return status(fill(T.notFound, {word, n: missing + 1}), true);
  }
  const started = performance.now();
  const layers = await embed(tokenized);
  const vectors = wordVectors(layers, positions);
  const names = vectors.map((_, l) => layerKey(l, layers.dims[0]));
  const similarities = Object.fromEntries(names.map((name, l) => [name, cosine(vectors[l][0], vectors[l][1])]));
  showSimilarities(names, similarities);
  $("table").hidden = false;
  $("word-shown").textContent = word;
  status(fill(T.done, {word, ms: Math.round(performance.now() - started)}));
  $("result").textContent = JSON.stringify({word, tokens: tokenized, positions, similarities, vectors});
}

function run() {
  compare().catch((error) => status(fill(T.failed, {error: error.message || error}), true));
}

function useExample(example) {
  [$("first").value, $("second").value] = example.sentences;
  $("word").value = example.word;
  run();
}

function start() {
  for (const node of document.querySelectorAll("[data-t]")) node.textContent = T[node.dataset.t];
  document.title = T.title;
  $("model-info").textContent = CONFIG.about;
  for (const example of CONFIG.examples) {
    const button = el("button", {type: "button", class: "example", text: example.word});
    button.addEventListener("click", () => useExample(example));
    $("examples").append(" ", button);
  }
  $("compare").addEventListener("click", run);
  for (const id of ["first", "second", "word"]) {
    $(id).addEventListener("keydown", (event) => { if (event.key === "Enter") run(); });
  }
  useExample(CONFIG.examples[0]);
}

start();
