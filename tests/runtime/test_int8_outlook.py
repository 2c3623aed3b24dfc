"""``pyelmo env --precision int8`` says whether int8 is expected to pay on this CPU, by a fixed rule of its features."""

from __future__ import annotations

import json

import pytest

from pyelmo.cli import main
from pyelmo.runtime.int8_outlook import int8_outlook


@pytest.mark.parametrize("flags, cpu_class, expected", [
    ({"avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"}, "AMX-INT8", True),
    ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, "AVX512-VNNI", True),  # this session's AMD EPYC
    ({"avx2", "avx_vnni"}, "AVX-VNNI", True),
    ({"avx2", "fma"}, "AVX2 without VNNI", False),  # measured: 0.99x for a 200-sentence embed command
    ({"asimd", "asimddp"}, "arm with dot products", None),
    ({"sse4_2"}, "other", None),
])
def test_the_rule_of_the_cpu_features(flags, cpu_class, expected):
    outlook = int8_outlook(frozenset(flags), engine="x86")
    assert (outlook.cpu_class, outlook.expected) == (cpu_class, expected)
    assert outlook.why and cpu_class in outlook.line()


def test_without_an_int8_engine_it_does_not_pay():
    assert int8_outlook(frozenset({"avx512_vnni"}), engine=None).expected is False


def test_env_states_it_for_int8_only(capsys, tiny_model_folder):
    assert main(["env", "--precision", "int8", "--json", "--model", str(tiny_model_folder)]) == 0
    printed = json.loads(capsys.readouterr().out)
    here = int8_outlook()
    assert printed["int8_outlook"] == here.as_dict()
    assert main(["env", "--precision", "int8", "--model", str(tiny_model_folder)]) == 0
    assert here.line() in capsys.readouterr().out.splitlines()
    assert main(["env", "--json", "--model", str(tiny_model_folder)]) == 0
    assert "int8_outlook" not in json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory):
    import torch

    from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modelio.weights import save_pretrained

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("outlook-model")
    config = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 16), (2, 16)), n_highway=1),
                        lstm=LSTMConfig(dim=512, projection_dim=128))
    save_pretrained(BiLM(config).eval(), folder)
    return folder
