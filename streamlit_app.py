"""BRNN Dashboard: train a bidirectional LSTM on MNIST-style digits, live, and try it on your drawings."""

import os

# `streamlit run` without ui.serve too: torch reads this at each CUDA check, so the server never creates a
# CUDA context (brnn_core.devices.NVML_CHECK; not imported here, that loads torch)
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from ui.navigation import navigation  # noqa: E402 - after the variable, before anything can ask torch

navigation().run()
