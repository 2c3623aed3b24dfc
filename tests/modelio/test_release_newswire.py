"""Throwaway: the 'newswire-small' registry entry, its files on a local mirror (127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from httpserver import FileServer
from pyelmo.cli import main
from pyelmo.modelio import hub
from pyelmo.modelio.resolve import resolve_model
from test_hub import OPTIONS, WEIGHTS, cache, direct, outputs  # noqa: F401 (the hub tests' fixture)


def test_newswire_is_listed_resolved_and_loads(cache, monkeypatch, capsys, tmp_path):
    import pyelmo

    release = hub.RELEASES["newswire-small"]
    assert release.language == "en" and release.config == hub.preset("small")
    assert main(["models"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("newswire-small "))
    assert "3 x 256" in row and "no" in row.split()
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    assert "newswire-small" in capsys.readouterr().out  # the --model help lists the registry
    record = resolve_model("newswire-small")
    assert (record.kind, record.format, record.language) == ("released", "bilm-tf", "en")
    paths = {u[len(hub.ALLENNLP_BASE):]: data for u, data in
             [(release.options_url, OPTIONS), (release.weights_url, WEIGHTS)]}
    with FileServer(paths) as srv:
        monkeypatch.setenv("PYELMO_MIRROR", srv.url)
        assert torch.equal(outputs(pyelmo.load("newswire-small")), direct())
        assert sorted(p for p, _ in srv.requests) == sorted(paths)
    text = tmp_path / "in.txt"
    text.write_text("The bank closed .\n", encoding="utf-8")
    assert main(["embed", str(text), str(tmp_path / "out.h5"), "--model", "newswire-small"]) == 0  # from the cache
    assert Path(tmp_path / "out.h5").stat().st_size > 0
    assert main(["models"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("newswire-small "))
    assert "yes" in row.split()
