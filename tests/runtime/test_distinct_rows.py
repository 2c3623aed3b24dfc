"""A block of input-to-gate products on its distinct rows only (pyelmo.runtime.linear.distinct_rows, used by
PlannedPair.affine): the distinct rows found bit for bit, a hash collision falls back to every row, and the
results are the linear's, equal rows giving the same bits."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyelmo.runtime import linear as planned_linear
from pyelmo.runtime.linear import DISTINCT_MAX_SHARE, PlannedLinear, distinct_rows
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import KERNELS, ONEDNN_MAX_ROWS, ExecutionPlan, onednn_available
from pyelmo.runtime.planning import plan_model

IN, OUT = 48, 80


def _repeated(rows: int, distinct: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` rows drawn from ``distinct`` random rows (each used at least once): ``(x, which)``."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.randn(distinct, IN, generator=generator)
    which = torch.cat([torch.arange(distinct), torch.randint(0, distinct, (rows - distinct,), generator=generator)])
    which = which[torch.randperm(rows, generator=generator)]
    return pool[which], which


def _pair(plan: ExecutionPlan, directions: int = 2):
    """The planned pair of ``directions`` random linears, the linears themselves and their biases."""
    torch.manual_seed(0)
    linears = [nn.Linear(IN, OUT) for _ in range(directions)]
    planned = list(plan_model(nn.Sequential(*linears), RunOptions(plan)))
    return planned[0].pair(planned), linears, [linear.bias.detach() for linear in linears]


@pytest.fixture
def rows_run(monkeypatch) -> list[tuple[int, bool]]:
    """The row count of every product a planned linear's ``affine`` runs, and whether into ``out`` (every row)."""
    counts, affine = [], PlannedLinear.affine
    monkeypatch.setattr(PlannedLinear, "affine", lambda self, x, bias, out=None:
                        counts.append((x.shape[0], out is not None)) or affine(self, x, bias, out))
    return counts


def test_distinct_rows_are_found_bit_for_bit():
    x, which = _repeated(300, 70)
    x[which == 3] = 0.0
    x[which == 5] = -0.0  # equal values, other bits: other rows
    x[which == 7] = float("nan")
    distinct, inverse = distinct_rows(x)
    assert distinct.shape == (70, IN) and inverse.shape == (300,)
    assert torch.equal(distinct[inverse].view(torch.int32), x.view(torch.int32))
    assert len(torch.unique(distinct.view(torch.int32), dim=0)) == 70  # each distinct row once
    for row in range(300):  # each distinct row is the first of its equal rows
        first = int((which == which[row]).nonzero()[0])
        assert torch.equal(distinct[inverse[row]].view(torch.int32), x[first].view(torch.int32))
    assert torch.equal(distinct_rows(x.clone())[1], inverse)  # the same answer again


def test_rows_alike_have_other_keys():
    """Rows of the same values in other orders, or a bit apart, have other keys (no fallback to every row)."""
    row = torch.randn(IN)
    x = torch.stack([row, row.roll(1), row.flip(0), row, row.roll(1)])
    x[3, 0] = torch.nextafter(row[0], torch.tensor(float("inf")))
    assert len(torch.unique(planned_linear.row_keys(x))) == 4
    distinct, inverse = distinct_rows(x)
    assert len(distinct) == 4 and inverse[1] == inverse[4]


def test_distinct_rows_of_other_dtypes_are_not_searched():
    x, _ = _repeated(100, 10)
    assert distinct_rows(x.double()) is None and distinct_rows(x.bfloat16()) is None


def test_a_collision_falls_back_to_every_row(monkeypatch, rows_run):
    """Two distinct rows with one key (every key forced to 0): the check finds them, and every row is run."""
    monkeypatch.setattr(planned_linear, "row_keys", lambda x: torch.zeros(x.shape[0], dtype=torch.int64))
    same = torch.randn(1, IN).expand(100, IN).contiguous()
    distinct, inverse = distinct_rows(same)  # one key, one row: no collision
    assert distinct.shape == (1, IN) and not inverse.any()
    x, _ = _repeated(100, 10)
    assert distinct_rows(x) is None
    pair, linears, biases = _pair(ExecutionPlan())
    out = torch.empty(2, 100, OUT)
    pair.affine(torch.stack([x, x]), biases, out)
    assert rows_run == [(100, True)] * 2
    with torch.no_grad():
        torch.testing.assert_close(out[0], linears[0](x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernels", ["fixed", *(k for k in KERNELS if k != "onednn" or onednn_available())])
@pytest.mark.parametrize("distinct", [20, 80])  # a oneDNN product's rows under the fixed rule, and MKL's
def test_a_block_with_repeated_rows_runs_on_its_distinct_rows(kernels, distinct, rows_run):
    rows = 200
    pair, linears, biases = _pair(ExecutionPlan(kernels=kernels))
    x0, which0 = _repeated(rows, distinct, seed=1)
    x1, which1 = _repeated(rows, distinct, seed=2)
    out = torch.full((2, rows, OUT), float("nan"))
    assert pair.affine(torch.stack([x0, x1]), biases, out) is out
    assert rows_run == [(distinct, False)] * 2
    for y, x, which, linear in zip(out, (x0, x1), (which0, which1), linears):
        with torch.no_grad():
            torch.testing.assert_close(y, linear(x), rtol=1e-6, atol=1e-6)
        for row in range(rows):  # equal input rows, the same bits
            first = int((which == which[row]).nonzero()[0])
            assert torch.equal(y[row].view(torch.int32), y[first].view(torch.int32))


@pytest.mark.parametrize("rows, distinct", [
    (ONEDNN_MAX_ROWS, 8),  # a block of few rows: not searched
    (200, 200),  # no repeats
    (200, int(DISTINCT_MAX_SHARE * 200) + 1),  # too few repeats
])
def test_other_blocks_run_every_row(rows, distinct, rows_run):
    pair, linears, biases = _pair(ExecutionPlan(), directions=1)
    x, _ = _repeated(rows, distinct)
    out = torch.empty(1, rows, OUT)
    pair.affine(x[None], biases, out)
    assert rows_run == [(rows, True)]
    with torch.no_grad():
        torch.testing.assert_close(out[0], linears[0](x), rtol=1e-6, atol=1e-6)


def test_a_planned_bilm_on_repeated_words_equals_every_row_run(tiny_model, monkeypatch, rows_run):
    """A planned biLM's vectors on a text of repeated words, its first level's blocks run on their distinct rows,
    are those of every row run (within float32 rounding: other row counts may run other kernels)."""
    import copy

    from pyelmo.modeling.characters import batch_to_ids

    ids = batch_to_ids([["the", "cat", "sat", "on", "the", "mat", "."]] * 6 + [["a", "cat", "."]] * 10)
    options = RunOptions.inference()
    model = plan_model(copy.deepcopy(tiny_model), options)
    with torch.no_grad():
        searched = model(ids, options=options).layers
        ran = list(rows_run)
        monkeypatch.setattr(planned_linear, "DISTINCT_MAX_SHARE", 0.0)
        del rows_run[:]
        every = model(ids, options=options).layers
    assert len(ran) == len(rows_run) and sum(n for n, _ in ran) < sum(n for n, _ in rows_run)  # fewer rows run
    torch.testing.assert_close(searched, every, rtol=1e-6, atol=1e-6)
