"""Runs page, headless with Streamlit's AppTest: the table, one run's report, deleting a run."""

from __future__ import annotations

import os
import time

import psutil
from helpers import copy_run, no_exception, open_page, rerun_until, save_rendered
from streamlit.testing.v1 import AppTest


def runs_page() -> AppTest:
    return open_page("pages/runs.py", "Runs")


def test_no_runs(dirs):
    at = runs_page()
    assert any("No runs yet" in i.value for i in at.info)
    assert not at.dataframe


def test_table_lists_every_run(dirs, finished):
    runs_dir, _ = dirs
    a = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-aaaa")
    b = copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    at = runs_page()
    at.toggle(key="runs_group_seeds").set_value(False).run()  # two copies of a run are a seed group: one row
    table = at.dataframe(key="runs_table").value
    assert list(table["run_id"]) == [b.id, a.id]  # newest first
    assert set(table["state"]) == {"finished"}
    assert list(table["hidden"]) == [16, 16]
    assert (table["best_val_acc"] > 10).all()  # shown in percent
    inspect = at.selectbox(key="inspect")
    assert inspect.value == b.id and inspect.options == [b.id, a.id]
    assert any(m.label == "Test accuracy" for m in at.metric)  # the finished run's report


def test_inspect_another_run(dirs, finished):
    runs_dir, _ = dirs
    a = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-aaaa")
    copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    at = runs_page()
    at.selectbox(key="inspect").select(a.id).run()
    no_exception(at)
    assert any(c.label == f"Yes, delete {a.id} and its checkpoints" for c in at.checkbox)
    assert any(str(a.path.resolve()) in c.value for c in at.code)


def test_report_can_be_computed_from_a_checkpoint(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    (run.path / "report.json").unlink()
    (run.path / "misclassified.npy").unlink()
    at = runs_page()
    assert any("No test report yet" in i.value for i in at.info)
    compute = next(b for b in at.button if b.label == "Compute the test report")
    compute.click().run()
    no_exception(at)
    assert (run.path / "report.json").is_file() and (run.path / "misclassified.npy").is_file()
    assert any(m.label == "Test accuracy" for m in at.metric)


def test_misclassified_images_are_kept_with_the_report(dirs, finished):
    """The Runs page shows the most confident mistakes from the pixels the worker kept beside report.json:
    no dataset is loaded for them (a third of a second on a fresh server)."""
    import numpy as np

    from brnn_core.data.loading import load_dataset
    from brnn_core.training.reports import THUMBNAILS_KEPT, read_report, read_thumbnails

    runs_dir, data_dir = dirs
    run = copy_run(finished, runs_dir)
    wrong = read_report(run)["misclassified"][:THUMBNAILS_KEPT]
    kept = read_thumbnails(run, len(wrong))
    test_x = load_dataset("mnist-sample", data_dir).test_x.numpy()
    assert kept.dtype == np.uint8 and len(kept) == len(wrong) > 0
    np.testing.assert_array_equal(kept, test_x[[item["index"] for item in wrong]])
    assert read_thumbnails(run, THUMBNAILS_KEPT + 1) is None  # asked for more than kept: the caller loads them
    at = runs_page()
    assert len(at.get("image")) == len(wrong)  # the report tab shows every one of them


def test_delete_needs_the_confirmation_checkbox(dirs, finished):
    runs_dir, _ = dirs
    keep = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-aaaa")
    doomed = copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    at = runs_page()
    assert at.selectbox(key="inspect").value == doomed.id
    delete = next(b for b in at.button if b.label == "Delete run")
    assert delete.disabled  # (AppTest, like a browser, refuses to click it)

    at.checkbox(key=f"sure_{doomed.id}").check().run()
    delete = next(b for b in at.button if b.label == "Delete run")
    assert not delete.disabled
    delete.click().run()
    no_exception(at)
    assert not doomed.path.exists()
    assert keep.path.is_dir()
    assert not [p for p in runs_dir.iterdir() if p.name.startswith(".deleting-")]
    assert any(f"Deleted run {doomed.id}" in s.value for s in at.success)
    assert list(at.dataframe(key="runs_table").value["run_id"]) == [keep.id]


def test_an_active_run_cannot_be_deleted(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    me = psutil.Process(os.getpid())  # a live process stands in for the worker
    run.write_status(state="running", pid=me.pid, pid_started=me.create_time(), heartbeat=time.time())
    at = runs_page()
    assert any("Stop the run before deleting it" in c.value for c in at.caption)
    at.checkbox(key=f"sure_{run.id}").check().run()
    assert next(b for b in at.button if b.label == "Delete run").disabled
    assert run.path.is_dir()


def test_table_scores_each_run_on_my_drawings(dirs, finished, sample):
    """From 10 saved drawings on, each run's best.pt is scored on them (a column of the table)."""

    from brnn_core.inference.scores import checkpoint_accuracy

    runs_dir, data_dir = dirs
    run = copy_run(finished, runs_dir)
    save_rendered(data_dir, sample, 9)
    at = runs_page()
    assert at.dataframe(key="runs_table").value["my_drawings_acc"].isna().all()  # 9 drawings: no score yet
    save_rendered(data_dir, sample, 10)  # 10 more (the first 9 digits again under new ids, and one): 19
    at.run()
    no_exception(at)
    acc, n, _ = checkpoint_accuracy(run.best_ckpt, data_dir)
    assert n == 19
    rerun_until(at, lambda a: a.dataframe(key="runs_table").value["my_drawings_acc"].notna().all(),
                "the background scorer")  # the page never evaluates; a thread stores the score, a rerun shows it
    assert at.dataframe(key="runs_table").value["my_drawings_acc"].tolist() == [100 * acc]
    assert (run.checkpoint_dir / "best.pt.drawings.json").is_file()  # kept beside the checkpoint


def test_report_of_a_run_fine_tuned_on_my_drawings(dirs, finished, sample):
    """A real fine-tuning run (weights from the finished run, drawings mixed in): its report says before/after."""
    from helpers import train_run

    runs_dir, data_dir = dirs
    save_rendered(data_dir, sample, 15)
    run, state = train_run(runs_dir, data_dir, hidden_size=16, epochs=1, my_drawings=0.2,
                           init_from=str(finished.best_ckpt))
    assert state == "finished", run.status()
    entry = run.config()["my_drawings"]
    at = runs_page()
    text = "\n".join(m.value for m in at.markdown)
    # what the numbers are, said in words: how many drawings, how often each was shown, their share
    assert f"**Your drawings**: {entry['train']} of your drawings mixed into training, each shown {entry['repeats']} " \
           f"times an epoch (20% of its images); held-out drawings: {100 * entry['before']:.1f}% -> " in text, text
