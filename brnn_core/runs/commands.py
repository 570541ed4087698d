"""The sending side of the control channel, as the pages import it; it lives in `runs.protocol`."""

from __future__ import annotations

from brnn_core.runs.protocol import Outcome, live_settings, outcomes, send_live_changes, show_value

__all__ = ["Outcome", "live_settings", "outcomes", "send_live_changes", "show_value"]
