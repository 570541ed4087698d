"""BRNN Dashboard: train a bidirectional LSTM on MNIST-style digits, live, and try it on your drawings."""

from ui.navigation import navigation

navigation().run()
