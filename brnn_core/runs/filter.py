"""The runs filter: one small expression language for the Runs page's filter box and `runs list --filter`.

    val_accuracy > 0.97 and lr <= 0.01 and not state:failed
    (hidden >= 64 or tag:baseline) and dataset == mnist-sample
    cell == "gru" and bidirectional == false

Comparisons (`< <= > >= == !=`) on a table column or an alias, `tag:NAME`, `group:ID`, `state:NAME`, joined
with `and`, `or`, `not` and parentheses. It is parsed here, never evaluated as Python: anything else is a
FilterError whose message points at the bad part.

Accuracies are fractions in the runs table (0.9822) and percent on the Runs page (98.22): a filter takes either,
as the reader sees them. A number from 0 to 1 is a fraction, a number above 1 or one written with % is a percent
(`val_acc > 97`, `val_acc > 97%` and `val_acc > 0.97` are one filter). A comparison that no accuracy can meet
(`val_acc > 150`, `val_acc > 1`) is refused, saying why, instead of silently matching nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from brnn_core.config import BOOL_WORDS

ALIASES = {"val_accuracy": "best_val_acc", "val_acc": "best_val_acc", "test_accuracy": "test_acc",
           "hidden_size": "hidden", "num_layers": "layers", "batch_size": "batch", "id": "run_id"}
KEYS = ("tag", "group", "state")
ACCURACIES = ("best_val_acc", "test_acc")  # fractions in the table, percent on the page: either is accepted
OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
       "==": lambda a, b: a == b, "=": lambda a, b: a == b, "!=": lambda a, b: a != b}
TOKEN = re.compile(r"""\s*(?:(?P<paren>[()])|(?P<op><=|>=|==|!=|<|>|=)|(?P<string>"[^"]*"|'[^']*')
                       |(?P<word>[A-Za-z0-9_.:+\-/]+%?))""", re.VERBOSE)

MAX_DEPTH = 50  # parentheses and `not`s inside one another: far past any filter a person writes, far below
# Python's recursion limit (the parser and the predicate it builds both recurse once per level)
Row = Mapping[str, object]
Predicate = Callable[[Row], bool]


class FilterError(ValueError):
    """A filter that does not parse, or a comparison no run can meet; the message shows where."""


@dataclass(frozen=True)
class Token:
    kind: str  # paren, op, string, word, end
    text: str
    at: int  # position in the expression


def tokens(text: str) -> list[Token]:
    out, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        found = TOKEN.match(text, at)
        if not found or found.end() == at:
            start = at + len(text[at:]) - len(text[at:].lstrip())
            raise FilterError(_pointing(text, start, f"unexpected {text[start]!r}"))
        kind = found.lastgroup
        out.append(Token(kind, found.group(kind), found.start(kind)))
        at = found.end()
    out.append(Token("end", "", len(text)))
    return out


SHOWN = 60  # characters of a long filter shown on each side of the bad part


def _pointing(text: str, at: int, problem: str) -> str:
    start = max(0, at - SHOWN)
    shown = ("…" if start else "") + text[start:at + SHOWN] + ("…" if at + SHOWN < len(text) else "")
    return f"{problem} at position {at + 1}:\n  {shown}\n  {' ' * (at - start + (1 if start else 0))}^"


class _Parser:
    def __init__(self, text: str, columns: set[str] | None):
        self.text, self.columns = text, columns
        self.tokens, self.k = tokens(text), 0
        self.depth = 0  # parentheses and `not`s open around the token being parsed

    def peek(self) -> Token:
        return self.tokens[self.k]

    def take(self) -> Token:
        token = self.tokens[self.k]
        self.k += 1
        return token

    def fail(self, token: Token, problem: str) -> FilterError:
        return FilterError(_pointing(self.text, token.at, problem))

    def parse(self) -> Predicate:
        if self.peek().kind == "end":
            return lambda row: True
        predicate = self.any_of()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), f"expected 'and', 'or' or the end, not {self.peek().text!r}")
        return predicate

    def any_of(self) -> Predicate:
        return self._joined("or", self.all_of, any)

    def all_of(self) -> Predicate:
        return self._joined("and", self.negation, all)

    def _joined(self, word: str, part: Callable[[], Predicate], combine: Callable) -> Predicate:
        """`part (word part)*`: the parts' predicates combined with `combine` (any for or, all for and)."""
        parts = [part()]
        while self.peek().kind == "word" and self.peek().text.lower() == word:
            self.take()
            parts.append(part())
        return parts[0] if len(parts) == 1 else (lambda row: combine(p(row) for p in parts))

    def deeper(self, token: Token) -> None:
        """One more level of nesting at `token`; a FilterError past MAX_DEPTH (before Python's recursion ends)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(token, f"nested too deep: more than {MAX_DEPTH} parentheses and 'not's inside one "
                                   "another; write it with fewer (not not x is x)")

    def negation(self) -> Predicate:
        if self.peek().kind == "word" and self.peek().text.lower() == "not":
            self.deeper(self.take())
            inner = self.negation()
            self.depth -= 1
            return lambda row: not inner(row)
        return self.atom()

    def atom(self) -> Predicate:
        token = self.take()
        if token.kind == "paren" and token.text == "(":
            self.deeper(token)
            inner = self.any_of()
            self.depth -= 1
            close = self.take()
            if close.text != ")":
                raise self.fail(close, "expected ')'")
            return inner
        if token.kind != "word" or token.text.lower() in ("and", "or", "not"):
            raise self.fail(token, "expected a field (e.g. lr), tag:NAME, group:ID or state:NAME"
                            + (f", not {token.text!r}" if token.text else " here"))
        key, sep, name = token.text.partition(":")
        if sep:
            if key not in KEYS or not name:
                raise self.fail(token, f"unknown {token.text!r}: use tag:NAME, group:ID or state:NAME")
            return _membership(key, name)
        field = ALIASES.get(token.text, token.text)
        if self.columns is not None and field not in self.columns:
            raise self.fail(token, f"unknown field {token.text!r}; fields: {', '.join(sorted(self.columns))}")
        op = self.take()
        if op.kind != "op":
            raise self.fail(op, f"expected a comparison (< <= > >= == !=) after {token.text!r}")
        value = self.take()
        if value.kind not in ("word", "string"):
            raise self.fail(value, "expected a value (a number or a word)")
        wanted = _value(value.text)
        if field in ACCURACIES and isinstance(wanted, float):
            wanted = self.accuracy(token.text, op.text, value, wanted)
        elif value.kind == "word" and value.text.endswith("%"):
            raise self.fail(value, f"a value in % is for accuracies ({', '.join(ACCURACIES)}), not {token.text!r}")
        return _comparison(field, OPS[op.text], wanted)

    def accuracy(self, name: str, op: str, value: Token, number: float) -> float:
        """An accuracy's value as the fraction the table holds: a number above 1, or with %, is a percent. A
        comparison that no accuracy (0 to 1) can meet is refused: its unit is the likely mistake."""
        fraction = number / 100 if value.text.endswith("%") or number > 1 else number
        never = {">": fraction >= 1, ">=": fraction > 1, "<": fraction <= 0, "<=": fraction < 0,
                 "==": not 0 <= fraction <= 1, "=": not 0 <= fraction <= 1}.get(op, False)
        if never:
            raise self.fail(value, f"{name} {op} {value.text} can match no run: accuracies run from 0 to 100 % "
                                   "(or 0 to 1); a number above 1 is read as a percent (97 or 97% = 0.97)")
        return fraction


def _value(text: str) -> float | str:
    if text[:1] in "\"'":
        return text[1:-1]
    try:
        return float(text.removesuffix("%"))
    except ValueError:
        return text


def _comparison(field: str, op: Callable, wanted: float | str) -> Predicate:
    def test(row: Row) -> bool:
        value = row.get(field)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False  # a run without this value never matches (not even !=)
        if isinstance(value, bool) and isinstance(wanted, str) and wanted.lower() in BOOL_WORDS:
            return bool(op(value, BOOL_WORDS[wanted.lower()]))  # bidirectional == false (or no, 0)
        if isinstance(wanted, float):
            try:
                return bool(op(float(value), wanted))
            except (TypeError, ValueError):
                return False
        return bool(op(str(value), wanted))

    return test


def _membership(key: str, name: str) -> Predicate:
    def test(row: Row) -> bool:
        if key == "state":
            return str(row.get("state")) == name
        if key == "group":
            return str(row.get("group")) == name
        tags = row.get("tags") or ()
        return name in (tags.split(",") if isinstance(tags, str) else tags)

    return test


def parse_filter(text: str, columns: set[str] | None = None) -> Predicate:
    """A predicate over one row of the runs table (a mapping), or FilterError. `columns`: the fields that exist
    (unknown ones are refused by name); None accepts any."""
    return _Parser(text or "", columns).parse()


def filter_table(table, text: str):
    """The rows of a runs table (pandas DataFrame) that `text` selects."""
    keep = parse_filter(text, set(table.columns) | set(ALIASES))
    if not len(table) or not (text or "").strip():  # no filter: no row to test (a page's every rerun)
        return table
    return table[[keep(row) for row in table.to_dict("records")]]
