"""The web page's texts, in English and Chinese (the page's language is the model's)."""

from __future__ import annotations

TEXTS = {
    "en": {
        "title": "pyelmo in the browser: contextual word vectors",
        "about": "Model: {model}; {layers} layers x {dim}; run by onnxruntime-web {ort} (WebAssembly).",
        "subtitle": "in the browser: contextual word vectors",
        "inputTitle": "1. Two sentences and a word",
        "inputNote": "ELMo runs here, in your browser (ONNX Runtime Web); nothing is sent anywhere.",
        "examples": "Examples:",
        "first": "Sentence 1", "second": "Sentence 2", "word": "Word (a token of both sentences)",
        "compare": "Compare",
        "tokensTitle": "2. Tokens",
        "similarityTitle": "3. Cosine similarity per layer of",
        "layer": "layer {n}", "average": "average",
        "layer0Note": "characters only: the same word gives the same vector",
        "lstmNote": "a biLSTM layer: sees the sentence",
        "averageNote": "the layers' mean (ELMo's default mix)",
        "loading": "Loading the model (ONNX Runtime Web, WebAssembly)...",
        "done": "Showing \"{word}\" ({ms} ms).",
        "notFound": "\"{word}\" is not a token of sentence {n}: choose a word shown under Tokens.",
        "failed": "The model could not run: {error}",
        "footer": "A static page written by 'pyelmo export --format web': model.onnx run by onnxruntime-web; "
                  "the tokenizer and character ids are pyelmo's, in JavaScript.",
    },
    "zh": {
        "title": "pyelmo 浏览器版：上下文词向量",
        "about": "模型：{model}；{layers} 层 x {dim}；由 onnxruntime-web {ort}（WebAssembly）运行。",
        "subtitle": "浏览器版：上下文词向量",
        "inputTitle": "1. 两个句子和一个词",
        "inputNote": "请用空格把词分开（本页不做分词，例句已用 jieba 分好词）。ELMo 在您的浏览器里运行，不发送任何数据。",
        "examples": "例子：",
        "first": "句子 1", "second": "句子 2", "word": "词（两个句子里都有的一个词）",
        "compare": "比较",
        "tokensTitle": "2. 词",
        "similarityTitle": "3. 各层的余弦相似度：",
        "layer": "第 {n} 层", "average": "平均",
        "layer0Note": "只看字符：同一个词得到同一个向量",
        "lstmNote": "双向 LSTM 层：看得到整个句子",
        "averageNote": "各层的平均（ELMo 的默认组合）",
        "loading": "正在加载模型（ONNX Runtime Web, WebAssembly）……",
        "done": "显示“{word}”（{ms} 毫秒）。",
        "notFound": "“{word}”不是句子 {n} 里的词：请选择“词”下面显示的一个词。",
        "failed": "模型无法运行：{error}",
        "footer": "由 'pyelmo export --format web' 生成的静态页面：model.onnx 由 onnxruntime-web 运行；"
                  "分词（按空格）和字符编号与 pyelmo 的 Python 代码相同。",
    },
}
