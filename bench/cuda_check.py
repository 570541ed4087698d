"""`make bench-gpu`: everything the CUDA path has to prove, in one command (a few minutes on an H100/H200).

    .venv/bin/python bench/cuda_check.py [--data-dir DIR] [--out bench/results] [--seeds 2] [--trials 4]
    .venv/bin/python bench/cuda_check.py --device cpu --quick     # smoke test of this script on a CPU

On a machine without CUDA it prints one line saying so and exits 0. Rows (bench/README.md, "GPU"):

  crash     the blog's loop without its fix (train, model.eval() to validate, train again): cuDNN raises
            "cudnn RNN backward can only be called in training mode" (expected); brnn_core's engine runs
            the same sequence (and fit trains on after each validation)
  speed     training samples/s on the GPU, brnn_core's engine vs the blog loop, alternated (target >= 3x)
  accuracy  test accuracy after 2 epochs of full Fashion-MNIST: brnn_core (a real run, worker.run_training)
            vs the blog loop, mean over --seeds seeds each (target: within 0.5 points)
  amp       fp32, bf16 and fp16 (loss scaling): samples/s, 2-epoch test accuracy, fp16 steps skipped
  picker    the Train page's Device select (AppTest) lists the GPU of brnn_core.config.device_choices()
  trials    --trials runs at once sharing the GPU (`python -m brnn_core train` processes: sweep trials are
            ordinary runs) vs one alone: aggregate samples/s; and, when brnn_core.sweep exists, a real sweep

Data: Fashion-MNIST from --data-dir (default $BRNN_DATA_DIR, else ./data, also /usr/share/datasets):
the GPU machine has no internet, so carry the four files along. Without them the accuracy rows say
MISSING and the speed rows run on random images (speed does not depend on pixel values).
Results: OUT/<date>_<device>_gpu-check.{csv,json} (the suite's format) and a Markdown table beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
CUDNN_MESSAGE = "cudnn RNN backward can only be called in training mode"


def no_cuda_line() -> str | None:
    """The one line printed where there is no CUDA GPU (None where there is one)."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"bench-gpu: no CUDA GPU on this machine (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda or 'none'}): nothing to check; run it on a machine with an NVIDIA GPU")


class Bench:
    """Rows in the suite's format, sizes, the device and the data, shared by the checks below."""

    def __init__(self, args: argparse.Namespace):
        import torch

        from brnn_core.benchmarks.rows import Row  # noqa: F401 - checked importable before anything runs

        self.args, self.device = args, torch.device(args.device)
        self.quick = args.quick
        self.rows: list = []
        self.errors: list[dict] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="brnn-gpu-"))
        self.data_dir = Path(args.data_dir or os.environ.get("BRNN_DATA_DIR") or REPO / "data").resolve()
        self.dataset, self.ds, self.data_note = self._load_data()
        self.epochs = 1 if self.quick else 2

    def _load_data(self):
        from brnn_core.data.datasets import DatasetError
        from brnn_core.data.loading import load_dataset

        name = "mnist-sample" if self.quick else "fashion-mnist"
        try:
            return name, load_dataset(name, self.data_dir, download=False), ""
        except DatasetError as exc:
            note = f"MISSING: fashion-mnist is not in {self.data_dir} ({str(exc).splitlines()[0]})"
            print(f"bench-gpu: {note}\n  the accuracy rows are skipped; put the four IDX files (.gz) in "
                  f"{self.data_dir}/FashionMNIST/raw or pass --data-dir", flush=True)
            return None, None, note

    def train_data(self):
        """(images, labels) uint8/int64 on the CPU: the dataset's training set, or random images without it."""
        import torch

        if self.ds is not None:
            return self.ds.train_x, self.ds.train_y
        g = torch.Generator().manual_seed(0)
        n = 5000 if self.quick else 60000
        return torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g), torch.randint(0, 10, (n,),
                                                                                                   generator=g)

    def add(self, bench: str, case: str, metric: str, value, unit: str, *, values: list[float] | None = None,
            target: str = "", met: bool | None = None, note: str = "") -> None:
        from brnn_core.benchmarks.rows import Row

        lo, hi = (min(values), max(values)) if values else (None, None)
        row = Row(bench, case, metric, float(value) if value is not None else float("nan"), unit, lo, hi,
                  len(values or [1]), target, "" if met is None else ("yes" if met else "no"), note)
        self.rows.append(row)
        print(f"  {bench:9} {case:48} {row.value:12,.4g} {unit:10} {target} "
              f"{'' if met is None else ('ok' if met else 'MISSED')} {note}", flush=True)

    def check(self, name: str, fn) -> None:
        """Run one check; a failure is a row of its own and the others still run."""
        print(f"[{name}]", flush=True)
        t0 = time.perf_counter()
        try:
            fn(self)
        except Exception as exc:  # noqa: BLE001 - report it, run the rest
            self.errors.append({"bench": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"  {name} FAILED: {type(exc).__name__}: {exc}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)


# ------------------------------------------------------------------ crash
def blog_sequence_without_fix(device, x, y) -> str:
    """The blog's loop as it shipped: train, evaluate (model.eval(), never undone), train again."""
    from brnn_core.benchmarks import blog_baseline as blog

    model, criterion = blog.make_model(device)
    optimizer = blog.make_optimizer(model)
    loader = blog.make_loader(x[:1000], y[:1000])
    test_loader = blog.make_loader(x[1000:1200], y[1000:1200], shuffle=False)

    def one_step() -> None:
        images, labels = next(iter(loader))
        loss = criterion(model(images.view(-1, 28, 28).to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    one_step()  # epoch 1 (a new nn.Module starts in training mode)
    blog.evaluate(model, test_loader, criterion, device)  # validation: model.eval()
    try:
        one_step()  # epoch 2, still in eval mode
        return "no error"
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0]


def engine_sequence(device, x, y) -> bool:
    """brnn_core's engine through the same sequence, with an explicit model.eval() in between too."""
    import math

    import torch

    from brnn_core.model import BiLSTM, ModelConfig
    from brnn_core.training.engine import evaluate, make_optimizer, train_one_epoch

    torch.manual_seed(0)
    model = BiLSTM(ModelConfig()).to(device)
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    xs, ys = x[:2000].to(device), y[:2000].to(device)
    order = lambda: torch.randperm(len(xs), device=device).split(100)  # noqa: E731
    first = train_one_epoch(model, opt, xs, ys, order())
    evaluate(model, xs, ys)
    model.eval()  # a caller that leaves the model in eval mode cannot break the next epoch
    second = train_one_epoch(model, opt, xs, ys, order(), step=first.step)
    return first.completed and second.completed and math.isfinite(second.loss)


def check_crash(b: Bench) -> None:
    x, y = b.train_data()
    found = blog_sequence_without_fix(b.device, x, y)
    expected = b.device.type == "cuda"
    b.add("crash", "blog loop without its fix: train, eval(), train", "raised", float(CUDNN_MESSAGE in found), "",
          target="cuDNN error" if expected else "", met=(CUDNN_MESSAGE in found) if expected else None,
          note=found if expected else f"{found} (CPU LSTMs have no cuDNN rule: only a GPU can show it)")
    ok = engine_sequence(b.device, x, y)
    b.add("crash", "brnn_core engine: train, evaluate, eval(), train", "survived", float(ok), "", target="runs",
          met=ok, note="engine.mode() is the one place train/eval is switched")


# ------------------------------------------------------------------ speed
def check_speed(b: Bench) -> None:
    from brnn_core.benchmarks.rows import alternate
    from brnn_core.benchmarks.sides import BlogTrainer, EngineTrainer

    x, y = b.train_data()
    engine, blog = EngineTrainer(x, y, b.device), BlogTrainer(x, y, b.device)
    engine_steps, blog_steps = (20, 5) if b.quick else (400, 100)
    engine.run(10 if b.quick else 50)  # warm-up: cuDNN autotuning, allocator
    blog.run(5 if b.quick else 20)
    res = alternate({"engine": lambda: engine.samples_per_s(engine_steps),
                     "blog": lambda: blog.samples_per_s(blog_steps)}, 2 if b.quick else 3, lambda m: None)
    e, g = statistics.median(res["engine"]), statistics.median(res["blog"])
    b.add("speed", "brnn_core engine (defaults, loss read every 10 steps)", "throughput", e, "samples/s",
          values=res["engine"], note=f"{engine_steps} steps per measurement, batch 100")
    b.add("speed", "blog loop (DataLoader of PIL images, loss.item() per step)", "throughput", g, "samples/s",
          values=res["blog"], note=f"{blog_steps} steps per measurement")
    b.add("speed", "engine / blog", "ratio", e / g, "x", values=[a / c for a, c in zip(res["engine"], res["blog"],
                                                                                     strict=True)],
          target=">= 3", met=e / g >= 3)


# ------------------------------------------------------------------ accuracy (and amp)
def brnn_run(b: Bench, seed: int, amp: str = "off", threads: int | None = None) -> dict:
    """A real run through worker.run_training; its test accuracy, samples/s and fp16 skipped steps."""
    from brnn_core.config import TrainConfig
    from brnn_core.runs.rundir import create_run, new_run_config
    from brnn_core.training.worker import run_training

    cfg = TrainConfig(dataset=b.dataset, epochs=b.epochs, device=str(b.device), seed=seed, amp=amp,
                      **({"hidden_size": 32} if b.quick else {})).validate()
    run = create_run(b.tmp / "runs", new_run_config(cfg, b.data_dir))
    state = run_training(run, data_dir=b.data_dir)
    status = run.status()
    if state != "finished":
        raise RuntimeError(f"brnn_core run ended {state}: {status.get('message')}")
    metrics = run.metrics()
    rates = metrics[metrics["split"] == "train"]["samples_per_s"].iloc[1:]
    return {"test_acc": status["test_acc"], "samples_per_s": float(rates.median()),
            "skipped": status.get("skipped_steps")}


def blog_accuracy(b: Bench, seed: int) -> float:
    """The blog script's 2 epochs on the full training set (it has no validation split), test accuracy."""
    import torch

    from brnn_core.benchmarks import blog_baseline as blog

    torch.manual_seed(seed)
    model, criterion = blog.make_model(b.device, hidden_size=32 if b.quick else 128)
    optimizer = blog.make_optimizer(model)
    loader = blog.make_loader(b.ds.train_x, b.ds.train_y, generator=torch.Generator().manual_seed(seed))
    test_loader = blog.make_loader(b.ds.test_x, b.ds.test_y, shuffle=False)
    for epoch in range(b.epochs):
        blog.train_steps(model, loader, criterion, optimizer, b.device, epoch=epoch, num_epochs=b.epochs,
                         log=lambda m: None)
    return blog.evaluate(model, test_loader, criterion, b.device)[1]


def check_accuracy(b: Bench) -> None:
    if b.ds is None:
        b.add("accuracy", "test accuracy after 2 epochs", "accuracy", None, "%", note=b.data_note)
        return
    seeds = range(b.args.seeds)
    ours = [100 * brnn_run(b, s)["test_acc"] for s in seeds]
    theirs = [100 * blog_accuracy(b, s) for s in seeds]
    what = f"{b.epochs} epoch(s) of {b.dataset}, seeds {list(seeds)}"
    b.add("accuracy", "brnn_core run (defaults: bidir head, 10% held out)", "accuracy", statistics.mean(ours), "%",
          values=ours, note=what)
    b.add("accuracy", "blog loop (out[:, -1, :], the whole training set)", "accuracy", statistics.mean(theirs), "%",
          values=theirs, note=what)
    diff = statistics.mean(ours) - statistics.mean(theirs)
    b.add("accuracy", "brnn_core - blog", "difference", diff, "points", target=">= -0.5", met=diff >= -0.5,
          note="mean over the seeds; brnn_core trains on 10% fewer images (validation split)")


def amp_modes(b: Bench) -> list[str]:
    import torch

    from brnn_core.devices import cpu_has_bf16

    if b.device.type == "cuda":
        return ["off", "bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["off", "fp16"]
    return ["off", "bf16"] if cpu_has_bf16() else ["off"]  # fp16 trains on CUDA only


def check_amp(b: Bench) -> None:
    from brnn_core.benchmarks.rows import alternate
    from brnn_core.benchmarks.sides import EngineTrainer

    x, y = b.train_data()
    modes = amp_modes(b)
    trainers = {m: EngineTrainer(x, y, b.device, amp=m) for m in modes}
    steps = 10 if b.quick else 300
    for t in trainers.values():
        t.run(5 if b.quick else 50)
    res = alternate({m: (lambda t=t: t.samples_per_s(steps)) for m, t in trainers.items()}, 2 if b.quick else 3,
                    lambda m: None)
    for m in modes:
        b.add("amp", f"engine, amp {m if m != 'off' else 'off (fp32)'}", "throughput",
              statistics.median(res[m]), "samples/s", values=res[m],
              note="fp16 with loss scaling (LossScaler)" if m == "fp16" else "")
    if b.ds is None:
        b.add("amp", "test accuracy per precision", "accuracy", None, "%", note=b.data_note)
        return
    for m in modes:
        info = brnn_run(b, 0, amp=m)
        note = f"{b.epochs} epoch(s), seed 0" + (f"; {info['skipped']} steps skipped by fp16 overflow"
                                                 if m == "fp16" else "")
        b.add("amp", f"brnn_core run, amp {m}", "accuracy", 100 * info["test_acc"], "%", note=note)


# ------------------------------------------------------------------ the dashboard's device picker
def check_picker(b: Bench) -> None:
    from streamlit.testing.v1 import AppTest

    from brnn_core.devices import device_choices

    os.environ["BRNN_RUNS_DIR"] = str(b.tmp / "picker-runs")
    os.environ["BRNN_DATA_DIR"] = str(b.data_dir)
    at = AppTest.from_file(str(REPO / "streamlit_app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/train.py").run()
    if at.exception:
        raise RuntimeError(f"Train page: {[e.value for e in at.exception]}")
    box = next(s for s in at.selectbox if s.label == "Device")
    labels = [str(o) for o in box.options]
    choices = device_choices()
    gpus = [label for key, label in choices.items() if key.startswith("cuda")]
    ok = labels == list(choices.values()) and (bool(gpus) or b.device.type != "cuda")
    b.add("picker", "Train page Device select = config.device_choices()", "listed", float(ok), "",
          target="lists the GPU" if b.device.type == "cuda" else "", met=ok, note="; ".join(labels))


# ------------------------------------------------------------------ several trials on one GPU
def cli_runs(b: Bench, n: int, tag: str) -> list[float]:
    """n `python -m brnn_core train` processes started together; each run's median logged samples/s."""
    from brnn_core.runs.rundir import list_runs

    runs_dir = b.tmp / f"trials-{tag}"
    sets = [f"dataset={b.dataset or 'mnist-sample'}", "epochs=1", f"device={b.device}"]
    sets += ["hidden_size=32"] if b.quick else []
    env = {**os.environ, "BRNN_DATA_DIR": str(b.data_dir), "BRNN_PROGRESS": "plain"}
    procs = [subprocess.Popen([sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir),
                               *[a for s in sets + [f"seed={i}"] for a in ("--set", s)]], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(n)]
    errors = [p.communicate(timeout=900)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a training process failed: {[e[-500:] for e in errors if e]}")
    rates = []
    for run in list_runs(runs_dir):
        m = run.metrics()
        rates.append(float(m[m["split"] == "train"]["samples_per_s"].iloc[1:].median()))
    return rates


def check_trials(b: Bench) -> None:
    k = 2 if b.quick else b.args.trials
    alone = cli_runs(b, 1, "one")[0]
    together = cli_runs(b, k, "many")
    b.add("trials", "one run alone", "throughput", alone, "samples/s", note="python -m brnn_core train, 1 epoch")
    b.add("trials", f"{k} runs at once on one device, aggregate", "throughput", sum(together), "samples/s",
          values=together, note="each run's median samples/s, summed")
    b.add("trials", f"{k} at once / one alone", "ratio", sum(together) / alone, "x", target=">= 1",
          met=sum(together) >= alone, note=f"slowest run {min(together):,.0f} samples/s")
    if importlib.util.find_spec("brnn_core.sweep") is None:
        b.add("trials", "TODO: a Ray Tune sweep sharing the GPU (brnn_core.sweep)", "todo", None, "",
              note="brnn_core.sweep is not in this checkout yet; the rows above run the same trials as processes")
        return
    check_sweep(b, k)


def check_sweep(b: Bench, k: int) -> None:
    """A real sweep (`python -m brnn_core sweep`): k trials of 1 epoch with a GPU share of 1/k each."""
    runs_dir = b.tmp / "sweep-runs"
    cmd = [sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(runs_dir), "--data-dir", str(b.data_dir),
           "--set", f"dataset={b.dataset or 'mnist-sample'}", "--set", "epochs=1", "--set", f"device={b.device}",
           "--search", f"seed=grid:{','.join(str(i) for i in range(k))}", "--concurrency", str(k)]
    if b.device.type == "cuda":
        cmd += ["--gpus-per-trial", f"{1 / k:g}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}")
    from brnn_core.runs.rundir import list_runs

    rates = []
    for run in list_runs(runs_dir):
        m = run.metrics()
        rates.append(float(m[m["split"] == "train"]["samples_per_s"].iloc[1:].median()))
    b.add("trials", f"sweep: {len(rates)} trials sharing the device, aggregate", "throughput", sum(rates),
          "samples/s", values=rates, note=f"python -m brnn_core sweep, {wall:.0f}s wall incl. Ray start")


CHECKS = {"crash": check_crash, "speed": check_speed, "accuracy": check_accuracy, "amp": check_amp,
          "picker": check_picker, "trials": check_trials}


def write(b: Bench, started: float) -> list[Path]:
    from brnn_core.benchmarks.machine import machine_info
    from brnn_core.benchmarks.results import clean_rows, format_table, write_results

    meta = machine_info(b.device)
    meta.update(check="bench-gpu", quick=b.quick, data=b.data_note or str(b.data_dir), seeds=b.args.seeds,
                duration_s=round(time.perf_counter() - started, 1))
    if hasattr(os, "getloadavg"):
        meta["load_avg_end"] = [round(v, 2) for v in os.getloadavg()]
    clean_rows(b.rows)
    table = format_table(b.rows, meta)
    print("\n" + table)
    for err in b.errors:
        print(f"error in {err['bench']}: {err['error']}")
    if b.args.no_save:
        return []
    written = write_results(b.args.out, b.rows, meta, b.errors, tag="gpu-check", latest=False)
    md = written[0].with_suffix(".md")
    md.write_text("```\n" + table + "\n```\n" + "".join(f"\nerror in {e['bench']}: {e['error']}\n" for e in b.errors))
    return [*written, md]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke test")
    parser.add_argument("--data-dir", type=Path, default=None, help="datasets folder (default $BRNN_DATA_DIR)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per side of the accuracy comparison")
    parser.add_argument("--trials", type=int, default=4, help="runs sharing the GPU at once")
    parser.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated: {', '.join(CHECKS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        line = no_cuda_line()
        if line:
            print(line)
            return 0
    unknown = [c for c in args.only.split(",") if c and c not in CHECKS]
    if unknown:
        print(f"error: unknown check {', '.join(unknown)}; choose from {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    import torch

    if args.device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
    started = time.perf_counter()
    b = Bench(args)
    try:
        for name in [c for c in CHECKS if c in args.only.split(",")]:
            b.check(name, CHECKS[name])
        written = write(b, started)
    finally:
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(b.tmp, ignore_errors=True)
    if written:
        print(f"\nwritten: {', '.join(str(p) for p in written)}")
    print(f"bench-gpu took {time.perf_counter() - started:.0f}s")
    return 1 if b.errors else 0


if __name__ == "__main__":
    sys.exit(main())
