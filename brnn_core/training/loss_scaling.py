"""fp16 loss scaling that counts what it skips, so a run whose steps all overflow says so.

`torch.amp.GradScaler` skips an optimizer step whenever the scaled gradients hold inf/NaN and halves the
scale; a few skips at the start are normal (the scale starts high and backs off). A run where most
steps overflow, step after step, trains nothing while its loss may look finite. `LossScaler` counts
skipped steps on the device (no host sync per step; read when the loss is logged), keeps the count in
its `state_dict` (saved in last.pt, so a resumed run goes on counting), and `stuck_message()` says
when most recent steps were skipped: `engine.train_one_epoch` then ends the run as diverged.
"""

from __future__ import annotations

from collections import deque

import torch

STUCK_WINDOW = 100  # steps looked back over
STUCK_FRACTION = 0.5  # more skipped than this share of them: the run is stuck


class LossScaler(torch.amp.GradScaler):
    """A GradScaler that counts the optimizer steps it skipped (`skipped_steps()`)."""

    def __init__(self, device: str = "cuda", **kwargs):
        super().__init__(device, **kwargs)
        self.steps = 0  # update() calls: one per training step
        self._skipped: torch.Tensor | None = None  # on the scale's device
        self._skipped0 = 0  # restored from a checkpoint
        self._history: deque[tuple[int, int]] = deque(maxlen=4096)  # (steps, skipped) at each read

    def update(self, new_scale=None) -> None:
        prev = self._scale.clone() if (self._enabled and self._scale is not None and new_scale is None) else None
        super().update(new_scale)
        self.steps += 1
        if prev is not None:
            # update() lowers the scale exactly when this step found inf/NaN gradients (and step() skipped it)
            dropped = (self._scale < prev).to(torch.int64)
            self._skipped = dropped if self._skipped is None else self._skipped + dropped

    def skipped_steps(self) -> int:
        """Steps skipped so far, over the whole run (a host sync: call it when logging, not every step). Read
        again at the same step (the engine's check, the recorder's status and event), it is the last read's."""
        if self._history and self._history[-1][0] == self.steps:
            return self._history[-1][1]  # update() has not run since: the count cannot have changed
        skipped = self._skipped0 + (int(self._skipped.item()) if self._skipped is not None else 0)
        self._history.append((self.steps, skipped))
        return skipped

    def recent(self, window: int = STUCK_WINDOW) -> tuple[int, int]:
        """(skipped, steps) over at least the last `window` steps (fewer if the run is younger)."""
        now_skipped = self.skipped_steps()
        then_steps, then_skipped = 0, 0
        for steps, skipped in reversed(self._history):
            if self.steps - steps >= window:
                then_steps, then_skipped = steps, skipped
                break
        return now_skipped - then_skipped, self.steps - then_steps

    def stuck_message(self) -> str | None:
        """Why this run is stuck (most recent steps skipped), or None while it trains."""
        skipped, steps = self.recent()
        if steps < STUCK_WINDOW or skipped <= STUCK_FRACTION * steps:
            return None
        return (f"fp16 loss scaling skipped {skipped} of the last {steps} steps: the gradients overflow fp16 even "
                f"at a loss scale of {self.get_scale():g}, so the weights stopped changing. Train with amp=bf16 "
                "or amp=off, or lower the learning rate")

    def state_dict(self) -> dict:
        state = super().state_dict()
        if state:
            state.update(skipped_steps=self.skipped_steps(), steps=self.steps)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._skipped, self._skipped0 = None, int(state_dict.get("skipped_steps", 0))
        self.steps = int(state_dict.get("steps", 0))
        self._history.clear()
