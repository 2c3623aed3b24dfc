from pyelmo.cli import main

from test_tasks import BILM_ARGS, data  # noqa: F401


def test_pair_trains_and_evaluates(data, capsys):  # noqa: F811
    for name in ("train", "dev"):
        rows = (data / f"{name}.tsv").read_text().splitlines()
        (data / f"{name}.pair").write_text("".join(f"{r}\tthe end\n" for r in rows))
    assert main(["task", "train", "pair", "--train", str(data / "train.pair"), "--dev", str(data / "dev.pair"),
                 "--out", str(data / "m"), *BILM_ARGS, "--static-vectors", str(data / "vec.txt"),
                 "--features", "static", "--max-epochs", "2", "--min-steps", "0", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["task", "evaluate", str(data / "m"), "--test", str(data / "dev.pair"), "--json", "--quiet"]) == 0
    assert '"scale": "percent"' in capsys.readouterr().out
