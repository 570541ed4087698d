"""How a run that trained ends: diverged (the last good checkpoints kept, what to change), stopped on request
(last.pt saved where it stands) or finished (the test-set report with the best weights; with drawings mixed in,
their held-out accuracy; when fine-tuned, the validation accuracy before and after).

`Ending` is a part of `TrainingSession` (training.session): it writes the run's last events and status through
the session, which owns them.
"""

from __future__ import annotations

import dataclasses
import time

from brnn_core.checkpoint import load_checkpoint
from brnn_core.states import State
from brnn_core.training.drawing_mix import DrawingMix
from brnn_core.training.engine import FitResult, eval_batch_size_for, evaluate, weights_finite
from brnn_core.training.loss_scaling import LossScaler
from brnn_core.training.reports import write_report
from brnn_core.training.splits import Splits

EVALUATING = "evaluating the best checkpoint on the test set"  # the status message just before the test row


class Ending:
    """The training session's ends, one per outcome (mixed into `TrainingSession`)."""

    def end_diverged(self, result: FitResult) -> str:
        """The loss blew up (NaN, a finite explosion, or fp16 steps skipped): keep the last good checkpoints
        and say what to change."""
        run, cfg = self.run, self.cfg
        saved = [p.name for p in (run.last_ckpt, run.best_ckpt) if p.is_file()]
        untrained = run.last_ckpt.is_file() and load_checkpoint(run.last_ckpt).step == 0 and len(saved) == 1
        decay = f", weight decay (now {cfg.weight_decay:g})" if cfg.weight_decay > 0 else ""
        if untrained:
            kept = "last.pt holds only the untrained starting weights (it diverged before the first save)."
        elif saved:
            kept = (f"{' and '.join(saved)} {'hold' if len(saved) > 1 else 'holds'} the last good weights "
                    "saved before it diverged.")
        else:
            kept = "no checkpoint was saved before it diverged."
        stuck = self.scaler.stuck_message() if isinstance(self.scaler, LossScaler) else None
        if stuck:
            message = f"diverged at step {result.step}: {stuck}; {kept}"
        else:
            message = (f"diverged at step {result.step}: {result.reason or 'the loss became NaN or infinite'}. "
                       f"Lower the learning rate (now {self.live.lr:g}){decay} or turn on gradient clipping; {kept}")
        run.log_event("diverged", message, step=result.step)
        self._write(state=State.DIVERGED, message=message, ended=time.time(), step=result.step)
        return State.DIVERGED

    def end_stopped(self, result: FitResult) -> str:
        """Stopped on request: save where it stands so a resume continues from exactly here.

        A stop a scheduler sent ({"source": "asha", "reason": "..."}) gives the message its reason."""
        if not weights_finite(self.model):  # blown up since the last log: keep the last good last.pt instead
            return self.end_diverged(dataclasses.replace(result, reason="the weights became NaN or infinite"))
        reason = self.stop_reason
        self.position.epoch, self.position.batch = result.epoch, result.batch_in_epoch
        self.position.step = result.step
        self.save_last()
        why = f"{reason['reason']}; " if reason and reason.get("reason") else ""
        self.run.log_event("stopped", f"{why}stopped at step {result.step}; last.pt saved, resume continues from "
                                      "here", step=result.step, **({"source": reason.get("source")} if reason else {}))
        said = f"{reason['reason']} (step {result.step})" if why else \
            f"stopped at step {result.step}, checkpoint saved"
        self._write(state=State.STOPPED, message=said, ended=time.time(), step=result.step,
                    stopped_by=(reason or {}).get("source"))
        return State.STOPPED

    def end_finished(self, splits: Splits, result: FitResult, *, mix: DrawingMix | None = None,
                     drawings: dict | None = None, start_val_acc: float | None = None,
                     start_per_class: list[float] | None = None) -> str:
        """All epochs done: the final report on the test set, with the best weights; with drawings mixed in,
        also their held-out accuracy before and after; when fine-tuned, the validation accuracy before and
        after, overall and per class (a fine-tune must not make the model forget a class it knew)."""
        run, cfg, model = self.run, self.cfg, self.model
        self._write(message=EVALUATING, step=result.step)
        if run.best_ckpt.is_file():
            model.load_state_dict(load_checkpoint(run.best_ckpt).model_state)
        eval_batch = eval_batch_size_for(splits.test_x.device, cfg.eval_batch_size)
        test = evaluate(model, splits.test_x, splits.test_y, batch_size=eval_batch, amp=cfg.amp,
                        num_classes=len(splits.classes))
        run.log_test_row(step=result.step, epoch=result.epoch, loss=test.loss, accuracy=test.accuracy,
                         elapsed_s=self.elapsed_s())  # one: a resume after a kill here tests again
        my_scores, summary = mix.finish(model, drawings) if mix is not None else (None, "")
        extra = {"my_drawings": my_scores} if my_scores else {}
        if start_val_acc is not None:
            after = evaluate(model, splits.val_x, splits.val_y, batch_size=eval_batch,
                             num_classes=len(splits.classes))
            end_val = after.accuracy
            extra["validation"] = {"before": start_val_acc, "after": end_val, "per_class_after": after.per_class,
                                   **({"per_class_before": start_per_class} if start_per_class else {})}
            summary += ("; " if summary else "") + \
                f"validation accuracy: {100 * start_val_acc:.1f}% -> {100 * end_val:.1f}%"
        write_report(run, test, splits.test_y.cpu(), splits.classes, cfg.dataset, extra={**extra, "amp": cfg.amp},
                     images=splits.test_x)
        message = f"finished: test accuracy {100 * test.accuracy:.2f}% ({len(splits.test_y)} images)" \
            + (f"; {summary}" if summary else "")
        run.log_event("finished", message, step=result.step)
        self._write(state=State.FINISHED, message=message, ended=time.time(), step=result.step,
                    test_acc=test.accuracy, test_loss=test.loss)
        self.printer("test", {"loss": test.loss, "accuracy": test.accuracy, "per_class": test.per_class})
        return State.FINISHED
