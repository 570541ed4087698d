"""The recipe search behind today's defaults: 5 epochs of the blog's settings on mnist-sample, one variant at a time.

    .venv/bin/python bench/recipe_search.py --variants cos,cos_fg_norm --seeds 0,1,2 --threads 1

Each variant trains the blog's model (hidden 128, 2 layers, batch 100, Adam, peak lr 0.01, augment medium) with
`engine.fit` directly and scores the final weights on the real MNIST test digits in ../shared/data (writers the
sample does not have
only measured, never trained or selected on). Variants: a cosine schedule (cos), gradient
clipping, an EMA of the weights, elastic distortions (Simard et al. 2003), dropout, label smoothing, forget-gate
bias 1 (fg), orthogonal recurrent weights, a longer warm-up, standardised inputs (norm). The winners became
the defaults (lr_schedule=cosine, input_scale=standard, forget gates open)
the table is in bench/README.md,
"Handwriting". The model and engine are the product's at the time each was measured
`norm`, `fg` and the
schedule are now built in, so with today's code they apply twice: rerun this at the commit that added it.
"""
import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from brnn_core.data.augment import Augmenter  # noqa: E402
from brnn_core.data.batching import split_train_val  # noqa: E402
from brnn_core.data.loading import load_dataset  # noqa: E402
from brnn_core.model import BiLSTM, ModelConfig  # noqa: E402
from brnn_core.training.engine import FitHooks, evaluate, fit, make_optimizer  # noqa: E402

_CE = F.cross_entropy


def shape(step, total, warm):
    if step < warm:
        return 0.1 + 0.9 * step / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * p))

def elastic(x, gen, alpha=34.0, sigma=4.0, frac=0.5):
    # x: (B, 28, 28) float; Simard: random displacement fields smoothed by a gaussian, scaled by alpha (pixels)
    B = x.shape[0]
    d = torch.rand(B, 2, 28, 28, generator=gen) * 2 - 1
    k = int(4 * sigma) | 1
    ax = torch.arange(k) - k // 2
    g = torch.exp(-(ax.float() ** 2) / (2 * sigma ** 2))
    g = g / g.sum()
    d = F.conv2d(d.view(B * 2, 1, 28, 28), g.view(1, 1, 1, k), padding=(0, k // 2))
    d = F.conv2d(d, g.view(1, 1, k, 1), padding=(k // 2, 0)).view(B, 2, 28, 28) * alpha
    ys, xs = torch.meshgrid(torch.arange(28.), torch.arange(28.), indexing="ij")
    gx = (xs + d[:, 0]) / 27 * 2 - 1
    gy = (ys + d[:, 1]) / 27 * 2 - 1
    out = F.grid_sample(x.unsqueeze(1), torch.stack([gx, gy], -1), align_corners=True).squeeze(1)
    keep = torch.rand(B, generator=gen) >= frac
    return torch.where(keep.view(-1, 1, 1), x, out)

def run(variant, seed, ds, test_x, test_y, epochs=5):
    import functools
    F.cross_entropy = functools.partial(_CE, label_smoothing=variant.get("ls", 0.0))
    torch.manual_seed(seed)
    tr, va = split_train_val(len(ds.train_y), 0.1, seed)
    tx, ty, vx, vy = ds.train_x[tr], ds.train_y[tr], ds.train_x[va], ds.train_y[va]
    mc = ModelConfig(hidden_size=128, num_layers=2, num_classes=10, dropout=variant.get("dropout", 0.0), head="bidir")
    model = BiLSTM(mc)
    if variant.get("norm"):
        inner = model.forward
        model.forward = lambda x, lengths=None: inner((x - 0.1307) / 0.3081, lengths)
    if variant.get("fg") or variant.get("ortho"):
        with torch.no_grad():
            for name, p in model.lstm.named_parameters():
                if variant.get("fg") and name.startswith("bias_ih"):
                    h = p.shape[0] // 4
                    p[h:2 * h].fill_(1.0)  # forget gate (i, f, g, o order)
                if variant.get("ortho") and name.startswith("weight_hh"):
                    h = p.shape[0] // 4
                    for k in range(4):
                        torch.nn.init.orthogonal_(p[k * h:(k + 1) * h])
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    spe = math.ceil(len(ty) / 100)
    total = epochs * spe
    warm = int(variant.get("warm", 0.05) * total)
    ema = copy.deepcopy(model) if variant.get("ema") else None
    decay = variant.get("ema", 0)
    aug = Augmenter(lambda: variant.get("aug", "medium"), dataset="mnist-sample", seed=seed)
    def augment(x, step):
        x = aug(x, step)
        if variant.get("elastic"):
            g = torch.Generator().manual_seed(seed * 7919 + step)
            x = elastic(x, g, alpha=variant["elastic"], sigma=variant.get("sigma", 4.0), frac=variant.get("efrac", 0.5))
        return x
    def before(step):
        if variant.get("sched"):
            for gr in opt.param_groups:
                gr["lr"] = 0.01 * shape(step, total, warm)
        if ema is not None and step > 0:
            d = min(decay, (1 + step) / (10 + step))  # warm-up of the average, as timm/TF do
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
                    pe.lerp_(pm, 1 - d)
        return True
    t0 = time.time()
    fit(model, opt, tx, ty, vx, vy, epochs=epochs, batch_size=100, seed=seed, log_interval=10,
        hooks=FitHooks(before_step=before, augment=augment, grad_clip=lambda: variant.get("clip", 0.0)))
    secs = time.time() - t0
    m = ema if ema is not None else model
    r = evaluate(m, test_x, test_y)
    rv = evaluate(m, vx, vy)
    return {"variant": variant["name"], "seed": seed, "test8k": r.accuracy, "val": rv.accuracy,
            "s_per_epoch": secs / epochs}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    V = {
        "base": {},
        "cos": {"sched": 1},
        "cos_ema": {"sched": 1, "ema": 0.998},
        "cos_el": {"sched": 1, "elastic": 34.0},
        "cos_el8": {"sched": 1, "elastic": 8.0, "sigma": 3.0},
        "cos_drop": {"sched": 1, "dropout": 0.2},
        "cos_clip": {"sched": 1, "clip": 1.0},
        "cos_ema95": {"sched": 1, "ema": 0.95},
        "cos_strong": {"sched": 1, "aug": "strong"},
        "cos_w30": {"sched": 1, "warm": 0.3},
        "cos_ls": {"sched": 1, "ls": 0.1},
        "cos_el_ema": {"sched": 1, "elastic": 34.0, "ema": 0.95},
        "cos_fg": {"sched": 1, "fg": 1},
        "cos_fg_ortho": {"sched": 1, "fg": 1, "ortho": 1},
        "cos_ls_fg": {"sched": 1, "fg": 1, "ls": 0.1},
        "cos_fg_norm": {"sched": 1, "fg": 1, "norm": 1},
        "cos_ls_fg_norm": {"sched": 1, "fg": 1, "ls": 0.1, "norm": 1},
        "cos_norm": {"sched": 1, "norm": 1},
        "cos_all": {"sched": 1, "ema": 0.998, "elastic": 8.0, "sigma": 3.0, "dropout": 0.2},
    }
    ds = load_dataset("mnist-sample")
    z = np.load(ROOT.parent / "shared" / "data" / "mnist-test-8k.npz")
    test_x = torch.from_numpy(z["images"]).to(torch.uint8)
    test_y = torch.from_numpy(z["labels"].astype(np.int64))
    for name in a.variants.split(","):
        for s in map(int, a.seeds.split(",")):
            out = run({"name": name, **V[name]}, s, ds, test_x, test_y)
            print(json.dumps(out), flush=True)
