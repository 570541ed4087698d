"""`python -m ui.serve [streamlit options]`: `streamlit run streamlit_app.py` whose origin check stays local.

Streamlit refuses a cross-origin websocket only after comparing the origin with this machine's addresses, which
it looks up each time an earlier lookup failed: a UDP socket towards a public address, then an HTTP request to
a public "what is my IP" service. No option turns that off, so the addresses are set to loopback before the
server starts; the origins it allows stay the same (its own host, localhost). docs/sweeps.md, "security".
"""

from __future__ import annotations

import sys
from pathlib import Path

LOOPBACK = "127.0.0.1"


def keep_origin_check_local() -> None:
    """Answer Streamlit's own address lookups with loopback (its module-level memo of them), so that checking a
    refused origin never leaves the machine. tests/test_local_only.py fails if a Streamlit release changes this."""
    from streamlit import net_util

    net_util._internal_ip = LOOPBACK
    net_util._external_ip = LOOPBACK


def main() -> None:
    keep_origin_check_local()
    from streamlit.web import cli

    app = Path(__file__).resolve().parents[1] / "streamlit_app.py"
    sys.argv = ["streamlit", "run", str(app), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
