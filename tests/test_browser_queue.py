"""The queue on the Train page, in a real browser: while a run trains, Start with two seeds queues two runs, the
page says where the selected one stands in line, and Cancel takes it out of the queue.

The run "training" is a finished tiny run whose status names this test process, which also holds the cpu's
device slot for the module: the queued runs' real workers wait behind it. Skipped without Chromium unless
BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import socket
import time

import psutil
import pytest
from browser_server import browser_page, require_browser, start_server, stop_server
from helpers import REPO, TINY, kill_workers, train_run, wait_for, wait_for_state

from brnn_core.runs import job_queue as queue
from brnn_core.runs.rundir import list_runs

require_browser()  # skips the module without Chromium and Playwright

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.worker]
SHOTS = REPO / "test-output" / "screenshots"
T = 60_000  # ms


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    """(server, runs folder, the id of the run that holds the cpu)."""
    root = tmp_path_factory.mktemp("queue")
    runs, data = root / "runs", root / "data"
    busy, state = train_run(runs, data, base=TINY, epochs=1)
    assert state == "finished", busy.status()
    me = psutil.Process()
    busy.write_status(state="running", message="epoch 1/5", pid=me.pid, pid_started=me.create_time(), slot="cpu",
                      host=socket.gethostname(), heartbeat=time.time(), ended=None)
    slot = queue.try_take(runs, "cpu")
    assert slot is not None
    srv = start_server(runs, data, root / "server.log", env={"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    try:
        yield srv, runs, busy.id
    finally:
        stop_server(srv)
        kill_workers(runs)
        slot.release()


def test_start_while_a_run_trains_queues_and_cancel_takes_it_out(busy_server):
    from playwright.sync_api import expect

    expect.set_options(timeout=T)
    srv, runs, busy = busy_server
    with browser_page(SHOTS / "train-queue-last-state.png", T) as page:
        page.goto(srv.url)
        expect(page.get_by_text(f"Run {busy} is running").first).to_be_visible()
        page.get_by_text("Advanced", exact=True).first.click()  # the expander (the caption names it too)
        seeds = page.get_by_role("textbox", name="Seeds")
        seeds.fill("3,4")
        seeds.press("Enter")
        start = page.get_by_role("button", name="Start training")
        expect(start).to_be_enabled()
        start.click()
        expect(page.get_by_text("Queued ").first).to_be_visible()
        queued = sorted((r for r in list_runs(runs) if r.id != busy), key=lambda r: r.config()["train"]["seed"])
        assert [r.config()["train"]["seed"] for r in queued] == [3, 4]
        expect(page.get_by_text(f"queued: 1st in line, behind run {busy} on cpu").first).to_be_visible()
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_text("cancelled while queued").first).to_be_visible()
        assert wait_for_state(queued[0], "stopped", 60)["message"] == "cancelled while queued"
        wait_for(lambda: queued[1].status().get("message") == f"queued: 1st in line, behind run {busy} on cpu",
                 60, "the second seed to move up")
        assert queued[0].metrics().empty and queued[1].metrics().empty  # neither trained
