"""``pyelmo export --format web``: a static page that runs ELMo in the browser (ONNX Runtime Web), with no
pyelmo process: :func:`pyelmo.web.export.export_web`. ``page/`` holds the page (its tokenizer and character ids
in JavaScript, equal to Python's), ``vendor/`` the pinned onnxruntime-web files (its README)."""
