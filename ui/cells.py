"""What the Predict page calls each cell's quantities (inference.internals.QUANTITIES), and one plain sentence per
quantity on what to look for in its rows x units heatmap."""

from __future__ import annotations

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
