"""Released models by name: download (local HTTP server), resume, verification, locking, offline, archives."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

from httpserver import FileServer
from pyelmo.modelio import hub
from pyelmo.modelio.downloads import DownloadError
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.cli import main
from pyelmo.errors import PyelmoError, WeightFileError
from pyelmo.modelio.resolve import resolve_model
from pyelmo.modelio.weights import load_bilm_hdf5, load_options

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"
OPTIONS = (REF / "options.json").read_bytes()
WEIGHTS = (REF / "lm_weights.hdf5").read_bytes()
SENTENCES = [["The", "bank", "closed", "."], ["A", "river", "bank"]]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "home"
    monkeypatch.setenv("PYELMO_HOME", str(root))
    monkeypatch.delenv("PYELMO_OFFLINE", raising=False)
    monkeypatch.delenv("PYELMO_MIRROR", raising=False)
    return root


@pytest.fixture
def server():
    with FileServer({"/m/options.json": OPTIONS, "/m/weights.hdf5": WEIGHTS}) as srv:
        yield srv


@pytest.fixture
def tiny(server, monkeypatch):
    """A registered name whose files the local server holds."""
    release = hub.Release("tiny-test", f"{server.url}/m/options.json", f"{server.url}/m/weights.hdf5",
                          load_options(REF / "options.json"), "test model", "local server")
    monkeypatch.setitem(hub.RELEASES, release.name, release)
    return release


def fetch(source, progress=True):
    """A released name, URL or archive fetched into the cache, as the resolver's record fetches it."""
    return resolve_model(source).fetch(progress=progress)


def outputs(model) -> torch.Tensor:
    with torch.no_grad():
        return model(batch_to_ids(SENTENCES)).layers


def direct() -> torch.Tensor:
    return outputs(load_bilm_hdf5(REF / "options.json", REF / "lm_weights.hdf5"))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.name.endswith((".part", ".tmp")))


def test_name_downloads_verifies_and_loads_like_the_files(cache, server, tiny, monkeypatch):
    import pyelmo

    model = pyelmo.load("tiny-test")
    assert torch.equal(outputs(model), direct())
    folder = cache / "models" / "tiny-test"
    assert (folder / "weights.hdf5").read_bytes() == WEIGHTS
    ledger = json.loads((folder / "files.json").read_text())
    assert ledger["weights.hdf5"]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert ledger["weights.hdf5"]["url"] == tiny.weights_url
    assert leftovers(cache) == []
    # second use: from the cache, no request, works offline too
    monkeypatch.setenv("PYELMO_OFFLINE", "1")
    count = len(server.requests)
    embedder = pyelmo.ElmoEmbedder("tiny-test")
    assert len(server.requests) == count
    elmo = pyelmo.Elmo("tiny-test", None, 1, dropout=0.0)
    assert elmo.get_output_dim() == 32
    assert embedder.embed_sentence(SENTENCES[0]).shape == (3, 4, 32)


def test_released_names_through_a_mirror(cache, monkeypatch):
    """The real registry entry for 'small', its URLs rewritten to a local mirror."""
    import pyelmo

    release = hub.RELEASES["small"]
    paths = {u[len(hub.ALLENNLP_BASE):]: data for u, data in
             [(release.options_url, OPTIONS), (release.weights_url, WEIGHTS)]}
    with FileServer(paths) as srv:
        monkeypatch.setenv("PYELMO_MIRROR", srv.url)
        model = pyelmo.load("small")
        assert sorted(p for p, _ in srv.requests) == sorted(paths)
    assert torch.equal(outputs(model), direct())
    assert hub.cached("small")


def test_killed_download_resumes_with_a_range_request(cache, server, tiny):
    half = len(WEIGHTS) // 2
    server.cut["/m/weights.hdf5"] = half
    with pytest.raises(DownloadError, match="stopped at .*run again to resume"):
        fetch("tiny-test", progress=False)
    part = cache / "models" / "tiny-test" / ".weights.hdf5.part"
    assert part.stat().st_size == half
    assert not (cache / "models" / "tiny-test" / "weights.hdf5").exists()
    files = fetch("tiny-test", progress=False)
    assert server.gets("/m/weights.hdf5") == [None, f"bytes={half}-"]
    assert files.weights.read_bytes() == WEIGHTS
    assert leftovers(cache) == []


def test_pinned_digest_mismatch_is_rejected_and_removed(cache, server, tiny, monkeypatch):
    corrupt = bytearray(WEIGHTS)
    corrupt[len(corrupt) // 2] ^= 0xFF
    server.files["/m/weights.hdf5"] = bytes(corrupt)
    pinned = hub.Release(**{**tiny.__dict__, "sha256": (("weights.hdf5", hashlib.sha256(WEIGHTS).hexdigest()),)})
    monkeypatch.setitem(hub.RELEASES, "tiny-test", pinned)
    with pytest.raises(DownloadError) as info:
        fetch("tiny-test", progress=False)
    assert "\n" not in str(info.value) and "sha256" in str(info.value)
    folder = cache / "models" / "tiny-test"
    assert not (folder / "weights.hdf5").exists() and leftovers(cache) == []


def test_truncated_file_fails_the_structural_check_and_is_removed(cache, server, tiny):
    server.files["/m/weights.hdf5"] = WEIGHTS[: len(WEIGHTS) // 2]  # a complete transfer of a bad file
    with pytest.raises(WeightFileError) as info:
        fetch("tiny-test", progress=False)
    assert "\n" not in str(info.value) and "removed" in str(info.value)
    folder = cache / "models" / "tiny-test"
    assert not (folder / "weights.hdf5").exists() and leftovers(cache) == []
    assert "weights.hdf5" not in json.loads((folder / "files.json").read_text())
    server.files["/m/weights.hdf5"] = WEIGHTS  # the good file then downloads and loads
    assert fetch("tiny-test", progress=False).weights.read_bytes() == WEIGHTS


def test_cached_file_changed_on_disk_is_detected(cache, server, tiny):
    files = fetch("tiny-test", progress=False)
    data = bytearray(files.weights.read_bytes())
    data[100] ^= 0xFF
    files.weights.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match="changed since download"):
        fetch("tiny-test", progress=False)
    assert not files.weights.exists()
    assert fetch("tiny-test", progress=False).weights.read_bytes() == WEIGHTS


def test_a_later_download_must_match_the_digest_recorded_by_the_first(cache, server, tiny):
    files = fetch("tiny-test", progress=False)
    files.weights.unlink()  # e.g. cleaned up by hand; the ledger keeps the digest
    changed = bytearray(WEIGHTS)
    changed[len(changed) // 2] ^= 0xFF
    server.files["/m/weights.hdf5"] = bytes(changed)
    with pytest.raises(DownloadError, match="recorded at the first download"):
        fetch("tiny-test", progress=False)
    assert not files.weights.exists() and leftovers(cache) == []


def test_a_file_placed_by_hand_is_used_and_then_guarded(cache, tiny, monkeypatch):
    monkeypatch.setenv("PYELMO_OFFLINE", "1")
    folder = cache / "models" / "tiny-test"
    folder.mkdir(parents=True)
    (folder / "options.json").write_bytes(OPTIONS)
    (folder / "weights.hdf5").write_bytes(WEIGHTS)
    assert fetch("tiny-test").weights == folder / "weights.hdf5"
    ledger = json.loads((folder / "files.json").read_text())
    assert ledger["weights.hdf5"]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()


@pytest.mark.slow
def test_two_processes_downloading_at_once_end_with_one_good_file(cache, server, tiny, tmp_path):
    server.delay = 0.4  # about 3 s for the weights
    go = tmp_path / "go"
    code = "\n".join([
        "import pathlib, sys, time",
        "from pyelmo.modelio import hub",
        "from pyelmo.modelio.weights import load_options",
        f"hub.register(hub.Release('tiny-test', {tiny.options_url!r}, {tiny.weights_url!r}, "
        f"load_options({str(REF / 'options.json')!r}), 't', 't'))",
        "pathlib.Path(sys.argv[1]).touch()",
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)",
        "from pyelmo.modelio.resolve import resolve_model",
        "print(resolve_model('tiny-test').fetch(progress=False).weights)",
    ])
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in ready]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()  # both start downloading now
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert sum("waiting for another process" in err for _, err in results) == 1  # they did overlap
    assert server.gets("/m/weights.hdf5") == [None]  # one transfer: the other process waited for it
    assert (cache / "models" / "tiny-test" / "weights.hdf5").read_bytes() == WEIGHTS
    assert leftovers(cache) == []


def test_offline_mode_names_every_file_its_url_and_place_in_one_message(cache, tiny, monkeypatch, capsys):
    monkeypatch.setenv("PYELMO_OFFLINE", "1")
    folder = cache / "models" / "tiny-test"
    assert main(["embed", "--model", "tiny-test", "in.txt", "out.hdf5"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "PYELMO_OFFLINE" in err
    assert f"{tiny.options_url} to {folder / 'options.json'}" in err
    assert f"{tiny.weights_url} to {folder / 'weights.hdf5'}" in err
    assert f"'pyelmo download tiny-test --dir DIR' and copy DIR/models/tiny-test to {folder}" in err
    # the user does what it says: one file by hand, then the message names only the other
    folder.mkdir(parents=True)
    (folder / "options.json").write_bytes(OPTIONS)
    with pytest.raises(DownloadError) as info:
        fetch("tiny-test")
    assert f"{tiny.weights_url} to {folder / 'weights.hdf5'}" in str(info.value)
    assert tiny.options_url not in str(info.value) and "(options.json is there)" in str(info.value)
    (folder / "weights.hdf5").write_bytes(WEIGHTS)
    assert torch.equal(outputs(pyelmo_load("tiny-test")), direct())


def test_offline_mode_for_a_url_names_the_weights_and_their_options(cache, monkeypatch):
    monkeypatch.setenv("PYELMO_OFFLINE", "1")
    url = "http://127.0.0.1:9/x/elmo_tiny_weights.hdf5"
    with pytest.raises(DownloadError) as info:
        fetch(url)
    message = str(info.value)
    folder = cache / "models" / hub.url_folder(url)
    assert f"{url} to {folder / 'weights.hdf5'}" in message
    assert f"http://127.0.0.1:9/x/elmo_tiny_options.json to {folder / 'options.json'}" in message
    assert f"pyelmo download {url} --dir DIR" in message


def pyelmo_load(name):
    import pyelmo

    return pyelmo.load(name)


def test_unreachable_server_is_one_line_naming_the_url(cache, monkeypatch):
    url = "http://127.0.0.1:9/nothing/model.zip"  # port 9 (discard): connection refused
    with pytest.raises(DownloadError) as info:
        fetch(url, progress=False)
    assert url in str(info.value) and "\n" not in str(info.value)


def test_weight_file_url_finds_its_options_beside_it(cache):
    import pyelmo

    with FileServer({"/x/elmo_tiny_weights.hdf5": WEIGHTS, "/x/elmo_tiny_options.json": OPTIONS,
                     "/y/model.hdf5": WEIGHTS, "/y/options.json": OPTIONS}) as srv:
        for url in (f"{srv.url}/x/elmo_tiny_weights.hdf5", f"{srv.url}/y/model.hdf5"):
            assert torch.equal(outputs(pyelmo.load(url)), direct())


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def test_archive_url_in_the_nlpl_layout_loads(cache):
    import pyelmo

    archive = _zip({"options.json": OPTIONS, "model.hdf5": WEIGHTS, "vocab.txt": b"the\nbank\n", "README": b"x"})
    with FileServer({"/repository/42.zip": archive}) as srv:
        files = fetch(f"{srv.url}/repository/42.zip", progress=False)
        assert files.vocab is not None and files.weights.name == "model.hdf5"
        model = pyelmo.load(f"{srv.url}/repository/42.zip")
    assert torch.equal(outputs(model), direct())
    assert leftovers(cache) == []


def test_local_tar_archive_and_unpacked_folder_load(cache, tmp_path):
    import pyelmo

    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in {"elmo/options.json": OPTIONS, "elmo/model.hdf5": WEIGHTS}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    assert torch.equal(outputs(pyelmo.load(str(archive))), direct())
    unpacked = tmp_path / "nlpl"
    unpacked.mkdir()
    (unpacked / "options.json").write_bytes(OPTIONS)
    (unpacked / "model.hdf5").write_bytes(WEIGHTS)
    assert torch.equal(outputs(pyelmo.load(unpacked)), direct())


def test_archive_without_a_model_is_refused(cache, tmp_path):
    archive = tmp_path / "empty.zip"
    archive.write_bytes(_zip({"README": b"nothing here"}))
    with pytest.raises(WeightFileError, match="holds no options JSON"):
        fetch(str(archive))
    assert archive.exists()  # the user's own file stays
    with FileServer({"/empty.zip": archive.read_bytes()}) as srv:
        with pytest.raises(WeightFileError, match="holds no options JSON"):
            fetch(f"{srv.url}/empty.zip", progress=False)
    kept = [p.name for p in (cache / "models").rglob("*") if p.is_file()]
    assert [name for name in kept if name != "files.json" and not name.endswith(".lock")] == []


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("suffix, pack", [(".zip", _zip), (".tar.gz", _tar)])
@pytest.mark.parametrize("member", ["../escaped.txt", "elmo/../../escaped.txt", "ABSOLUTE"])
def test_archive_entries_outside_its_folder_are_refused(cache, tmp_path, suffix, pack, member):
    """A model archive with a ``../`` or an absolute entry is refused before anything is unpacked."""
    if member == "ABSOLUTE":
        member = str(tmp_path / "escaped.txt")
    archive = tmp_path / f"model{suffix}"
    archive.write_bytes(pack({"options.json": OPTIONS, "model.hdf5": WEIGHTS, member: b"x"}))
    with pytest.raises(PyelmoError, match="has an entry outside its folder"):
        fetch(str(archive))
    assert not list(tmp_path.rglob("escaped.txt")) and not list(cache.rglob("model.hdf5"))
    assert leftovers(cache) == []


def test_unknown_name_lists_the_known_ones(cache):
    import pyelmo

    with pytest.raises(PyelmoError, match="original-5.5b"):
        pyelmo.load("no-such-model")


def test_models_and_download_commands(cache, tiny, capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("english", "small", "medium", "original", "original-5.5b", "pubmed", "tiny-test"):
        assert f"\n{name} " in out
    tiny_row = next(line for line in out.splitlines() if line.startswith("tiny-test"))
    assert "no" in tiny_row.split()
    assert main(["download", "tiny-test", "--quiet"]) == 0
    assert "tiny-test" in capsys.readouterr().out
    main(["models"])
    tiny_row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-test"))
    assert "yes" in tiny_row.split()
    other = cache.parent / "elsewhere"
    assert main(["download", "tiny-test", "--dir", str(other), "--quiet"]) == 0
    assert (other / "models" / "tiny-test" / "weights.hdf5").read_bytes() == WEIGHTS
    assert main(["download", "english"]) == 1  # in the package: nothing to fetch
    err = capsys.readouterr().err.strip()
    assert "english (shipped) is in the package already: there is nothing to download" in err and "\n" not in err


def test_registry_sizes_match_the_published_parameter_counts():
    """AllenNLP's ELMo page lists 13.6M / 28.0M / 93.6M parameters for small / medium / original."""
    millions = {name: hub.parameter_count(hub.RELEASES[name].config) / 1e6 for name in ("small", "medium", "original")}
    assert round(millions["small"], 1) == 13.6
    assert round(millions["medium"], 1) == 28.0
    assert round(millions["original"], 1) == 93.6
