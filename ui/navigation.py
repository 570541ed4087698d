"""The dashboard's pages, their labels and icons: declared once, for the entry script and the pages.

Each page calls `ensure_navigation` first. While a `pages/` folder exists, Streamlit starts a fresh server in
its classic multipage mode, so a first request straight to `/predict` would run the page without the entry
script; `ensure_navigation` then declares our navigation and runs the page through it (the same URL, and
widgets keyed as on every later run), and stops the classic run. Details: docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from ui.serve import keep_origin_check_local
from ui.warmup import first_paint, start_predraw


@dataclass(frozen=True)
class PageSpec:
    script: str  # relative to the repository root, where `streamlit run streamlit_app.py` runs
    title: str
    icon: str
    default: bool = False


# The tab's icon, a file served from here: a `:material/...:` page icon is fetched by the browser from a font CDN
ICON = Path(__file__).with_name("icon.svg")
PAGES = (
    PageSpec("pages/train.py", "Train", ":material/model_training:", default=True),
    PageSpec("pages/predict.py", "Predict", ":material/draw:"),
    PageSpec("pages/runs.py", "Runs", ":material/table_chart:"),
    PageSpec("pages/compare.py", "Compare", ":material/compare_arrows:"),
    PageSpec("pages/sweep.py", "Sweep", ":material/tune:"),
)


def navigation():
    """Page config and `st.navigation` over PAGES; returns the page to run. On a fresh server it also says
    that PyTorch is loading (the first page would be blank for seconds) and starts the background drawing."""
    st.set_page_config(page_title="BRNN Dashboard", page_icon=str(ICON), layout="wide")
    pages = [st.Page(p.script, title=p.title, icon=p.icon, default=p.default, url_path="" if p.default else None)
             for p in PAGES]
    nav = st.navigation([*pages, _alias(next(p for p in PAGES if p.default))])
    keep_origin_check_local()  # also under a plain `streamlit run`; `python -m ui.serve` does it before the server
    first_paint()
    start_predraw()
    return nav


def _alias(spec: PageSpec) -> st.Page:
    """The default page (Train, at /) under its own name too, hidden from the menu: /train shows it, with its
    query (?run=ID). The default page takes url_path "" above, so this one may take the script's name. (The same
    script, not a redirect: a switch from here would start the page afresh on every rerun of a session whose
    address is /train.)"""
    return st.Page(spec.script, title=spec.title, icon=spec.icon, url_path=Path(spec.script).stem,
                   visibility="hidden")


def ensure_navigation() -> None:
    """Call first in every page: switches a fresh server's classic multipage run over to PAGES."""
    if PagesManager.uses_pages_directory:
        navigation().run()  # this same page, now keyed as st.navigation keys it (its call here is a no-op)
        st.stop()  # the classic run of the page is done: the page ran once, inside navigation
