"""TensorBoard event files (brnn_core.runs.tensorboard_log), read back with TensorBoard's own reader: what a run
writes while it trains, a resume's purge, `--set tensorboard=false`, a machine without the package, an event file
that can no longer be written, and `runs export --format tensorboard` for runs made without them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import psutil
import pytest
import torch
from helpers import REPO, SMALL_MODEL, TINY, cli_env, copy_run, make_run, train_run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata

from brnn_core.cli import main
from brnn_core.config import TrainConfig
from brnn_core.fileio import append_line
from brnn_core.runs.gradient_flow import GradientFlowRecord, read_gradient_flow
from brnn_core.runs.index import RunIndex, seed_group
from brnn_core.runs.rundir import Run
from brnn_core.runs.tensorboard_log import TensorBoardLog, has_events
from brnn_core.training.recorder import Recorder
from brnn_core.training.warmstart import drop_metrics_after

ONE_EPOCH = {"epochs": 1, "drawn_share": 0.0}  # TINY: 8 steps of 512 digits


def read(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def scalars(events: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def texts(events: EventAccumulator, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(f"{tag}/text_summary")]


def session_start(events: EventAccumulator):
    content = events.PluginTagToContent("hparams")[hparams_metadata.SESSION_START_INFO_TAG]
    return hparams_metadata.parse_session_start_info_plugin_data(content)


def rows(run: Run, split: str, column: str) -> list[tuple[int, float]]:
    metrics = run.metrics()
    picked = metrics[metrics["split"] == split]
    return [(int(step), float(value)) for step, value in zip(picked["step"], picked[column], strict=True)]


def test_a_run_writes_what_its_files_say_in_tensorboards_format(finished):
    events = read(finished.path)
    for split, column in [("train", "loss"), ("train", "lr"), ("val", "loss"), ("val", "accuracy"),
                          ("test", "accuracy"), ("test", "loss")]:
        expected = rows(finished, split, column)
        assert len(expected) >= (2 if split == "train" else 1)  # one validation per epoch: the shared run has one
        got = scalars(events, f"{split}/{column}")
        assert [s for s, _ in got] == [s for s, _ in expected], (split, column)
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-5), (split, column)
    said = [text for _, text in texts(events, "events")]
    assert any(text.startswith("**start**") for text in said) and any("**finished**" in t for t in said)
    start = session_start(events)  # the HParams tab: the run's settings, grouped with its seeds
    train = finished.config()["train"]
    assert start.hparams["hidden_size"].number_value == train["hidden_size"] == SMALL_MODEL["hidden_size"]
    assert start.hparams["lr"].number_value == pytest.approx(train["lr"])
    assert start.hparams["dataset"].string_value == "mnist-sample"
    assert start.hparams["tensorboard"].bool_value is True
    assert start.group_name == seed_group(train)


def test_the_runs_folder_as_logdir_names_each_run_by_its_id(tmp_path, finished):
    runs_dir = tmp_path / "runs"
    a, b = (copy_run(finished, runs_dir, f"20000101-000000-mnist-sample-tb0{k}") for k in (1, 2))
    (runs_dir / "sweeps" / "s1").mkdir(parents=True)  # a sweep's folder holds no event files: no run of its own
    logdir = EventMultiplexer().AddRunsFromDirectory(str(runs_dir))
    assert set(logdir.Runs()) == {a.id, b.id}


def test_live_changes_are_text_and_the_lr_is_the_one_applied(runs_dir, data_dir):
    run = make_run(runs_dir, data_dir, base=TINY, **ONE_EPOCH)
    run.send_command("set", field="lr", value=0.005)  # applied before the first step
    assert train_run_dir_of(run, data_dir) == "finished"
    events = read(run.path)
    changes = texts(events, "live_changes")
    assert len(changes) == 1 and "lr 0.01 -> 0.005" in changes[0][1]
    lrs = [lr for _, lr in scalars(events, "train/lr")]
    assert len(lrs) == 8 and lrs == pytest.approx([0.005] * 8)  # TINY's constant schedule, every step logged


def train_run_dir_of(run: Run, data_dir) -> str:
    from brnn_core.training.worker import train_run_dir

    return train_run_dir(run, data_dir=data_dir)


def test_a_resume_purges_the_steps_after_its_checkpoint(runs_dir):
    """A killed worker may have mirrored rows past the checkpoint a resume starts from; the resume drops them
    from metrics.csv (warmstart) and its event file purges them, so TensorBoard shows each step once."""
    run = make_run(runs_dir, base=TINY)
    for step in range(1, 11):
        run.log_metric(step=step, epoch=step / 8, split="train", loss=2.0, lr=0.01, elapsed_s=step)
    TensorBoardLog(run).close()  # the first worker's file, steps 1..10
    # ... made by another process in the second the resume starts in, under a process id that sorts later
    (first,) = run.path.glob("events.out.tfevents.*")
    first.rename(first.with_name(f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.9999999.1"))
    drop_metrics_after(run, 6)  # the resume from a checkpoint at step 6 (warmstart), then its Recorder's log
    resumed = TensorBoardLog(run)
    for step in range(7, 10):
        run.log_metric(step=step, epoch=step / 8, split="train", loss=1.0, lr=0.01, elapsed_s=step)
    resumed.close()
    assert len(list(run.path.glob("events.out.tfevents.*"))) == 2
    assert scalars(read(run.path), "train/loss") == [(s, 2.0) for s in range(1, 7)] + [(s, 1.0) for s in range(7, 10)]


def test_tensorboard_false_writes_no_event_files(runs_dir, data_dir):
    run, state = train_run(runs_dir, data_dir, base=TINY, tensorboard="false", **ONE_EPOCH)
    assert state == "finished" and run.config()["train"]["tensorboard"] is False
    assert not has_events(run.path)
    assert not [e for e in run.events() if e["kind"] == "tensorboard"]


def test_runs_that_differ_only_in_tensorboard_are_one_seed_group():
    assert seed_group({"lr": 0.01, "seed": 1, "tensorboard": True}) == seed_group({"lr": 0.01, "seed": 2})


@pytest.mark.worker
def test_without_the_tensorboard_package_a_run_trains_and_says_so_once(runs_dir, data_dir):
    """brnn_core imports and trains where tensorboard is not installed (the import is made to fail here)."""
    blocked = "import sys; sys.modules['tensorboard'] = None; from brnn_core.cli import main; sys.exit(main())"
    sets = [a for k, v in {**TINY, **ONE_EPOCH}.items() for a in ("--set", f"{k}={v}")]
    done = subprocess.run([sys.executable, "-c", blocked, "train", *sets], cwd=REPO, env=cli_env(runs_dir, data_dir),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (run,) = [Run(p) for p in runs_dir.iterdir() if (p / "config.json").is_file()]
    assert run.status()["state"] == "finished" and not has_events(run.path)
    said = [e["message"] for e in run.events() if e["kind"] == "tensorboard"]
    assert len(said) == 1 and "pip install" in said[0] and "tensorboard" in said[0]


@pytest.fixture
def old_run(tmp_path, finished) -> Run:
    """`finished` as a run made before event files existed: none in its folder, no tensorboard setting."""
    run = copy_run(finished, tmp_path / "runs")
    for path in run.path.glob("events.out.tfevents.*"):
        path.unlink()
    config = run.config()
    del config["train"]["tensorboard"]
    run.config_path.write_text(json.dumps(config))
    return run


def test_runs_export_writes_the_files_a_live_run_would_have(old_run, finished, capsys):
    runs_dir = old_run.path.parent
    assert main(["runs", "export", "--format", "tensorboard", "--runs-dir", str(runs_dir)]) == 0
    assert f"{old_run.id}: written" in capsys.readouterr().out
    exported, live = read(old_run.path), read(finished.path)
    for tag in ("train/loss", "train/lr", "val/loss", "val/accuracy", "test/accuracy"):
        assert scalars(exported, tag) == scalars(live, tag), tag
    started = old_run.stored_status()["started"]  # each row at the run's start + its elapsed_s
    last = old_run.metrics().iloc[-1]
    assert exported.Scalars("test/accuracy")[-1].wall_time == pytest.approx(started + last["elapsed_s"], abs=1e-3)
    assert session_start(exported).group_name == RunIndex(runs_dir).table()["group"].iloc[0]
    assert main(["runs", "export", "--format", "tensorboard", "--runs-dir", str(runs_dir)]) == 0  # again: skipped
    assert "already has TensorBoard files" in capsys.readouterr().out
    assert len(list(old_run.path.glob("events.out.tfevents.*"))) == 1
    assert_flow_mirrored(exported, old_run)  # the gradient flow it recorded, each at the time of its step's row
    flow = exported.Scalars("gradient_flow/layer1_forward/row_read_first")[0]
    assert flow.step == 0 and flow.wall_time == pytest.approx(started, abs=1e-3)  # before the first row: the start


def test_runs_export_into_another_folder_leaves_the_runs_alone(old_run, tmp_path, capsys):
    out = tmp_path / "tb"
    before = sorted(p.name for p in old_run.path.iterdir())
    assert main(["runs", "export", "--format", "tensorboard", "--out", str(out),
                 "--runs-dir", str(old_run.path.parent)]) == 0
    assert sorted(p.name for p in old_run.path.iterdir()) == before
    assert set(EventMultiplexer().AddRunsFromDirectory(str(out)).Runs()) == {old_run.id}
    assert main(["runs", "export", "--format", "tensorboard", "--out", str(old_run.config_path),
                 "--runs-dir", str(old_run.path.parent)]) == 2  # a file
    assert "give a folder" in capsys.readouterr().err


def test_runs_export_skips_a_training_run_and_a_linked_folder(old_run, tmp_path, capsys):
    runs_dir = old_run.path.parent
    me = psutil.Process()  # this process stands in for its live worker, which writes its own files
    old_run.write_status(state="running", pid=me.pid, pid_started=me.create_time(), host=socket.gethostname())
    elsewhere = copy_run(old_run, tmp_path / "elsewhere", "20000101-000000-mnist-sample-link")
    elsewhere.write_status(state="finished")
    (runs_dir / elsewhere.id).symlink_to(elsewhere.path, target_is_directory=True)
    assert main(["runs", "export", "--format", "tensorboard", "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert f"{old_run.id}: skipped: still running" in out and f"{elsewhere.id}: skipped: its folder leads out" in out
    assert not has_events(old_run.path) and not has_events(elsewhere.path)


# ------------------------------------------------------------------ the gradient flow through time
def flow_ends(run: Run) -> dict[str, list[tuple[int, float, float]]]:
    """From gradient_flow.csv: 'layer1_forward' -> [(step, ‖∂ℓ/∂h‖ at the row read first, at the row read last)]."""
    frame = read_gradient_flow(run.gradient_flow_path)
    ends: dict[str, list[tuple[int, float, float]]] = {}
    for (step, layer, direction), rows in frame.groupby(["step", "layer", "direction"]):
        norms = rows.sort_values("row")["grad_norm"].tolist()
        first, last = (norms[0], norms[-1]) if direction == "forward" else (norms[-1], norms[0])
        ends.setdefault(f"layer{layer}_{direction}", []).append((int(step), first, last))
    return ends


def assert_flow_mirrored(events: EventAccumulator, run: Run) -> None:
    ends = flow_ends(run)
    assert ends, "the run recorded no gradient flow"
    for name, expected in ends.items():
        tag = f"gradient_flow/{name}"
        assert [s for s, _ in scalars(events, f"{tag}/row_read_first")] == [s for s, _, _ in expected]
        assert [v for _, v in scalars(events, f"{tag}/row_read_first")] == pytest.approx([f for _, f, _ in expected])
        assert [v for _, v in scalars(events, f"{tag}/row_read_last")] == pytest.approx([la for _, _, la in expected])
        assert [v for _, v in scalars(events, f"{tag}/first_over_last")] == \
            pytest.approx([f / la for _, f, la in expected], rel=1e-5)
        step, table = texts(events, f"{tag}/profile")[-1]
        frame = read_gradient_flow(run.gradient_flow_path)
        latest = frame[(frame["step"] == step) & (frame["layer"] == int(name[5])) &
                       (frame["direction"] == name.split("_")[1])].sort_values("row")
        cells = [line.strip("| ").split(" | ") for line in table.splitlines() if line[:3].strip("| ").isdigit()]
        assert cells == [[str(row), f"{v:.3g}"] for row, v in enumerate(latest["grad_norm"])]
    layout = layout_pb2.Layout()
    layout.ParseFromString(events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    [category] = layout.category
    assert category.title == "Gradient flow through time"
    assert [list(chart.multiline.tag) for chart in category.chart] == [[r"gradient_flow/.*/row_read_"],
                                                                       [r"gradient_flow/.*/first_over_last"]]


def test_the_gradient_flow_is_scalars_per_layer_and_direction_and_a_profile_table(finished):
    assert_flow_mirrored(read(finished.path), finished)  # two layers, two directions: four of each
    assert len(flow_ends(finished)) == 4


def test_a_measurement_read_in_two_parts_is_written_once_whole(runs_dir):
    """A live mirror may read a measurement's lines over two looks at the file: it waits for the last row."""
    run = make_run(runs_dir, base=TINY)
    norms = tuple(0.5 ** (27 - t) for t in range(28))  # a plain RNN's fading: row 0 gets 2^-27 of row 27's
    lines = [GradientFlowRecord(4, 0.5, 1, direction, norms if direction == "forward" else norms[::-1]).lines()
             for direction in ("forward", "backward")]
    log = TensorBoardLog(run)
    append_line(run.gradient_flow_path, "step,epoch,layer,direction,row,grad_norm\n" + "\n".join(lines[0][:10]))
    log.follow()
    log.writer.flush()
    assert "gradient_flow/layer1_forward/row_read_first" not in read(run.path).Tags()["scalars"]
    append_line(run.gradient_flow_path, "\n".join(lines[0][10:] + lines[1]))
    log.close()
    events = read(run.path)
    for direction in ("forward", "backward"):
        tag = f"gradient_flow/layer1_{direction}"
        assert scalars(events, f"{tag}/row_read_first") == [(4, pytest.approx(2.0 ** -27))]
        assert scalars(events, f"{tag}/row_read_last") == [(4, 1.0)]
        assert scalars(events, f"{tag}/first_over_last") == [(4, pytest.approx(2.0 ** -27))]
    assert_flow_mirrored(events, run)


def test_a_failed_event_file_write_is_one_error_in_the_caller_and_no_traceback(tmp_path, monkeypatch):
    """TensorBoard's writer thread keeps a write failure for the caller's next flush; it must not also escape the
    thread (Python prints such an exception's traceback into the terminal of the run: a runs folder made read-only
    or a full disk mid-run). The thread's exceptions are watched the way Python reports them: threading.excepthook."""
    import threading

    from brnn_core.runs.tensorboard_log import summary_writer

    escaped = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    writer = summary_writer(tmp_path, flush_secs=3600)
    event_file = next(tmp_path.glob("events.out.tfevents.*"))
    event_file.unlink()
    event_file.mkdir()  # every later append to it fails with an OSError, for root too
    writer.add_scalar("x", 1.0, 1)
    with pytest.raises(OSError):
        writer.flush()
    with pytest.raises(OSError):
        writer.close()
    assert escaped == []


def recorder_with_a_broken_event_file(run: Run) -> Recorder:
    """A Recorder for `run` whose event file can no longer be written (a folder, for root too), as a runs folder
    made read-only or a full disk leaves it mid-run."""
    model = torch.nn.Linear(1, 1)
    recorder = Recorder(run, TrainConfig.from_dict(run.config()["train"]), model,
                        torch.optim.SGD(model.parameters(), lr=0.01), classes=[str(d) for d in range(10)],
                        steps_per_epoch=8)
    (event_file,) = run.path.glob("events.out.tfevents.*")
    event_file.unlink()
    event_file.mkdir()
    run.log_metric(step=1, epoch=1 / 8, split="train", loss=2.0, lr=0.01, elapsed_s=1.0)
    return recorder


def test_an_event_file_that_cannot_be_written_stops_the_mirror_with_one_warning(runs_dir):
    run = make_run(runs_dir, base=TINY)
    recorder = recorder_with_a_broken_event_file(run)
    recorder.mirror()
    recorder.close()
    assert recorder.tensorboard is None
    (warning,) = [e for e in run.events() if e["kind"] == "warning"]
    assert warning["message"].startswith("TensorBoard files stop here (") and "own files go on" in warning["message"]


def test_closing_a_recorder_whose_folder_takes_no_writes_at_all_does_not_raise(runs_dir):
    """The worker closes its Recorder after it recorded the run's end (or failed to); with events.jsonl as
    unwritable as the event file, the TensorBoard warning is lost, but the error must not hide how the run ended."""
    run = make_run(runs_dir, base=TINY)
    recorder = recorder_with_a_broken_event_file(run)
    run.events_path.unlink(missing_ok=True)
    run.events_path.mkdir()
    recorder.close()
    assert recorder.tensorboard is None
