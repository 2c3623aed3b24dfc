"""ELMo inside task models: classifiers, taggers and readers trained on frozen biLM features.

The paper's recipe (Peters et al. 2018, section 3.3): keep the task's word embedding,
add the biLM layers mixed by a learned softmax and scale (``ScalarMix``), feed both to
the task encoder, and train only the task model.  Here:

* :mod:`pyelmo.tasks.kind` - the registry of task kinds; :mod:`pyelmo.tasks.kinds` - one module per kind
  (``classify``, ``tag``, ``qa``): its data files, labels, model head and loss, metrics, predictions, options;
* :mod:`pyelmo.tasks.data` - the file formats (TSV for classify, CoNLL for tag) and readers;
* :mod:`pyelmo.tasks.static` - static word vectors (the shipped word2vec, or a text file);
* :mod:`pyelmo.tasks.features` - biLM layers computed once per distinct sentence;
* :mod:`pyelmo.tasks.model` - the features and BiLSTM encoder the classifier and tagger share;
* :mod:`pyelmo.tasks.squad` - reading comprehension in SQuAD v1.1's format (qa);
* :mod:`pyelmo.tasks.reader` - a BiDAF-style reader (qa);
* :mod:`pyelmo.tasks.runner` - a model with its features: loss, predictions, scores;
* :mod:`pyelmo.tasks.train` - training with early stopping; :mod:`pyelmo.tasks.saved` - saving and loading;
* :mod:`pyelmo.tasks.metrics` - accuracy, macro-F1 (scikit-learn), span F1 (seqeval), in percent;
* :mod:`pyelmo.tasks.build` - the task data sets built from registry packages.
"""

FEATURES = ("static", "elmo", "static+elmo")
#: What the biLM sees of an example: the whole line, or each sentence of it on its own
#: (``pyelmo.corpus.sentences.sentence_spans``); the default is the kind's (``TaskKind.context``): classify
#: examples are often several sentences (chosen on dev scores, docs/TASKS.md), a tag example is one.
CONTEXTS = ("line", "sentence")
