"""The blog's crash scenario on a real CUDA GPU, and brnn_core surviving it.

Run on a machine with an NVIDIA GPU:  python bench/cuda_check.py [--out bench/results/cuda_check.json]

1. The blog's loop WITHOUT its fix: train, model.eval() to validate, train again. On CUDA,
   cuDNN's LSTM refuses the second backward ("cudnn RNN backward can only be called in
   training mode"); we expect to see exactly that error.
2. brnn_core's engine doing the same sequence (train_one_epoch, evaluate, train_one_epoch),
   also after an explicit model.eval(): it must run.
3. GPU throughput of brnn_core's training loop (samples/s), fp32, bf16 and fp16 autocast.

Data: random uint8 images are enough to show the error and to time the loop (the loop's
speed does not depend on pixel values), so nothing has to be downloaded on the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from brnn_core.engine import evaluate, train_one_epoch  # noqa: E402
from brnn_core.model import BiLSTM, ModelConfig  # noqa: E402


def blog_scenario_without_fix(device: torch.device) -> str:
    """The blog's sequence with the bug: returns the error text, or 'no error'."""
    torch.manual_seed(0)
    model = BiLSTM(ModelConfig(head="last")).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.rand(100, 28, 28, device=device)
    y = torch.randint(0, 10, (100,), device=device)
    for _ in range(3):  # "epoch 1"
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()  # validation, and the blog never calls model.train() again
    with torch.no_grad():
        model(x)
    try:
        loss = F.cross_entropy(model(x), y)  # "epoch 2"
        opt.zero_grad()
        loss.backward()
        return "no error"
    except RuntimeError as exc:
        return str(exc).splitlines()[0]


def engine_scenario(device: torch.device) -> str:
    torch.manual_seed(0)
    model = BiLSTM(ModelConfig()).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    images = torch.randint(0, 256, (2000, 28, 28), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 10, (2000,), device=device)
    batches = lambda: torch.randperm(2000, device=device).split(100)  # noqa: E731
    train_one_epoch(model, opt, images, labels, batches())
    evaluate(model, images, labels)
    model.eval()  # even a caller that leaves the model in eval mode cannot break the next epoch
    train_one_epoch(model, opt, images, labels, batches())
    return "ok"


def throughput(device: torch.device, amp: str, n: int = 60000, batch: int = 100) -> float:
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = BiLSTM(ModelConfig()).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 10, (n,), device=device)
    train_one_epoch(model, opt, images, labels, torch.randperm(n, device=device)[:20 * batch].split(batch), amp=amp)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    train_one_epoch(model, opt, images, labels, torch.randperm(n, device=device).split(batch), amp=amp,
                    log_interval=100)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/cuda_check.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: this check needs an NVIDIA GPU")
        return 1
    device = torch.device("cuda")
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M")}
    result["blog_without_fix"] = blog_scenario_without_fix(device)
    result["brnn_core_train_eval_train"] = engine_scenario(device)
    for amp in ("off", "bf16", "fp16"):  # fp16 with loss scaling (train_one_epoch makes a GradScaler)
        result[f"train_samples_per_s_{amp}"] = round(throughput(device, amp))
    result["max_memory_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    for key, value in result.items():
        print(f"{key:32} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    ok = "training mode" in result["blog_without_fix"] and result["brnn_core_train_eval_train"] == "ok"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
