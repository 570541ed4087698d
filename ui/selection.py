"""Table selections that follow what was ticked, not where it was.

Streamlit keeps a dataframe's selection as row positions. The runs tables are newest first, so a new run (a
branch, a queued run, a sweep's trial) moves every row down, and a tick left at its position would select
another run: the overlay would switch without notice. `follow` is called just before the `st.dataframe` with
that key, with each row's identity (a run id, or a seed group's): it turns the user's last change into
identities, then puts the ticks on the rows that now carry them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import streamlit as st

Keys = frozenset  # what a row answers to: its own identity, and for a group's row also its runs' ids


def _ticked(value) -> list[int] | None:
    """The row positions in a dataframe's widget value; None without one (never drawn, or cleared)."""
    try:
        return [int(k) for k in value["selection"]["rows"]]
    except (KeyError, TypeError, ValueError):
        return None


def follow(key: str, rows: Sequence[Hashable], also: Sequence[Keys] | None = None,
           share: str | None = None) -> list[Hashable]:
    """Keep the dataframe `key`'s ticks on the same things across reruns; returns what is chosen (identities,
    possibly of rows not shown now, e.g. filtered out: they are ticked again when they come back).

    `rows`: each row's identity, in the order about to be drawn. `also`: per row, other identities that tick it
    (a seed group's row is ticked when one of its runs was, so a ticked run that gained a seed stays overlaid,
    inside its group's band). `share`: tables that show the same things another way (the runs one a row, or by
    seed group) keep one choice under this name, so switching between them keeps it."""
    drawn_key, chosen_key = f"_follow_drawn_{key}", f"_follow_chosen_{share or key}"
    shown, seen, ticked = st.session_state.get(drawn_key, ((), frozenset(), []))
    chosen = st.session_state.get(chosen_key, ())
    now = _ticked(st.session_state.get(key))
    if now is not None and now != ticked:  # the user changed the ticks, in the table as it was drawn last
        hidden = tuple(c for c in chosen if c not in seen)  # not in that table (filtered out): still chosen
        chosen = hidden + tuple(shown[k] for k in now if 0 <= k < len(shown))
    answers = [{row} | set(also[k] if also else ()) for k, row in enumerate(rows)]
    positions = [k for k, keys in enumerate(answers) if keys & set(chosen)]
    if positions != (now or []):
        st.session_state[key] = {"selection": {"rows": positions, "columns": []}}
    st.session_state[drawn_key] = (tuple(rows), frozenset().union(*answers), positions)
    st.session_state[chosen_key] = chosen
    return list(chosen)
