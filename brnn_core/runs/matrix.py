"""A cell × direction matrix of seed groups (`python -m brnn_core compare`, the Compare page): the runs it needs,
the runs it has, and one summary row per entry (n, mean ± std of the accuracies, parameters, seconds per epoch).

An entry is one cell read one way or both; its runs are a seed group (index.seed_group of its settings), so a run
made any way with those settings and one of the matrix's seeds counts, however it started (this command, the page,
`train --seeds`). A seed is done when a run of it finished (or diverged: that is its result too); a seed whose runs
all stopped, failed or were interrupted is trained again; one queued or training is waited for, never doubled.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from brnn_core.config import CELL_NAMES, RECORDING_FIELDS, TrainConfig, resolve_head
from brnn_core.data.datasets import DATASETS
from brnn_core.model import CELL_TITLES
from brnn_core.runs.groups import spread
from brnn_core.runs.index import RunIndex, seed_group
from brnn_core.runs.rundir import RunError
from brnn_core.runs.seeds import seed_configs
from brnn_core.states import ACTIVE_STATES, State

DIRECTIONS = {"bi": True, "uni": False}  # what --directions names
DIRECTION_WORDS = {True: "two-way", False: "one-way"}
MATRIX_FIELDS = ("cell", "bidirectional", "seed")  # what the matrix sets in each run: never a shared setting
DONE_STATES = (State.FINISHED, State.DIVERGED)
ACCURACIES = ("best_val_acc", "test_acc", "drawings_acc")


class MatrixError(RunError):
    """A matrix that cannot be built as asked; the message says how to ask for one."""


def parse_names(text: str, allowed, flag: str) -> list[str]:
    """'lstm, gru' -> ['lstm', 'gru'] in the order given, each one of `allowed`; MatrixError naming `flag` else."""
    allowed = list(allowed)
    choose = f"name one or more of {', '.join(allowed)}, separated by commas"
    parts = [p.strip().lower() for p in str(text).split(",")]
    if not any(parts):
        raise MatrixError(f"{flag} is empty: {choose}")
    names: list[str] = []
    for part in parts:
        if not part:
            raise MatrixError(f"{flag} {text}: an empty name between commas; {choose}")
        if part not in allowed:
            raise MatrixError(f"{flag}: unknown {part!r}; {choose}")
        if part in names:
            raise MatrixError(f"{flag}: {part} is given twice; give each once")
        names.append(part)
    return names


@dataclass(frozen=True)
class Entry:
    """One row of the matrix: a cell, read one way or both."""

    cell: str
    bidirectional: bool

    @property
    def direction(self) -> str:
        return DIRECTION_WORDS[self.bidirectional]

    @property
    def label(self) -> str:
        """'LSTM two-way'."""
        return f"{CELL_TITLES.get(self.cell, self.cell)} {self.direction}"


@dataclass
class Matrix:
    """The entries (every cell with every direction asked), the seeds, and the settings every run shares."""

    values: dict  # the shared settings as typed (--config, --set, a page's fields): no cell, direction or seed
    entries: list[Entry]
    seeds: list[int]
    bases: dict[Entry, TrainConfig] = field(default_factory=dict)  # each entry's settings, checked, at the first seed
    groups: dict[Entry, str] = field(default_factory=dict)  # each entry's seed group id

    @classmethod
    def build(cls, values: Mapping, cells: list[str], directions: list[bool], seeds: list[int]) -> Matrix:
        """The matrix of `cells` × `directions`; MatrixError for a shared setting the matrix owns or a matrix of
        one entry, ConfigError (every bad field) for settings an entry cannot train with."""
        owned = [name for name in MATRIX_FIELDS if name in values]
        if owned:
            raise MatrixError(f"{', '.join(owned)}: the matrix sets {'it' if len(owned) == 1 else 'them'} for each "
                              "run; leave it out of the shared settings (--set, --config) and name cells with "
                              "--cells, directions with --directions and seeds with --seeds")
        entries = [Entry(cell, bidirectional) for cell in cells for bidirectional in directions]
        if len(entries) < 2:
            raise MatrixError(f"nothing to compare: {entries[0].label if entries else 'no entry'} is one entry; "
                              "name two or more cells, or both directions (bi,uni)")
        matrix = cls(dict(values), entries, list(seeds))
        for entry in entries:  # each entry's auto values resolved for its own direction (a one-way net's head)
            base = TrainConfig.from_dict({**values, "cell": entry.cell, "bidirectional": entry.bidirectional,
                                          "seed": seeds[0] if seeds else 0})
            matrix.bases[entry], matrix.groups[entry] = base, seed_group(base.to_dict())
        return matrix

    def configs(self, entry: Entry) -> list[TrainConfig]:
        """One config per seed of `entry`, in the order of the seeds."""
        return seed_configs(self.bases[entry], self.seeds)


def matrix_key(train: dict) -> str:
    """What runs of one matrix share whatever their cell, direction and seed: 8 hex digits of their other settings
    (a head that is its direction's auto choice counts as auto; what only records, as in seed_group, left out)."""
    settings = {k: v for k, v in (train or {}).items() if k not in MATRIX_FIELDS and k not in RECORDING_FIELDS}
    if settings.get("head") == resolve_head("auto", bool(train.get("bidirectional", True))):
        settings["head"] = "auto"
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Place:
    """One seed of one entry and the run that stands for it: its newest done run, else its newest queued or
    training one, else its newest other (stopped, failed, interrupted); None before any."""

    entry: Entry
    seed: int
    run_id: str | None
    state: str | None

    @property
    def done(self) -> bool:
        return self.state in DONE_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def missing(self) -> bool:
        """Neither done nor on its way: a seed to train."""
        return not (self.done or self.active)


def _stands_for(runs: list[tuple[str, str]]) -> tuple[str | None, str | None]:
    """(run id, state) of the run that stands for a seed, from its runs newest first."""
    for wanted in (DONE_STATES, ACTIVE_STATES, None):
        for run_id, state in runs:
            if wanted is None or state in wanted:
                return run_id, state
    return None, None


@dataclass
class Standing:
    """Where a matrix stands in a runs folder: a Place per entry and seed, and what the summary reads."""

    matrix: Matrix
    places: list[Place]
    accuracies: dict[str, tuple]  # run id -> (best validation accuracy, test accuracy) from the runs table
    statuses: dict[str, dict]  # run id -> its stored status.json (elapsed time, epochs)

    def of(self, entry: Entry) -> list[Place]:
        return [p for p in self.places if p.entry == entry]

    def run_ids(self, entry: Entry) -> list[str]:
        """The runs standing for `entry`'s seeds (done or not), in the order of the seeds."""
        return [p.run_id for p in self.of(entry) if p.run_id is not None]

    def missing(self) -> list[TrainConfig]:
        """A config for every seed still to train, entry by entry."""
        return [cfg for entry in self.matrix.entries
                for cfg, place in zip(self.matrix.configs(entry), self.of(entry), strict=True) if place.missing]

    def active(self) -> list[Place]:
        return [p for p in self.places if p.active]

    def summary(self, drawings: Mapping[str, float | None] | None = None) -> pd.DataFrame:
        """One row per entry: n (done seeds), the states of its seeds ('2 finished · 1 running'), the mean and
        sample std of best validation, test and drawings accuracy over its done runs (fractions; `drawings`: run id
        -> accuracy of its best.pt, where scored), parameters, seconds per epoch (mean), its group and run ids."""
        return pd.DataFrame([self._row(entry, drawings or {}) for entry in self.matrix.entries],
                            columns=SUMMARY_COLUMNS)

    def _row(self, entry: Entry, drawings: Mapping[str, float | None]) -> dict:
        places = self.of(entry)
        done = [p.run_id for p in places if p.done]
        values = {"best_val_acc": [self.accuracies[r][0] for r in done],
                  "test_acc": [self.accuracies[r][1] for r in done],
                  "drawings_acc": [drawings.get(r) for r in done]}
        row = {"cell": entry.cell, "direction": entry.direction, "n": len(done),
               "states": " · ".join(f"{n} {state}" for state, n in Counter(p.state or "to train" for p in places)
                                   .most_common())}
        for name, numbers in values.items():
            s = spread(numbers)
            row[name], row[f"{name}_std"] = s.mean, s.std
        paces = [self.statuses[r].get("elapsed_s") / self.statuses[r]["epoch"] for r in done
                 if self.statuses.get(r, {}).get("epoch") and self.statuses[r].get("elapsed_s") is not None]
        row["s_per_epoch"] = spread(paces).mean
        row["params"] = parameter_count(self.matrix.bases[entry])
        row["group"], row["run_ids"] = self.matrix.groups[entry], [p.run_id for p in places if p.run_id]
        return row


SUMMARY_COLUMNS = ["cell", "direction", "n", "states", *[c for a in ACCURACIES for c in (a, f"{a}_std")],
                   "params", "s_per_epoch", "group", "run_ids"]


def standing(index: RunIndex, matrix: Matrix) -> Standing:
    """Where `matrix` stands among the runs `index` reads (each run read again only when its files changed)."""
    table = index.table()
    entry_of = {group: entry for entry, group in matrix.groups.items()}
    rows = [row for row in zip(table["run_id"], table["group"], table["state"], table["best_val_acc"],
                               table["test_acc"], strict=True) if row[1] in entry_of]  # plain lists: a rerun's cost
    infos = index.entries([row[0] for row in rows])
    runs: dict[tuple[Entry, int], list[tuple[str, str]]] = {}
    for run_id, group, state, _, _ in rows:  # newest first
        train = (infos[run_id].config.get("train") or {}) if run_id in infos else {}
        runs.setdefault((entry_of[group], train.get("seed")), []).append((run_id, state))
    places = [Place(entry, seed, *_stands_for(runs.get((entry, seed), [])))
              for entry in matrix.entries for seed in matrix.seeds]
    statuses = {run_id: dict(info.stored_status) for run_id, info in infos.items()}
    return Standing(matrix, places, {row[0]: (row[3], row[4]) for row in rows}, statuses)


@functools.lru_cache(maxsize=64)
def _parameters(cell: str, bidirectional: bool, hidden: int, layers: int, classes: int) -> int:
    import torch

    from brnn_core.model import ModelConfig, RecurrentClassifier

    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = RecurrentClassifier(ModelConfig(hidden_size=hidden, num_layers=layers, num_classes=classes,
                                                cell=cell, bidirectional=bidirectional))
    return sum(p.numel() for p in model.parameters())


def parameter_count(cfg: TrainConfig) -> int:
    """Trainable parameters of the network `cfg` trains (its recurrent layers and the classifier)."""
    return _parameters(cfg.cell, cfg.bidirectional, cfg.hidden_size, cfg.num_layers,
                       len(DATASETS[cfg.dataset].classes))


def _mean_std(mean: float, std: float) -> str:
    """'97.10 ± 0.30' in percent; one value alone without '±'; none: ''."""
    if pd.isna(mean):
        return ""
    return f"{100 * mean:.2f}" + ("" if pd.isna(std) else f" ± {100 * std:.2f}")


SHOWN_ACCURACIES = {"best_val_acc": "best val acc %", "test_acc": "test acc %", "drawings_acc": "drawings acc %"}


def shown(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as a person reads it (the CLI's table, the Compare page's): accuracies in percent as mean ± std,
    the drawings' column only where some run has a score, parameters with thousands separators."""
    accuracies = [a for a in SHOWN_ACCURACIES if a != "drawings_acc" or summary[a].notna().any()]
    rows = []
    for row in summary.to_dict("records"):  # a handful of rows: plain dicts cost less than column operations
        rows.append({"cell": row["cell"], "direction": row["direction"], "n": row["n"],
                     **{SHOWN_ACCURACIES[a]: _mean_std(row[a], row[f"{a}_std"]) for a in accuracies},
                     "params": f"{row['params']:,}",
                     "s/epoch": "" if pd.isna(row["s_per_epoch"]) else f"{row['s_per_epoch']:.1f}",
                     "states": row["states"], "group": row["group"]})
    return pd.DataFrame(rows, columns=["cell", "direction", "n", *(SHOWN_ACCURACIES[a] for a in accuracies), "params",
                                       "s/epoch", "states", "group"])


@dataclass(frozen=True)
class Found:
    """A matrix already in a runs folder: runs whose settings differ only in cell, direction and seed, in two or
    more entries (what the Compare page offers to pick up again)."""

    key: str  # matrix_key of its runs
    values: dict  # the shared settings (a head that was its direction's auto choice is auto again)
    cells: tuple[str, ...]
    directions: tuple[bool, ...]
    seeds: tuple[int, ...]
    runs: int


def found_matrices(index: RunIndex) -> list[Found]:
    """The matrices among `index`'s runs, the one with the newest run first."""
    table = index.table()
    infos = index.entries(list(table["run_id"]))
    by_key: dict[str, list[dict]] = {}
    for run_id in table["run_id"]:  # newest first
        train = infos[run_id].config.get("train") if run_id in infos else None
        if isinstance(train, dict) and "cell" in train and "_damaged" not in infos[run_id].config:
            by_key.setdefault(matrix_key(train), []).append(train)
    found = []
    for key, trains in by_key.items():
        entries = {(t.get("cell"), bool(t.get("bidirectional", True))) for t in trains}
        if len(entries) < 2:
            continue
        values = {k: v for k, v in trains[0].items() if k not in MATRIX_FIELDS}
        if values.get("head") == resolve_head("auto", bool(trains[0].get("bidirectional", True))):
            values["head"] = "auto"
        found.append(Found(key, values, tuple(c for c in CELL_NAMES if any(e[0] == c for e in entries)),
                           tuple(d for d in (True, False) if any(e[1] == d for e in entries)),
                           tuple(sorted({int(t.get("seed", 0)) for t in trains})), len(trains)))
    return found


def cells_and_directions(cells_text: str, directions_text: str) -> tuple[list[str], list[bool]]:
    """--cells and --directions parsed: cell names, and True (two-way) / False (one-way) per direction."""
    cells = parse_names(cells_text, CELL_NAMES, "--cells")
    directions = parse_names(directions_text, DIRECTIONS, "--directions")
    return cells, [DIRECTIONS[d] for d in directions]
