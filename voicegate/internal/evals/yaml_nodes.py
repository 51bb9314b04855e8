"""Reading a YAML document with the line of every value, so an error can name file, line and key.

PyYAML's composer gives a tree of nodes that keep their marks (line and column); we read scalars from
it with the safe constructor's own rules (so `true`, `3` and `"3"` mean what YAML says) instead of
loading into plain dicts, which forget where each value was. Duplicate keys are an error, not "the
last one wins".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ScenarioError(Exception):
    """A scenario file that cannot be run as written: where, which key, and why."""

    def __init__(self, file: Path, line: int, key: str, message: str) -> None:
        super().__init__(f"{file}:{line}: {key}: {message}" if key else f"{file}:{line}: {message}")
        self.file = file
        self.line = line
        self.key = key
        self.message = message


@dataclass(frozen=True)
class Value:
    """One node of the document, with its file and its key path (`calls[1].turns[0].say`)."""

    node: yaml.Node
    file: Path
    key: str

    @property
    def line(self) -> int:
        return int(self.node.start_mark.line) + 1

    def error(self, message: str) -> ScenarioError:
        return ScenarioError(self.file, self.line, self.key, message)

    def _scalar(self) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.error(f"expected a single value, got a {_kind(self.node)}")
        # The safe loader's own rules for what a scalar is (a fresh one: it keeps what it has built).
        return yaml.SafeLoader("").construct_object(self.node)

    def text(self, *, allow_empty: bool = False) -> str:
        value = self._scalar()
        if isinstance(value, bool) or value is None or isinstance(value, list | dict):
            raise self.error(f"expected text, got {_show(value)}")
        text = str(value)
        if not allow_empty and not text.strip():
            raise self.error("must not be empty")
        return text

    def integer(self, *, minimum: int = 0, maximum: int | None = None) -> int:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected a whole number, got {_show(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise self.error(f"must be {bound} (got {value})")
        return value

    def number(self, *, minimum: float = 0.0) -> float:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected a number, got {_show(value)}")
        if value < minimum:
            raise self.error(f"must be at least {minimum:g} (got {value})")
        return float(value)

    def boolean(self) -> bool:
        value = self._scalar()
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {_show(value)}")
        return value

    def choice(self, options: tuple[str, ...]) -> str:
        text = self.text()
        if text not in options:
            raise self.error(f"expected one of {', '.join(options)}, got {text!r}")
        return text

    def items(self) -> list[Value]:
        """A sequence's values (a single value or mapping counts as a sequence of one)."""
        if isinstance(self.node, yaml.SequenceNode):
            return [Value(item, self.file, f"{self.key}[{index}]") for index, item in enumerate(self.node.value)]
        return [self]

    def texts(self) -> list[str]:
        return [item.text() for item in self.items()]

    def is_mapping(self) -> bool:
        return isinstance(self.node, yaml.MappingNode)

    def mapping(self, allowed: tuple[str, ...] | None) -> Mapping:
        """The mapping's entries; a key not in `allowed` is an error (None: any key, such as a tool's
        argument names)."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error(f"expected a mapping (key: value lines), got a {_kind(self.node)}")
        entries: dict[str, Value] = {}
        for key_node, value_node in self.node.value:
            name = Value(key_node, self.file, self.key).text()
            where = f"{self.key}.{name}" if self.key else name
            if name in entries:
                raise ScenarioError(self.file, int(key_node.start_mark.line) + 1, where,
                                    f"given twice (first on line {entries[name].line})")
            if allowed is not None and name not in allowed:
                raise ScenarioError(self.file, int(key_node.start_mark.line) + 1, where,
                                    f"unknown key; expected one of {', '.join(allowed)}")
            entries[name] = Value(value_node, self.file, where)
        return Mapping(self, entries)


@dataclass(frozen=True)
class Mapping:
    value: Value
    entries: dict[str, Value]

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def get(self, key: str) -> Value | None:
        return self.entries.get(key)

    def require(self, key: str) -> Value:
        found = self.entries.get(key)
        if found is None:
            where = f"{self.value.key}.{key}" if self.value.key else key
            raise ScenarioError(self.value.file, self.value.line, where, "is required")
        return found


def read_document(path: Path) -> Value:
    """The file's one YAML document; ScenarioError for a missing file or a YAML syntax error."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(path, 0, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(path, 0, "", "not UTF-8 text") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 0
        raise ScenarioError(path, line, "", f"not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(path, 0, "", f"not valid YAML: {exc}") from None
    if node is None:
        raise ScenarioError(path, 1, "", "the file is empty")
    return Value(node, path, "")


def _kind(node: yaml.Node) -> str:
    return {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}.get(type(node), "value")


def _show(value: Any) -> str:
    return "nothing" if value is None else repr(value)
