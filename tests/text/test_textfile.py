"""The one line reader (pyelmo.text.lines.text_lines) and the readers built on it."""

from __future__ import annotations

import io

import pytest

from pyelmo.errors import InputError
from pyelmo.text.lines import text_lines


def _lines(data: bytes, tmp_path, **kw):
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    return list(text_lines(path, **kw))


def test_line_endings_bom_and_numbers(tmp_path):
    data = b"\xef\xbb\xbf first \r\nsecond\rthird\n\nlast"
    assert _lines(data, tmp_path) == [(1, "first"), (2, "second"), (3, "third"), (4, ""), (5, "last")]
    assert _lines(data, tmp_path, blank="skip") == [(1, "first"), (2, "second"), (3, "third"), (5, "last")]
    assert _lines(b"\ta\tb \n", tmp_path, strip=False) == [(1, "\ta\tb ")]


def test_blank_lines_refused_with_the_line_number(tmp_path):
    with pytest.raises(InputError, match=r"t.txt: line 3 is blank; say why"):
        _lines("a\nb\n \t\u3000\n".encode(), tmp_path, blank="error", blank_hint="; say why")


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
    with pytest.raises(InputError, match=r"t.txt: line 2 is not UTF-8 text \(invalid start byte at byte 4\)"):
        _lines(b"ok\nbad \xff\n", tmp_path)
    # a lone CR before the bad line counts as a line end
    with pytest.raises(InputError, match=r"line 3 is not UTF-8"):
        _lines(b"a\rb\ncaf\xc3\n", tmp_path)


def test_missing_directory_and_error_class(tmp_path):
    class Custom(InputError):
        pass

    with pytest.raises(Custom, match=r"data file not found: .*nope.txt"):
        list(text_lines(tmp_path / "nope.txt", what="data file", error=Custom))
    with pytest.raises(InputError, match=r"input file is a directory, expected a text file"):
        list(text_lines(tmp_path))
    with pytest.raises(ValueError):
        list(text_lines(tmp_path / "x", blank="maybe"))


def test_handles_and_stdin(monkeypatch):
    assert list(text_lines(io.BytesIO(b"a b\nc\n"))) == [(1, "a b"), (2, "c")]

    class Stdin:
        buffer = io.BytesIO(b"x\n\xff\n")

    monkeypatch.setattr("sys.stdin", Stdin)
    with pytest.raises(InputError, match=r"<stdin>: line 2 is not UTF-8"):
        list(text_lines("-"))


def test_the_readers_share_it(tmp_path):
    """Vocabulary, training text, sentences to embed and sense examples fail the same way."""
    from pyelmo.embedding.store import read_sentences
    from pyelmo.evaluation.senses import read_sense_examples
    from pyelmo.lm.vocab import DataError, Vocabulary, read_lines

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"<S>\n</S>\n<UNK>\nw\xff\n")
    for read in (Vocabulary.load, lambda p: list(read_lines([p])), lambda p: list(read_sentences(p))):
        with pytest.raises(InputError, match=r"bad.txt: line 4 is not UTF-8 text"):
            read(bad)
    bad.write_bytes(b"# comment\nbank\tmoney\tthe bank .\nbank\triver\tthe b\xffank .\n")
    with pytest.raises(InputError, match=r"bad.txt: line 3 is not UTF-8 text"):
        read_sense_examples(bad)
    with pytest.raises(DataError):
        Vocabulary.load(bad)
    text = tmp_path / "t.txt"
    text.write_bytes(b"a b\r\n\r\nc\rd e\n")
    assert list(read_lines([text])) == [["a", "b"], ["c"], ["d", "e"]]
    assert list(read_sentences(text, skip_blank_lines=True)) == [(0, "a b"), (1, ""), (2, "c"), (3, "d e")]
    with pytest.raises(InputError, match=r"line 2 is blank; every line must hold a sentence"):
        list(read_sentences(text))
    senses = tmp_path / "s.tsv"
    senses.write_text("# comment\n\nbank\tmoney\tthe bank \"closed\" .\nbank\triver\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"s.tsv: line 4: expected word, sense and sentence"):
        read_sense_examples(senses)
    senses.write_text("# comment\n\nbank\tmoney\tthe bank \"closed\" .\n", encoding="utf-8")
    (example,) = read_sense_examples(senses)
    assert example.tokens == ("the", "bank", '"closed"', ".")
