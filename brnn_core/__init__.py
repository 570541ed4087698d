"""brnn_core: train, evaluate and use a bidirectional LSTM on 28x28 images read row by row.

Pure Python + PyTorch, no Streamlit: the dashboard, the CLI and the tests all stand on it.
"""

__version__ = "0.1.0"
