"""Safe, located YAML loading.

Reads a YAML document into plain Python values (dict, list, str, int, float, bool, None) and records
the line and column of every key and value, so validation errors can point into the file.
Refuses, with a message and never a hang: files over a size limit, alias bombs (too many expanded
nodes), deep nesting, duplicate keys, tags that would construct objects, binary or non-UTF-8 bytes.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterplan.errors import FieldProblem, InputError, Location, quoted

MAX_FILE_BYTES = 4 * 2**20  # requirement and user-catalog files are hand-written; 4 MiB is generous
# Nodes, counting each alias expansion (stops billion-laughs), and nodes composed: the whole shipped
# catalog is 7,300; composing and checking 100,000 takes about a second, the refusal budget is two.
MAX_NODES = 100_000
MAX_DEPTH = 64
# A number is read only if written in at most this many characters: 10**100 is beyond every field's
# range, and converting a 5,000-digit integer raised Python's int-conversion limit (an internal error).
MAX_NUMBER_CHARS = 100
_FLOAT_MAX = sys.float_info.max

PathKey = tuple[str | int, ...]


class _TooDeep(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


class _TooMany(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


class _DepthLimited:
    """Refuse nesting deeper than MAX_DEPTH, or more than MAX_NODES nodes, while composing.

    libyaml composes nodes recursively in C: 50,000 nested '[' overflowed the C stack (a segfault,
    not an exception). So libyaml only parses to events here and Python composes, depth-limited.
    Counting as it composes stops a 4 MiB file of a million one-character items after MAX_NODES of
    them, before the rest is parsed (composing it all took seconds).
    """

    _depth = 0
    _composed = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth > MAX_DEPTH:
            raise _TooDeep(self.peek_event().start_mark)  # type: ignore[attr-defined]
        self._composed += 1
        if self._composed > MAX_NODES:
            raise _TooMany(self.peek_event().start_mark)  # type: ignore[attr-defined]
        self._depth += 1
        try:
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1


_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)

if _CParser is not None:
    # libyaml's parser (several times faster on the catalog) with the pure-Python composer, the same
    # safe constructor and the same node marks.
    class _Loader(
        _DepthLimited, yaml.composer.Composer, _CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
    ):
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml

    class _Loader(_DepthLimited, yaml.SafeLoader):  # type: ignore[no-redef]
        pass


_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:timestamp",
}


@dataclass
class LocatedDocument:
    """A parsed document and where each of its parts sits in the file."""

    file: str
    data: Any
    positions: dict[PathKey, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: PathKey) -> Location:
        """The location of ``path``, or of its nearest located ancestor."""
        for n in range(len(path), -1, -1):
            pos = self.positions.get(tuple(path[:n]))
            if pos is not None:
                return Location(self.file, pos[0], pos[1])
        return Location(self.file)


def format_path(path: PathKey) -> str:
    """('workloads', 0, 'p95_latency') -> 'workloads[0].p95_latency'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class _Converter:
    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.nodes = 0
        self.positions: dict[PathKey, tuple[int, int]] = {}

    def fail(self, node: yaml.Node, path: PathKey, message: str) -> InputError:
        loc = Location(self.file, node.start_mark.line + 1, node.start_mark.column + 1)
        return InputError([FieldProblem(loc, format_path(path), message)])

    def scalar(self, node: yaml.ScalarNode, path: PathKey) -> Any:
        """A plain value; a number too long or too large for any field, or a tagged value that is not
        what its tag says (``!!int abc``, ``!!bool maybe``), is refused here, located."""
        tag = node.tag.rsplit(":", 1)[-1]
        text = str(node.value)
        if tag == "timestamp":
            # Dates are kept as written (catalog ``as_of`` checks the calendar); an explicit tag must
            # at least look like a date: PyYAML's constructor crashes on '!!timestamp tomorrow'.
            if self.loader.resolve(yaml.ScalarNode, text, (True, False)) != node.tag:
                raise self.fail(node, path, f"{quoted(text)} is not a date like 2026-11-09 (tagged !!timestamp)")
            return text
        if tag in {"int", "float"} and len(text) > MAX_NUMBER_CHARS:
            raise self.fail(
                node,
                path,
                f"a number written with {len(text):,} characters is beyond any range clusterplan accepts "
                f"(numbers of up to {MAX_NUMBER_CHARS} characters are read)",
            )
        try:
            value = self.loader.construct_object(node, deep=False)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, yaml.YAMLError):
            what = {"int": "a whole number", "float": "a number", "bool": "true or false"}.get(tag, tag)
            raise self.fail(node, path, f"{quoted(text)} is not {what} (tagged !!{tag})") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(node, path, f"expected a finite number, got {quoted(text)}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
            raise self.fail(node, path, f"{quoted(text)} is beyond any range clusterplan accepts")
        return value

    def convert(self, node: yaml.Node, path: PathKey, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(node, path, _too_many_nodes())
        if depth > MAX_DEPTH:
            raise self.fail(node, path, f"nested more than {MAX_DEPTH} levels deep")
        self.positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            if node.tag not in _SCALAR_TAGS:
                raise self.fail(node, path, f"YAML tag {node.tag!r} is not allowed (only plain values)")
            return self.scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise self.fail(node, path, f"YAML tag {node.tag!r} is not allowed")
            return [self.convert(child, (*path, i), depth + 1) for i, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag != "tag:yaml.org,2002:map":
                raise self.fail(node, path, f"YAML tag {node.tag!r} is not allowed")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key_node, path, "merge keys '<<' are not supported; write the fields out")
                if not isinstance(key_node, yaml.ScalarNode):
                    kind = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
                    raise self.fail(key_node, path, f"a key must be a plain name, not {kind}")
                key = str(key_node.value)
                if key in out:
                    first = self.positions.get((*path, key))
                    where = f" (first at line {first[0]})" if first else ""
                    raise self.fail(key_node, (*path, key), f"duplicate key {quoted(key)}{where}")
                self.positions[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                out[key] = self.convert(value_node, (*path, key), depth + 1)
            return out
        raise self.fail(node, path, "unsupported YAML node")  # pragma: no cover - exhaustive above


def parse_yaml_text(text: str, file: str) -> LocatedDocument:
    """Parse one YAML document from text; raise InputError with a location on any problem."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters before parsing starts
        raise InputError([FieldProblem(Location(file), "", f"invalid YAML: {exc}")]) from None
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file)
            problem = exc.problem or exc.context or "invalid YAML"
            # libyaml 0.2.6 (in PyYAML 6.0.4's wheels) stops at 1,000 levels itself, before our composer counts
            if problem == "exceeded maximum nesting depth":
                raise InputError([FieldProblem(loc, "", f"nested more than {MAX_DEPTH} levels deep")]) from None
            if problem.startswith("but found another document"):
                problem = "a file holds one YAML document; a second one ('---') starts here"
            elif mark is not None and _char_at(text, mark.index) == "\t":
                problem += " (a tab: YAML indents with spaces)"
            raise InputError([FieldProblem(loc, "", f"invalid YAML: {problem}")]) from None
        except yaml.YAMLError as exc:
            raise InputError([FieldProblem(Location(file), "", f"invalid YAML: {exc}")]) from None
        except _TooDeep as exc:
            loc = Location(file, exc.mark.line + 1, exc.mark.column + 1)
            raise InputError([FieldProblem(loc, "", f"nested more than {MAX_DEPTH} levels deep")]) from None
        except _TooMany as exc:
            loc = Location(file, exc.mark.line + 1, exc.mark.column + 1)
            raise InputError([FieldProblem(loc, "", _too_many_nodes())]) from None
        except RecursionError:
            raise InputError([FieldProblem(Location(file), "", f"nested more than {MAX_DEPTH} levels deep")]) from None
        if root is None:
            raise InputError([FieldProblem(Location(file), "", "the file is empty; expected a YAML mapping")])
        converter = _Converter(file, loader)
        data = converter.convert(root, (), 0)
        return LocatedDocument(file=file, data=data, positions=converter.positions)
    finally:
        loader.dispose()


def _too_many_nodes() -> str:
    return (
        f"document expands to more than {MAX_NODES:,} nodes "
        "(an alias bomb or a file far larger than a requirement or catalog needs)"
    )


def _char_at(text: str, index: int) -> str:
    return text[index] if 0 <= index < len(text) else ""


def read_text(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Read a user's text file, refusing directories, missing paths, huge and non-UTF-8 files."""
    file = str(path)
    if not path.exists():
        raise InputError([FieldProblem(Location(file), "", "no such file")], fix="check the path")
    if path.is_dir():
        raise InputError([FieldProblem(Location(file), "", "is a directory, expected a YAML file")])
    if not path.is_file():  # opening a named pipe with no writer blocks forever
        raise InputError(
            [FieldProblem(Location(file), "", "is not a regular file (a pipe, socket or device); expected a YAML file")]
        )
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError([FieldProblem(Location(file), "", f"file is {size:,} bytes; the limit is {max_bytes:,}")])
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError([FieldProblem(Location(file), "", f"cannot read: {exc.strerror}")]) from None
    return decode_text(raw, file, max_bytes=max_bytes)


def decode_text(raw: bytes, name: str, *, max_bytes: int = MAX_FILE_BYTES, noun: str = "file") -> str:
    """Bytes read from a file (or standard input, ``noun="input"``) as text: refused over ``max_bytes``
    (read ``max_bytes + 1`` to detect it), with NUL bytes, or not UTF-8 (the line of the first bad byte)."""
    if len(raw) > max_bytes:
        raise InputError([FieldProblem(Location(name), "", f"{noun} is larger than the limit of {max_bytes:,} bytes")])
    if b"\x00" in raw:
        raise InputError([FieldProblem(Location(name), "", f"{noun} contains NUL bytes; expected a text YAML file")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError([FieldProblem(Location(name, line), "", f"{noun} is not valid UTF-8 text")]) from None


def load_yaml_file(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> LocatedDocument:
    return parse_yaml_text(read_text(path, max_bytes=max_bytes), str(path))
