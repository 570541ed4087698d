"""What the Predict page's look inside says to a learner, in one place: what it calls each cell's quantities
(inference.internals.QUANTITIES), one plain sentence per quantity on what to look for in its rows x units heatmap,
and what each of the other panels shows, in which unit."""

from __future__ import annotations

import math

LABELS = {
    "lstm": {"h": "hidden state h", "c": "cell state c", "input": "input gate i", "forget": "forget gate f",
             "candidate": "cell candidate g", "output": "output gate o"},
    "gru": {"h": "hidden state h", "reset": "reset gate r", "update": "update gate z", "candidate": "candidate n"},
    "rnn": {"h": "hidden state h"},
}

HINTS = {
    "lstm": {
        "h": "What the layer passes on after each row (to the layer above, or to the classifier): look for bands of "
             "units that switch on together where a stroke starts or ends.",
        "c": "The cell's memory. It changes only where the gates let it, so a unit that stays the same colour down "
             "many rows is something being carried down the image.",
        "input": "How much of each row's candidate is written into memory (0 to 1): bright rows are where the cell "
                 "takes in what this row shows.",
        "forget": "How much of the memory is kept from one row to the next (0 to 1): near 1 it holds on to what it "
                  "has read; a dark stripe is where it wipes a unit and starts again.",
        "candidate": "What each row would write into memory (-1 to 1), before the input gate decides how much of it "
                     "gets in.",
        "output": "How much of the memory is shown as h at each row (0 to 1): a unit can remember quietly and "
                  "show it only later.",
    },
    "gru": {
        "h": "The GRU's only state, both its memory and what it passes on: a unit that keeps its colour down many "
             "rows is something being carried down the image.",
        "reset": "How much of the previous state goes into this row's candidate (0 to 1): dark means the candidate "
                 "is made from this row alone, as if starting afresh.",
        "update": "How much of the previous state is kept (near 1) rather than replaced by the candidate (near 0): "
                  "long bright stretches are memory carried down the image.",
        "candidate": "The new state each row proposes (-1 to 1), from the row and the reset past, before the update "
                     "gate mixes it in.",
    },
    "rnn": {
        "h": "A plain RNN has no gates: h is rewritten from this row and the previous h at every step, so what it "
             "read many rows ago fades unless its weights keep it alive. Compare with an LSTM's c or a GRU's h.",
    },
}


def label(cell: str, quantity: str) -> str:
    return LABELS.get(cell, {}).get(quantity, quantity)


def hint(cell: str, quantity: str) -> str:
    return HINTS.get(cell, {}).get(quantity, "")


def reading_note(direction: str, network: str, *, bidirectional: bool) -> str:
    """What a row of the heatmap has seen, for one direction of `network` (e.g. "two-way LSTM")."""
    read = ("rows 0..t (top down)" if direction == "forward" else
            "rows 27..t (bottom up): at row 0 it has read the whole image")
    if not bidirectional:
        read += " (a one-way net has only this direction: row 27 is its first state that has read the whole image)"
    return (f"At row t the {direction} direction of the {network} has read {read}. Units are ordered by the row "
            "where each is most active, so units that fire together sit side by side; most single units mean "
            "nothing on their own: look for bands across many.")


def rows_note(class_name: str) -> str:
    """Under Rows that mattered: what a bar measures, in which unit (inference.explain.row_importance)."""
    return (f"Each row blanked in turn: how much the model's log-odds for {class_name}, "
            f"ln(P({class_name}) / P(not {class_name})), drops. 2.3 means the odds fell tenfold, 0.7 that they "
            "halved; a negative bar is a row that argued against it. (In probability a confident answer barely "
            "moves for any one row, so every bar would look empty.)")


def neighbours_note(size: int, *, bidirectional: bool) -> str:
    """Over the nearest training digits; `size`: the length of the state vector compared."""
    which = "forward after the last row, backward after the first" if bidirectional else "after the last row"
    return (f"Nearest training digits by the state that has read the whole digit ({which}). The number under each "
            f"is how far its state is from your digit's: the straight-line distance across all {size} units, each "
            f"between -1 and 1, so 0 is the same state and {2 * math.sqrt(size):.0f} the farthest possible. Smaller "
            "is more alike.")


def path_note(n: int) -> str:
    return (f"Each grey line is a class's mean path over {n} training digits, projected on the two directions in "
            "which the forward states vary most; a well-read digit ends near its class.")


def matches_note(units: int, what: str, band: tuple[int, int]) -> str:
    return (f"{units} units of {what} are on across rows {band[0]}-{band[1]}. Training digits whose same units are "
            "on there, with the share of on units they have in common (100%: the same ones):")

