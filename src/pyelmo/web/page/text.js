// Tokens and character ids as pyelmo makes them in Python, for the page and for Node:
// tokenize(text, "en") is pyelmo.text.tokenize.tokenize(text, "en") (normalize_text, then the Moses
// tokenizer of sacremoses, English, no escaping); tokenize(text, "zh") takes text already split into words
// (the page runs no segmenter): the spaces split it, Chinese punctuation becomes tokens of its own and the rest
// is tokenized as English. tokenToIds / batchToIds are pyelmo.modeling.characters' (50 ids a token: BOW, its
// UTF-8 bytes cut to 48, EOW, padding; every id + 1; shorter sentences padded with all-zero tokens).
// Needs moses-data.js (globalThis.PYELMO_MOSES) loaded first, or beside it for Node's require.
(function (root) {
  "use strict";
  const data = root.PYELMO_MOSES || (typeof require === "function" ? (require("./moses-data.js"), root.PYELMO_MOSES) : null);
  const cls = (body, negate) => `[${negate ? "^" : ""}${body}]`;
  const WS = data.space, ALNUM = data.alnum, ALPHA = data.alpha, NUM = data.number;
  const inClass = (body) => new RegExp(`^${cls(body)}$`, "u");
  const IS_ALPHA = inClass(ALPHA), IS_LOWER = inClass(data.lower);
  const SPACES = new RegExp(`${cls(WS)}+`, "gu");
  const STRIP = new RegExp(`^${cls(WS)}+|${cls(WS)}+$`, "gu");

  // pyelmo.text.tokenize.normalize_text
  const CTRL = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u2060\ufeff\ufffd]/gu;
  const DASH = new RegExp(`(?<=${cls(WS, true)})--(?=${cls(WS, true)})`, "gu");
  function normalizeText(text) {
    text = text.normalize("NFC").replace(CTRL, " ");
    text = text.replace(/[\u2018\u2019]/g, "'").replace(/[\u201c\u201d]/g, '"').replace(DASH, " -- ");
    return split(text).join(" ");
  }

  // Python's str.split(): runs of whitespace, none empty
  function split(text) {
    return text.split(SPACES).filter((t) => t !== "");
  }

  // sacremoses' MosesTokenizer("en").tokenize(text, escape=False)
  const RULES = [
    [new RegExp(`(${cls(ALNUM + WS + "\\.'`,\\-", true)})`, "gu"), " $1 "],  // PAD_NOT_ISALNUM
  ];
  const COMMAS = [
    [new RegExp(`(${cls(NUM, true)})[,]`, "gu"), "$1 , "],
    [new RegExp(`[,](${cls(NUM, true)})`, "gu"), " , $1"],
    [new RegExp(`(${cls(NUM)})[,]$`, "gu"), "$1 , "],
  ];
  const APOSTROPHES = [
    [new RegExp(`(${cls(ALPHA, true)})['](${cls(ALPHA, true)})`, "gu"), "$1 ' $2"],
    [new RegExp(`(${cls(ALPHA + NUM, true)})['](${cls(ALPHA)})`, "gu"), "$1 ' $2"],
    [new RegExp(`(${cls(ALPHA)})['](${cls(ALPHA, true)})`, "gu"), "$1 ' $2"],
    [new RegExp(`(${cls(ALPHA)})['](${cls(ALPHA)})`, "gu"), "$1 '$2"],
    [new RegExp(`(${cls(NUM)})[']([s])`, "gu"), "$1 '$2"],
  ];
  const apply = (text, rules) => rules.reduce((t, [re, sub]) => t.replace(re, sub), text);
  const strip = (text) => text.replace(STRIP, "");

  function replaceMultidots(text) {
    const length = text.length;
    return text.replace(/\.{2,}/g, (m, at) => " " + "DOT".repeat(m.length) + "MULTI" + (at + m.length < length ? " " : ""));
  }

  function restoreMultidots(text) {
    return text.replace(/(?:DOT)+MULTI/g, (m) => ".".repeat(Math.floor((m.length - 5) / 3)));
  }

  const ENDS_WITH_PERIOD = new RegExp(`^(${cls(WS, true)}+)\\.$`, "u");
  const isAnyAlpha = (text) => [...text].some((c) => IS_ALPHA.test(c));
  function nonbreakingPrefixes(text) {
    const tokens = split(text);
    tokens.forEach((token, i) => {
      const found = ENDS_WITH_PERIOD.exec(token);
      if (!found) return;
      const prefix = found[1];
      const next = tokens[i + 1];
      if ((prefix.includes(".") && isAnyAlpha(prefix))
          || (data.prefixes.includes(prefix) && !data.numericOnly.includes(prefix))
          || (i !== tokens.length - 1 && next && IS_LOWER.test([...next][0]))) return;
      if (data.numericOnly.includes(prefix) && i + 1 < tokens.length && /^[0-9]+/.test(next)) return;
      tokens[i] = prefix + " .";
    });
    return tokens.join(" ");
  }

  function moses(text) {
    text = text.replace(SPACES, " ").replace(/[\x00-\x1f]/g, "");
    text = apply(strip(text), RULES);
    text = apply(replaceMultidots(text), COMMAS);
    text = nonbreakingPrefixes(apply(text, APOSTROPHES));
    text = strip(text.replace(SPACES, " ")).replace(/\.' ?$/u, " . ' ");
    return split(restoreMultidots(text));
  }

  function mosesTokens(text) {
    return strip(text) === "" ? [] : split(moses(text).join(" "));
  }

  // Chinese characters and CJK punctuation (pyelmo.text.tokenize's HAN and _CJK_MARKS)
  const HAN = "\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\u{20000}-\\u{3134f}", MARKS = "\\u3000-\\u303f\\uff00-\\uffef";
  const RUN = new RegExp(`[${HAN}${MARKS}]+`, "gu"), PIECES = new RegExp(`[${MARKS}]|[^${MARKS}]+`, "gu");

  // Tokens of raw text: "en" as pyelmo.text.tokenize.tokenize(text, "en"); "zh": words already separated by spaces
  function tokenize(text, lang = "en") {
    text = normalizeText(text);
    if (lang !== "zh") return mosesTokens(text);
    const tokens = [];
    let end = 0;
    for (const run of text.matchAll(RUN)) {
      tokens.push(...mosesTokens(text.slice(end, run.index)), ...run[0].match(PIECES));
      end = run.index + run[0].length;
    }
    return tokens.concat(mosesTokens(text.slice(end)));
  }

  // A string's UTF-8 bytes, a lone surrogate as its own 3 bytes (Python's errors="surrogatepass")
  function utf8(text) {
    const bytes = [];
    for (let i = 0; i < text.length; i++) {
      let c = text.charCodeAt(i);
      const low = text.charCodeAt(i + 1);
      if (c >= 0xd800 && c < 0xdc00 && low >= 0xdc00 && low < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00);
        i++;
      }
      if (c < 0x80) bytes.push(c);
      else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else bytes.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return bytes;
  }

  const MAX_CHARS = 50, BOS = 256, EOS = 257, BOW = 258, EOW = 259, PAD = 260;
  function marker(char, maxChars) {
    const ids = new Array(maxChars).fill(PAD + 1);
    [ids[0], ids[1], ids[2]] = [BOW + 1, char + 1, EOW + 1];
    return ids;
  }

  // pyelmo.modeling.characters.token_to_ids: the maxChars ids (already + 1) of one token
  function tokenToIds(token, maxChars = MAX_CHARS) {
    if (token === "<S>") return marker(BOS, maxChars);
    if (token === "</S>") return marker(EOS, maxChars);
    const bytes = utf8(token).slice(0, maxChars - 2);
    const ids = new Array(maxChars).fill(PAD + 1);
    ids[0] = BOW + 1;
    bytes.forEach((b, k) => { ids[k + 1] = b + 1; });
    ids[bytes.length + 1] = EOW + 1;
    return ids;
  }

  // pyelmo.modeling.characters.batch_to_ids: {data: BigInt64Array of (B, T, maxChars), dims}
  function batchToIds(batch, maxChars = MAX_CHARS) {
    const longest = Math.max(0, ...batch.map((s) => s.length));
    const out = new BigInt64Array(batch.length * longest * maxChars);
    batch.forEach((sentence, row) => sentence.forEach((token, t) => {
      out.set(tokenToIds(token, maxChars).map(BigInt), (row * longest + t) * maxChars);
    }));
    return {data: out, dims: [batch.length, longest, maxChars]};
  }

  const api = {normalizeText, tokenize, tokenToIds, batchToIds, utf8, MAX_CHARS};
  root.pyelmoText = api;
  if (typeof module === "object" && module.exports) module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
