"""Progress, time left and the lr plan, said the same way by the CLI's progress line and the Train page."""

from __future__ import annotations

from brnn_core.schedule import planned_lr


def eta_seconds(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the average rate so far; None before any step has been timed."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    return max(total - done, 0) / rate if rate > 0 else None


def format_eta(seconds: float | None) -> str:
    """'0:04:07' (h:mm:ss); '…' while unknown."""
    if seconds is None:
        return "…"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_text(status: dict) -> str:
    """'epoch 2/5 · step 90/225 · 1,234 samples/s · ETA 0:00:41' from a status.json ('' before it knows)."""
    done, total = status.get("step") or 0, status.get("total_steps") or 0
    if not total:
        return ""
    live = status.get("live") or {}
    epochs = live.get("epochs", "?")
    epoch = min((status.get("epoch") or 0) + 1, epochs if isinstance(epochs, int) else 1)
    sps = status.get("samples_per_s")
    return (f"epoch {epoch}/{epochs} · step {done}/{total}" + (f" · {sps:,.0f} samples/s" if sps else "")
            + f" · ETA {format_eta(eta_seconds(done, total, status.get('elapsed_s') or 0.0))}")


def lr_plan(config: dict, status: dict, events: list[dict], *, start: int = 0) -> tuple[list[int], list[float]]:
    """A run's lr from `start` to its planned last step (schedule.planned_lr), from its config.json,
    status.json and events.jsonl; empty until the worker has said how many steps an epoch has."""
    train, spe = config.get("train", {}), status.get("steps_per_epoch")
    if not spe or "lr" not in train:
        return [], []
    changes = [(int(e["step"]), e["field"], e["new"]) for e in events
               if e.get("kind") == "set" and e.get("field") in ("lr", "epochs") and e.get("step") is not None]
    return planned_lr(train.get("lr_schedule", "constant"), float(train["lr"]), int(train.get("epochs", 1)),
                      int(spe), changes, start=start)
