"""brnn_core: train, evaluate and use a bidirectional LSTM on 28x28 images read row by row.

Pure Python + PyTorch, no Streamlit: the dashboard, the CLI and the tests all stand on it. Subpackages, bottom
to top: data, runs, training, inference, sweep; at the root the modules all of them share (config,
devices, model, checkpoint, schedule, fileio, states, charts, environment) and cli, the top, which only __main__
imports.
What each module does: docs/architecture.md.

From a notebook or a script (docs/notebook.md): `brnn_core.start(config, runs_dir=...)` starts a run as the
dashboard does and returns its `RunHandle`; `brnn_core.train(...)` also waits for it; `brnn_core.run(run_id)` opens
one that exists. They are loaded on first use, so `import brnn_core` stays light.
"""

__version__ = "0.1.0"

_NOTEBOOK_API = ("start", "train", "run", "RunHandle")


def __getattr__(name: str):
    if name in _NOTEBOOK_API:
        from brnn_core import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'brnn_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_NOTEBOOK_API])
