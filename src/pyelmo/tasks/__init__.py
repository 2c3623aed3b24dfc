"""ELMo inside task models: classifiers, taggers and readers trained on frozen biLM features.

The paper's recipe (Peters et al. 2018, section 3.3): keep the task's word embedding,
add the biLM layers mixed by a learned softmax and scale (``ScalarMix``), feed both to
the task encoder, and train only the task model.  Here:

* :mod:`pyelmo.tasks.data` - the file formats (TSV for classify, CoNLL for tag) and readers;
* :mod:`pyelmo.tasks.static` - static word vectors (the shipped word2vec, or a text file);
* :mod:`pyelmo.tasks.features` - biLM layers computed once per distinct sentence;
* :mod:`pyelmo.tasks.model` - BiLSTM + max-pool classifier, BiLSTM + CRF tagger;
* :mod:`pyelmo.tasks.squad` - reading comprehension in SQuAD v1.1's format (qa);
* :mod:`pyelmo.tasks.reader` - a BiDAF-style reader (qa);
* :mod:`pyelmo.tasks.train` - training with early stopping, saving and loading;
* :mod:`pyelmo.tasks.metrics` - accuracy, macro-F1 (scikit-learn), span F1 (seqeval);
* :mod:`pyelmo.tasks.build` - the task data sets built from registry packages.
"""

KINDS = ("classify", "tag", "qa")
FEATURES = ("static", "elmo", "static+elmo")
#: What the biLM sees of an example: the whole line, or each sentence of it on its own
#: (``pyelmo.corpus.sentences.sentence_spans``); the default per kind of task: classify examples
#: are often several sentences (chosen on dev scores, docs/TASKS.md), a tag example is one.
CONTEXTS = ("line", "sentence")
DEFAULT_CONTEXT = {"classify": "sentence", "tag": "line", "qa": "sentence"}
