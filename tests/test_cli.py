"""User mistakes on the command line of the main job and of every example end in one line that names the flag
and the fix, with exit status 2, before any data is loaded; a bug ends in its traceback plus a hint to report it.
Also: the shared progress bar, and ``--save`` / ``--plot``."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OGB_SCRIPTS = ("ogbn_arxiv", "ogbn_products", "ogbn_proteins")
ALL_SCRIPTS = ("train", "gat_cora", *OGB_SCRIPTS, "gps_molecules")


@pytest.fixture
def script(monkeypatch):
    """``script(name)`` -> the ``main(argv)`` of ``python -m cudnn_gnn train`` or ``examples/<name>.py``."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def _main(name: str):
        if name == "train":
            from cudnn_gnn.apps.train import main

            return main
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main

    yield _main
    sys.modules.pop("_common", None)


def refused(capsys, main, argv: list[str], *words: str) -> str:
    """Run ``main(argv)``: it must exit with status 2 and one stderr line containing every word."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


# Every numeric flag of every script, with values it must refuse.
NUMERIC = {
    "train": {"--epochs": ["0", "-1", "x"], "--patience": ["0", "-5"], "--threads": ["-1"]},
    "gat_cora": {"--epochs": ["0", "-1"], "--patience": ["-5"], "--threads": ["-2"], "--jobs": ["0"]},
    "ogbn_arxiv": {"--epochs": ["0", "-1"], "--eval-every": ["0"], "--runs": ["0"], "--scale": ["0", "-1", "nan", "1.5"],
                   "--layers": ["0"], "--heads": ["0"], "--hidden": ["0"], "--dropout": ["1.5", "-0.1"],
                   "--input-drop": ["2"], "--attn-drop": ["-1"], "--lr": ["0", "-0.1"], "--wd": ["-1"],
                   "--warmup": ["-1"], "--mask-rate": ["1.1"]},
    "ogbn_products": {"--epochs": ["0", "-1"], "--eval-every": ["-1"], "--runs": ["-3"], "--layers": ["0"],
                      "--batch-size": ["0"], "--eval-batch-size": ["-1"], "--num-workers": ["-1"],
                      "--fanout": ["10,0,5", "a,b"], "--lr": ["0"]},
    "ogbn_proteins": {"--epochs": ["0"], "--hidden": ["-4"], "--dropout": ["1.01"], "--lr": ["-1"]},
    "gps_molecules": {"--epochs": ["0", "-1"], "--batch-size": ["0"], "--channels": ["0"], "--layers": ["0"],
                      "--heads": ["0"], "--dropout": ["2"], "--lr": ["0"], "--limit": ["-1"]},
}
NUMERIC_CASES = [(s, f, v) for s, flags in NUMERIC.items() for f, values in flags.items() for v in values]


@pytest.mark.parametrize(("name", "flag", "value"), NUMERIC_CASES, ids=[f"{s}{f}={v}" for s, f, v in NUMERIC_CASES])
def test_numeric_flags_refuse_bad_values(capsys, script, name, flag, value):
    refused(capsys, script(name), [flag, value], flag, value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("name", ALL_SCRIPTS)
def test_device_cuda_without_cuda(capsys, script, name):
    refused(capsys, script(name), ["--device", "cuda"], "--device", "--device cpu")


@pytest.mark.parametrize("name", ALL_SCRIPTS)
def test_device_unknown(capsys, script, name):
    refused(capsys, script(name), ["--device", "gpu0"], "--device", "'gpu0'")


@pytest.mark.parametrize("name", ALL_SCRIPTS)
def test_device_meta_is_refused_not_a_bug(capsys, script, name):
    """The meta device holds shapes, no data: it used to pass the device check and end in the "this is a bug"
    traceback."""
    refused(capsys, script(name), ["--device", "meta"], "--device must be a device that holds data", "'meta'")


@pytest.mark.parametrize("backend", ["cudnn", "triton"])
@pytest.mark.parametrize("name", ("train", "gat_cora", *OGB_SCRIPTS))
def test_gpu_backend_on_cpu(capsys, monkeypatch, script, name, backend):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # set by the Triton test modules; it would allow triton
    refused(capsys, script(name), ["--device", "cpu", "--backend", backend], f"--backend {backend}",
            "--backend reference")


def test_backend_cudnn_without_cudnn_gives_reason_and_fix(capsys, monkeypatch):
    """On a GPU without cuDNN's GNN kernels, the error quotes backend_info()'s reason and fix."""
    import argparse

    from cudnn_gnn.apps import _cli
    from cudnn_gnn.backends import cudnn as cudnn_backend
    from cudnn_gnn.backends import info

    fake = SimpleNamespace(auto_backend="reference", reason="cudnn frontend not installed",
                           fix="pip install 'cudnn-gnn[cuda]'")
    monkeypatch.setattr(cudnn_backend, "backend_info", lambda: fake)
    monkeypatch.setattr(cudnn_backend, "cudnn_available", lambda: False)
    monkeypatch.setattr(info, "backend_info", lambda: fake)
    ap = _cli.ArgumentParser(prog="prog")
    with pytest.raises(SystemExit) as exc:
        _cli.check_backend(ap, "cudnn", torch.device("cuda"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--backend cudnn" in err and fake.reason in err and fake.fix in err
    _cli.check_backend(ap, "cudnn", torch.device("cuda"), ours=False)  # PyG's layers ignore --backend
    _cli.check_backend(argparse.ArgumentParser(), "reference", torch.device("cpu"))


@pytest.mark.parametrize("name", ("train", "gat_cora", *OGB_SCRIPTS))
def test_missing_data_root(capsys, script, name, tmp_path):
    refused(capsys, script(name), ["--device", "cpu", "--data-root", str(tmp_path / "nowhere")], "--data-root",
            "nowhere", "does not exist")


@pytest.mark.parametrize("name", ("train", *OGB_SCRIPTS))
def test_data_root_without_the_files(capsys, script, name, tmp_path):
    """An existing folder without the dataset: one line naming the missing files, before any training."""
    refused(capsys, script(name), ["--device", "cpu", "--data-root", str(tmp_path)], "--data-root", str(tmp_path))


@pytest.mark.parametrize(("name", "flag"), [(s, "--json") for s in ALL_SCRIPTS] + [
    ("train", "--save"), ("train", "--plot"), ("gat_cora", "--save"), ("ogbn_arxiv", "--log"),
    ("ogbn_arxiv", "--save"), ("ogbn_proteins", "--plot")])
def test_unwritable_output_paths_refused_before_training(capsys, script, name, flag, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    refused(capsys, script(name), ["--device", "cpu", flag, str(blocker / "out" / "x.json")], flag, "a_file")
    refused(capsys, script(name), ["--device", "cpu", flag, str(tmp_path)], flag, "folder")


def test_sampled_without_sampler_is_one_line(capsys, script, monkeypatch):
    import torch_geometric.typing as pyg_typing

    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", False)
    refused(capsys, script("ogbn_products"), ["--device", "cpu", "--sampled"], "--sampled", "pip install pyg-lib")


@pytest.mark.slow
def test_subprocess_user_mistake_exit_status_and_one_line():
    proc = subprocess.run([sys.executable, "-m", "cudnn_gnn", "train", "--epochs", "0"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "python -m cudnn_gnn train: error: argument --epochs: must be an integer >= 1, got '0' (--help: usage)"]


def test_bug_gets_traceback_and_report_hint(capsys):
    from cudnn_gnn.apps._cli import BUG_HINT, run_main

    def broken(argv):
        raise KeyError("internal")

    assert run_main(broken, [], prog="prog") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and err.strip().endswith(BUG_HINT)
    assert run_main(lambda argv: {"ok": 1}, []) == 0


def test_main_module_wraps_bugs(capsys, monkeypatch):
    import cudnn_gnn.apps.train as train
    from cudnn_gnn.__main__ import main

    monkeypatch.setattr(train, "train_planetoid", lambda cfg: 1 / 0)
    assert main(["train", "--device", "cpu", "--no-progress", "--epochs", "1"]) == 1
    assert "please report it" in capsys.readouterr().err


def test_train_planetoid_refuses_bad_epochs_and_patience():
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid

    for bad in ({"epochs": 0}, {"epochs": -1}, {"patience": -5}, {"patience": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be an int >= 1"):
            train_planetoid(TrainConfig(device="cpu", progress=False, **bad))


# --------------------------------------------------------------------------------------------- progress bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_no_bar_when_not_a_terminal():
    from cudnn_gnn.apps._progress import progress

    out = io.StringIO()
    bar = progress(total=10, desc="x", file=out)
    assert not bar.active
    for _ in range(10):
        bar.update()
    bar.close()
    assert out.getvalue() == ""
    assert list(progress(range(3), file=out)) == [0, 1, 2]
    assert list(progress([1, 2], enabled=False)) == [1, 2]


def test_progress_early_stop_closes_at_100_percent():
    pytest.importorskip("tqdm")
    from cudnn_gnn.apps._progress import progress

    out = _Tty()
    bar = progress(total=100, desc="run", file=out)
    assert bar.active
    inner = bar.bar
    for _ in range(7):  # early stopping after 7 of 100 epochs
        bar.update()
    bar.close()
    assert inner.total == inner.n == 7 and not bar.active
    assert "7/7" in out.getvalue() and "100%" in out.getvalue()
    bar.close()  # idempotent
    out = _Tty()
    it = progress(range(5), file=out)
    for i in it:
        if i == 2:
            break
    del it  # a loop left early still closes its bar (generator finaliser)


# --------------------------------------------------------------------------------------------- --save / --plot


def test_main_job_save_round_trip_and_plot(script, tmp_path, capsys):
    from cudnn_gnn.apps.train import load_gat
    from cudnn_gnn.datasets import load_planetoid

    ckpt, png = tmp_path / "m" / "gat.pt", tmp_path / "curves.png"
    assert script("train")(["--epochs", "2", "--device", "cpu", "--no-progress", "--save", str(ckpt),
                            "--plot", str(png)]) == 0
    saved = torch.load(ckpt, weights_only=True)
    assert set(saved) == {"state_dict", "config"}
    assert saved["config"]["model"] == "gat" and saved["config"]["epochs"] == 2 and saved["config"]["in_channels"] == 1433
    model, cfg = load_gat(ckpt)
    assert cfg["num_classes"] == 7
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved["state_dict"][k])
    data = load_planetoid("Cora", normalize_features=True)[0]
    model.eval()
    assert model(data.x, data.edge_index).shape == (2708, 7)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_ogb_example_save_and_plot(script, tmp_path):
    """``--save`` stores each seed's model at its reported (best valid) evaluation, not the last epoch's: loaded, it
    gives the reported test accuracy exactly. (A large learning rate, so that seed 0 peaks before the end.)"""
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    from cudnn_gnn.apps.models import OgbGAT
    from cudnn_gnn.datasets import synthetic_ogbn
    from cudnn_gnn.layers import ToCscGraph

    ckpt, png = tmp_path / "arxiv.pt", tmp_path / "arxiv.png"
    summary = script("ogbn_arxiv")(["--synthetic", "--scale", "0.002", "--device", "cpu", "--no-progress", "--epochs",
                                    "6", "--lr", "0.2", "--warmup", "0", "--hidden", "8", "--heads", "2", "--seeds",
                                    "0,1", "--save", str(ckpt), "--plot", str(png)])
    data = synthetic_ogbn("ogbn-arxiv", scale=0.002, seed=0)[0]
    n = data.num_nodes
    graph = ToCscGraph()(Data(edge_index=to_undirected(data.edge_index, num_nodes=n), num_nodes=n)).csc_graph
    y, test = data.y.view(-1), data.test_idx
    assert min(r["epoch"] for r in summary["per_run"]) < 6, "a seed must peak before the last epoch"
    for seed, run in zip((0, 1), summary["per_run"]):
        saved = torch.load(tmp_path / f"arxiv-seed{seed}.pt", weights_only=True)
        assert saved["config"]["seed"] == seed and saved["config"]["epochs"] == 6
        model = OgbGAT(**saved["config"]["model_config"])
        model.load_state_dict(saved["state_dict"])  # strict: the same model comes back
        model.eval()
        with torch.no_grad():
            pred = model(data.x.float(), graph).argmax(-1)
        assert int((pred[test] == y[test]).sum()) / test.numel() == run["test"], seed
        assert saved["config"]["epoch"] == run["epoch"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------- out of range, clashes

PAPERS_BAD = {"--epochs": ["0"], "--max-batches": ["-1"], "--eval-every": ["-1"], "--fanout": ["5,a"],
              "--heads": ["0"], "--dropout": ["2"], "--lr": ["-1"], "--seed": ["-1", str(2**64)], "--scale": ["0"],
              "--gpus": ["0"], "--batch-size": ["0"], "--num-workers": ["-1"], "--eval-max-edges": ["0"]}
SEED_CASES = [("train", "--seed"), ("gps_molecules", "--seed"), ("gat_cora", "--seeds"), ("ogbn_arxiv", "--seeds")]


@pytest.mark.parametrize(("flag", "value"), [(f, v) for f, vs in PAPERS_BAD.items() for v in vs])
def test_papers100m_refuses_out_of_range(capsys, script, flag, value):
    refused(capsys, script("papers100m"), ["--device", "cpu", flag, value], flag, value)


@pytest.mark.parametrize(("name", "flag"), SEED_CASES)
@pytest.mark.parametrize("value", ["-1", str(2**64)])
def test_seeds_out_of_range(capsys, script, name, flag, value):
    refused(capsys, script(name), ["--device", "cpu", flag, value], flag, value)


@pytest.mark.parametrize("name", ["gat_cora", "ogbn_arxiv"])
def test_repeated_seed_refused(capsys, script, name):
    refused(capsys, script(name), ["--device", "cpu", "--seeds", "0,0", "--save", "p.pt"], "--seeds", "once")


def test_papers100m_root_that_is_a_file(capsys, script, tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    refused(capsys, script("papers100m"), ["--device", "cpu", "--root", str(f)], "--root", "file")


@pytest.mark.parametrize("name", ("train", "gat_cora", *OGB_SCRIPTS, "papers100m"))
def test_triton_backend_on_cpu_says_cuda_or_interpreter(capsys, script, name, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    refused(capsys, script(name), ["--device", "cpu", "--backend", "triton"], "--backend triton", "CUDA",
            "TRITON_INTERPRET=1")


CLASHES = [
    ("train", ["--save", "{d}/f", "--json", "{d}/f"], "--json"),
    ("train", ["--save", "{d}/f", "--plot", "{d}/f"], "--plot"),
    ("gat_cora", ["--seeds", "0", "--save", "{d}/f", "--plot", "{d}/f"], "--plot"),
    ("ogbn_arxiv", ["--log", "{d}/f", "--json", "{d}/f"], "--log"),
    ("ogbn_arxiv", ["--save", "{d}/f", "--plot", "{d}/./f"], "--plot"),
    ("gps_molecules", ["--json", "{d}/f", "--save", "{d}/f"], "--save"),
]


@pytest.mark.parametrize(("name", "argv", "flag"), CLASHES, ids=[f"{n}-{'-'.join(a[::2])}" for n, a, _ in CLASHES])
def test_outputs_that_are_one_file_refused(capsys, script, tmp_path, name, argv, flag):
    argv = [a.format(d=tmp_path) for a in argv]
    refused(capsys, script(name), ["--device", "cpu", *argv], flag, "own path")
    assert not (tmp_path / "f").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be created")
@pytest.mark.parametrize("name", ("train", "ogbn_arxiv", "gps_molecules", "papers100m"))
def test_output_folder_where_nothing_can_be_created(capsys, script, name):
    """Permission bits do not tell (root may write anywhere they say no): the check creates a file there."""
    refused(capsys, script(name), ["--device", "cpu", "--json", "/proc/self/out.json"], "--json", "cannot be written")


def test_out_of_memory_is_one_line_not_a_bug(capsys):
    from cudnn_gnn.apps._cli import BUG_HINT, run_main

    def host_oom(argv):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 1099511627776 bytes.\nmore")

    assert run_main(host_oom, [], prog="prog") == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "out of memory" in err and "Traceback" not in err
    assert BUG_HINT not in err and "--scale" in err

    def gpu_oom(argv):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert run_main(gpu_oom, [], prog="prog") == 1
    assert "out of memory" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- --help


@pytest.mark.parametrize("name", (*ALL_SCRIPTS, "papers100m"))
def test_help_is_plain_text_with_defaults_and_every_option_explained(capsys, script, name, monkeypatch):
    from cudnn_gnn.apps import _cli

    parsers = []
    parse_args = _cli.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        parsers.append(self)
        return parse_args(self, *args, **kwargs)

    monkeypatch.setattr(_cli.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit) as exc:
        script(name)(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for markup in ("``", ":func:", ":class:", ":mod:", ":meth:", ":data:", "`_"):
        assert markup not in text, markup
    (ap,) = parsers
    for action in ap._actions:
        if action.option_strings and action.help != "show this help message and exit":
            assert action.help, f"{name} {action.option_strings[0]} has no help line"
    assert "(default: " in text


def test_train_help_shows_defaults(capsys):
    from cudnn_gnn.apps.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1000)" in text and "(default: Cora)" in text and "--json PATH also write the result as JSON" in text
    assert "slows several-fold on a shared machine) (default: 0)" in text  # a default of 0 is a default too


def test_plain_text_removes_rst_markup():
    from cudnn_gnn.apps._cli import plain_text

    doc = ("Uses :func:`cudnn_gnn.apps.inference.layerwise_inference` and :class:`~cudnn_gnn.apps.sampler.X`, "
           "``--eval full``, `the paper <https://arxiv.org/abs/1>`_.")
    assert plain_text(doc) == ("Uses cudnn_gnn.apps.inference.layerwise_inference and X, --eval full, the paper "
                               "(https://arxiv.org/abs/1).")


# --------------------------------------------------------------------------------------------- python -m cudnn_gnn


def _module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudnn_gnn", *argv], capture_output=True, text=True, timeout=120)


def test_version_and_info_versions():
    import torch_geometric

    import cudnn_gnn

    proc = _module("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"cudnn-gnn {cudnn_gnn.__version__}"
    proc = _module("info")
    assert proc.returncode == 0
    assert cudnn_gnn.__version__ in proc.stdout and torch.__version__ in proc.stdout
    assert torch_geometric.__version__ in proc.stdout


def test_unknown_command_is_named():
    proc = _module("trian")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "python -m cudnn_gnn: error: unknown command 'trian'; choose from info, train or --version (--help: usage)"]


def test_info_into_a_closed_pipe_ends_quietly():
    """``python -m cudnn_gnn info | head -2``: the reader goes away; no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_gnn", "info"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child writes anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "BrokenPipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err


def test_output_files_get_the_umask_permissions(tmp_path):
    import os

    from cudnn_gnn.apps._util import plot_curves, save_checkpoint, write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        save_checkpoint(tmp_path / "m.pt", torch.nn.Linear(2, 2), {"k": 1})
        pytest.importorskip("matplotlib")
        plot_curves(tmp_path / "c.png", {"loss": [(1, 1.0), (2, 0.5)]})
    finally:
        os.umask(old)
    for name in ("a.json", "m.pt", "c.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_run_main_reader_gone_is_quiet(capsys, monkeypatch):
    """``python examples/x.py | head``: a BrokenPipeError ends the run quietly (status 0), not as a bug."""
    from cudnn_gnn.apps import _cli

    def writes_into_a_closed_pipe(argv):
        raise BrokenPipeError(32, "Broken pipe")

    silenced = []
    monkeypatch.setattr(_cli, "silence_stdout", lambda: silenced.append(1))
    assert _cli.run_main(writes_into_a_closed_pipe, [], prog="prog") == 0
    assert silenced == [1] and capsys.readouterr().err == ""


def test_ogb_script_on_a_cpu_defaults_to_a_small_graph_and_logs_epoch_lines(script, capsys):
    """On a CPU the synthetic graph defaults to --scale 0.01 (the real size would run for hours), and each epoch
    gets one history line (stdout, the main job's format) with its loss and scores; a single run's final line shows
    no spread (no "± 0.00")."""
    summary = script("ogbn_arxiv")(["--device", "cpu", "--epochs", "2", "--hidden", "4", "--heads", "1"])
    assert summary["scale"] == 0.01
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("seed 0 epoch ")]
    assert [ln.split(": ")[0].split()[-1] for ln in lines] == ["1/2", "2/2"], out
    assert all("loss " in ln and "valid " in ln for ln in lines)
    final = out.strip().splitlines()[-1]
    assert final.startswith("final: ogbn-arxiv gat over 1 run: valid acc ") and "±" not in final, final


def test_a_symlinked_output_is_written_through_to_its_target(tmp_path):
    """The temporary file sits beside the link's target and replaces the target; the link stays a link."""
    import os

    from cudnn_gnn.apps._util import write_json

    (tmp_path / "results").mkdir()
    target = tmp_path / "results" / "r.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_json(link, {"x": 1})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().strip().replace(" ", "").replace("\n", "") == '{"x":1}'
    dangling = tmp_path / "next.json"
    dangling.symlink_to(tmp_path / "results" / "new.json")
    write_json(dangling, {"y": 2})
    assert dangling.is_symlink() and (tmp_path / "results" / "new.json").is_file()


def test_a_fifo_output_is_written_directly(tmp_path):
    """A FIFO (or /dev/stdout) cannot be replaced by a rename: the output is written into it."""
    import os
    import threading

    from cudnn_gnn.apps._util import write_json

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)  # never blocks the exit
    reader.start()
    write_json(fifo, {"x": 1})
    assert fifo.exists() and not fifo.is_file()  # not replaced by a regular file
    reader.join(timeout=30)
    assert got and '"x": 1' in got[0]


def test_an_empty_output_path_is_refused(capsys, script):
    refused(capsys, script("ogbn_arxiv"), ["--device", "cpu", "--json", ""], "--json must be a file path, got ''")
    from cudnn_gnn.apps._util import write_json

    with pytest.raises(ValueError, match=r"`path` must be a file path, got ''"):
        write_json("", {"x": 1})


def test_output_checks_follow_symlinks_and_accept_fifos(capsys, script, tmp_path):
    import argparse
    import os

    from cudnn_gnn.apps._cli import check_output_path

    ap = argparse.ArgumentParser()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_output_path(ap, "--json", str(fifo))  # accepted: written directly
    check_output_path(ap, "--json", "/dev/stdout")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    (tmp_path / "link.json").symlink_to(blocker / "x.json")
    refused(capsys, script("ogbn_arxiv"), ["--device", "cpu", "--json", str(tmp_path / "link.json")], "a_file")


def test_a_second_run_with_the_same_log_starts_a_fresh_file(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from _common import JsonLines

    path = tmp_path / "log.jsonl"
    for run in (1, 2):
        log = JsonLines(str(path))
        log.write({"run": run})
        log.close()
    assert path.read_text().splitlines() == ['{"run": 2}']
    sys.modules.pop("_common", None)


_NO_TORCH = """
import runpy, sys
sys.argv = ["cudnn_gnn", *sys.argv[1:]]
try:
    runpy.run_module("cudnn_gnn", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
print("TORCH" if "torch" in sys.modules else "NO-TORCH", code, file=sys.stderr)
"""


@pytest.mark.parametrize("argv, code", [(["--version"], 0), (["--help"], 0), ([], 0), (["train", "--help"], 0),
                                        (["info", "--help"], 0), (["train", "--epochs", "0"], 2),
                                        (["train", "--modle", "gat"], 2)])
def test_help_version_and_mistakes_answer_without_importing_torch(argv, code):
    """torch takes seconds to import: `--help`, `--version` and a mistyped flag answer without it."""
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, *argv], capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == f"NO-TORCH {code}", proc.stderr
    if argv[-1:] == ["--help"] and argv[:1] == ["train"]:
        assert "--threads" in proc.stdout and "usage: python -m cudnn_gnn train" in proc.stdout


def test_import_cudnn_gnn_imports_no_torch_until_a_name_is_used():
    code = ("import sys, cudnn_gnn; assert 'torch' not in sys.modules, 'import cudnn_gnn imported torch'; "
            "cudnn_gnn.CscGraph; assert 'torch' in sys.modules; print(sorted(cudnn_gnn.__all__) == sorted(set("
            "n for n in cudnn_gnn.__all__ if hasattr(cudnn_gnn, n))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr


def test_default_threads_leaves_the_busy_cores(monkeypatch):
    """A CPU run takes the cores other processes leave free (never fewer than one), not torch's one per core."""
    import os

    from cudnn_gnn.apps import _cli

    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    for load, expected in ((0.0, 8), (0.9, 8), (2.5, 6), (7.99, 1), (30.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert _cli.default_threads() == expected
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # a CPU set of 2 (taskset, cgroups)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert _cli.default_threads() == 2


def test_main_job_threads_default_to_the_free_cores_on_cpu(monkeypatch):
    from cudnn_gnn.apps import train
    from cudnn_gnn.apps._train_args import build_parser

    monkeypatch.setattr(train, "default_threads", lambda: 3)
    ap = build_parser()
    for argv, expected in (([], 3), (["--threads", "2"], 2)):
        args = ap.parse_args(["--device", "cpu", *argv])
        args.seeds = [args.seed]
        train.check_arguments(ap, args, [args.model])
        assert args.threads == expected


def test_pyg_wheel_url_names_the_minor_release_index(monkeypatch):
    """PyG publishes one wheel index per torch minor release, named by its .0: a patch release must not end up in
    the URL (torch 2.13.1 takes torch-2.13.0's index)."""
    from cudnn_gnn.apps import distributed

    monkeypatch.setattr(distributed.torch, "__version__", "2.13.1+cu130")
    monkeypatch.setattr(distributed.torch.version, "cuda", "13.0")
    assert distributed.pyg_wheel_url() == "https://data.pyg.org/whl/torch-2.13.0+cu130.html"
    monkeypatch.setattr(distributed.torch, "__version__", "2.12.0")
    monkeypatch.setattr(distributed.torch.version, "cuda", None)
    assert distributed.pyg_wheel_url() == "https://data.pyg.org/whl/torch-2.12.0+cpu.html"


def test_products_sampled_without_a_sampler_names_sampler_static(example_main, capsys, monkeypatch):
    """On a CPU without pyg-lib or torch-sparse, --sampled's error names --sampler static (nothing extra needed)."""
    from cudnn_gnn.apps import distributed

    monkeypatch.setattr(distributed, "sampler_available", lambda: False)
    main_ = example_main("ogbn_products")
    with pytest.raises(SystemExit) as exc:
        main_(["--device", "cpu", "--sampled", "--sampler", "pyg", "--epochs", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--sampler static needs nothing extra" in err and "torch-2" in err, err
