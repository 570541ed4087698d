"""The *eval* rows: a whole test set through engine.evaluate vs the blog's evaluation loop."""

from __future__ import annotations

from benchmarks.harness.child import children
from benchmarks.harness.context import Context
from benchmarks.harness.rows import Row, alternate, ratio_row, stat_row, throughput_row
from brnn_core.config import TrainConfig


def bench_eval(ctx: Context) -> list[Row]:
    s = ctx.sizes
    name, x, _ = ctx.eval_data()
    spec = {"eval_dataset": name}
    specs = {"engine.evaluate": ("engine-eval", ctx.device, ctx.tuned, spec),
             "blog eval loop": ("blog-eval", ctx.device, False, spec)}
    # the reduced-precision path, whose accuracy effect docs/decisions/005-amp-off-by-default.md records
    low = next((m for m in ctx.amp_modes() if m != "off"), None)
    if low:
        specs[f"engine.evaluate, amp {low}"] = ("engine-eval", ctx.device, ctx.tuned, {**spec, "amp": low})
    local = "eval" in s.local_sides
    with children(specs, local=local) as sides:
        for side in sides.values():
            side.call("eval", warmup=True)
        res = alternate({k: (lambda side=side: side.call("eval")["seconds"]) for k, side in sides.items()},
                        s.eval_reps, ctx.log, "eval seconds ")
    n = len(x)
    eng_sps = [n / t for t in res["engine.evaluate"]]
    blog_sps = [n / t for t in res["blog eval loop"]]
    what = f"{name} test set, {n} images"
    eng, bl = res["engine.evaluate"], res["blog eval loop"]
    rows = [
        stat_row("eval", "engine.evaluate", "time", eng, "s",
                 f"{what}, eval batch {TrainConfig().eval_batch_size} (the default)"),
        throughput_row("eval", "engine.evaluate", eng_sps, "probabilities and predictions kept, as the worker does"),
        stat_row("eval", "blog eval loop", "time", bl, "s", f"{what}, DataLoader batch 100, loss.item() per batch"),
        throughput_row("eval", "blog eval loop", blog_sps,
                       "in the suite's process (--quick)" if local else "a plain Python process"),
        ratio_row("eval", "engine / blog", eng_sps, blog_sps, target=2.0, note="alternated, fp32 both"),
    ]
    if low:
        case = f"engine.evaluate, amp {low}"
        low_sps = [n / t for t in res[case]]
        rows += [
            throughput_row("eval", case, low_sps,
                           f"autocast {low}; accuracy effect: docs/decisions/005-amp-off-by-default.md"),
            ratio_row("eval", f"engine {low} / blog", low_sps, blog_sps, target=2.0,
                      note=f"alternated; the engine in {low} autocast, the blog in fp32"),
        ]
    return rows


