"""Request bodies of the JSON API (they are also its OpenAPI schema) and the server's limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

#: A sentence: raw text (tokenized Moses-style, as the command line does) or a list of tokens.
Sentence = Union[str, list[str]]

#: A finite number within +-1000: JSON's NaN and +-Infinity (which the parser accepts) and larger values get a 422.
Bounded = Annotated[float, Field(ge=-1000.0, le=1000.0, allow_inf_nan=False)]

_SENTENCE = "raw text (tokenized Moses-style, as `pyelmo similarity` does) or a list of tokens"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; a request over a limit gets a 4xx naming the field."""

    max_body_bytes: int = 1_000_000
    max_sentences: int = 64
    max_tokens: int = 100  # per sentence, after tokenization
    max_chars: int = 2_000  # per raw-text sentence, before tokenization
    max_k: int = 50


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenizeRequest(_Request):
    sentences: list[Sentence] = Field(min_length=1, description=f"each {_SENTENCE}")


class EmbedRequest(_Request):
    sentences: list[Sentence] = Field(min_length=1, description=f"each {_SENTENCE}")
    layers: list[int] | None = Field(None, description="layer indices (0 = context-independent token layer; "
                                                       "negative counts from the top); default: all")
    output: Literal["layers", "average", "mix"] = Field(
        "layers", description="`layers`: each chosen layer; `average`: their mean (ELMo's equal mix); "
                              "`mix`: gamma * sum(softmax(mix_weights)[j] * layer j), as ScalarMix")
    mix_weights: list[Bounded] | None = Field(None, description="with output=mix: one weight per chosen layer "
                                                                "(before the softmax), each within +-1000")
    gamma: Bounded = Field(1.0, description="scale of the mix, within +-1000")
    pool: Literal["none", "mean"] = Field(
        "none", description="`mean`: one vector per sentence, the mean of `output` over the sentence's tokens "
                            "(TF Hub ELMo's `default`): shape (layers, dim) with output=layers, else (dim,)")
    encoding: Literal["json", "base64"] = Field(
        "json", description="`json`: nested lists of floats rounded to `decimals` decimal places; "
                            "`base64`: the exact little-endian float32 bytes, C order, of `shape`")
    decimals: int = Field(6, ge=1, le=9, description="decimal places of JSON floats")


class SimilarityRequest(_Request):
    sentences: list[Sentence] = Field(min_length=2, description=f"each {_SENTENCE}")
    word: str | None = Field(None, min_length=1, description="the word to compare (its first occurrence, "
                                                             "case-insensitive, in each sentence)")
    positions: list[int] | None = Field(None, description="instead of `word`: one token index per sentence")
    senses: list[str] | None = Field(None, description="optional sense label per sentence: adds within-sense "
                                                       "and across-sense mean similarities")
    project: bool = Field(False, description="add a 2-D PCA projection per layer of the word in these "
                                             "sentences and in the sample corpus")


class NeighboursRequest(_Request):
    sentence: Sentence = Field(description=_SENTENCE)
    word: str | None = Field(None, min_length=1, description="the word (first occurrence, case-insensitive)")
    position: int | None = Field(None, description="instead of `word`: its token index")
    k: int = Field(5, ge=1, description="neighbours per layer")
    same_word: bool = Field(True, description="only contexts of the same word form (case-insensitive); "
                                              "false: any token of the sample corpus")


class PredictRequest(_Request):
    sentence: Sentence = Field(description=f"{_SENTENCE}, with the blank marked ___ unless `position` is given")
    position: int | None = Field(None, description="token index of the word to predict (default: the ___)")
    k: int = Field(10, ge=1, description="words per list")


class ErrorDetail(BaseModel):
    status: int
    field: str | None = Field(description="the request part at fault, e.g. `sentences[2]` or `body`")
    message: str
    details: list[dict] | None = Field(None, description="further problems of the same request, if any")


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail
