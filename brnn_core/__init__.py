"""brnn_core: train, evaluate and use a bidirectional LSTM on 28x28 images read row by row.

Pure Python + PyTorch, no Streamlit: the dashboard, the CLI and the tests all stand on it. Subpackages, bottom
to top: data, runs, training, inference, sweep; at the root the modules all of them share (config,
devices, model, checkpoint, schedule, fileio, states, charts, environment) and cli, the top, which only __main__
imports.
What each module does: docs/architecture.md.
"""

__version__ = "0.1.0"
