"""Reading a workflow's YAML: the YAML 1.2 core schema on PyYAML, duplicate keys refused,
aliases and nesting bounded.

PyYAML follows YAML 1.1, where ``1e-3`` (no dot) is a string, ``yes``/``no``/``on``/``off``
are booleans and ``010`` is 8. Workflow files are read with YAML 1.2's core schema
instead, so plain scalars mean what people write:

======  ===================================================  ===============================
type    plain spellings                                      YAML 1.1 read differently
======  ===================================================  ===============================
null    ``null Null NULL ~`` and nothing
bool    ``true True TRUE false False FALSE``                 ``yes no on off``: now strings
int     ``12 -3 +4 010 1_000 0x1F 0o17``                     ``010`` was 8, ``0o17`` a string
float   ``1.5 1e-3 5e+2 .5 -1E5 1_000.5 .inf -.inf .nan``    ``1e-3``, ``5e+2`` were strings
======  ===================================================  ===============================

Anything else (``2024-01-31``, ``1:30``, ``0b101``) is a string; quoted scalars are
always strings. Underscores between digits are not in the 1.2 core schema but are
kept, as YAML 1.1 and Python read them. Explicit tags (``!!str 1e-3``) still work for
these types; other tags are refused.

A mapping that gives a key twice is refused (:class:`DuplicateKeyError`), naming the
key path and both lines; keys brought in by a merge (``<<: *anchor``) may be overridden.

An alias shares its anchor's node, so a small file can stand for an enormous structure
(the "billion laughs": anchors of lists of aliases of anchors); whatever walked it
(copies, checks, ``json.dumps`` of the config) would take minutes and gigabytes. The
node tree is therefore measured as it would expand, before anything is built from it:
more than :data:`MAX_YAML_NODES` nodes, nesting deeper than :data:`MAX_YAML_DEPTH` or an
alias inside its own anchor is refused with :class:`YamlLimitError`. libyaml's parser
is used where PyYAML has it (its wheels do): several times faster than PyYAML's own.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.resolver import BaseResolver

from diel.limits import clip

__all__ = ["load_yaml", "resolve_number", "DuplicateKeyError", "YamlLimitError", "LOADERS",
           "MAX_YAML_NODES", "MAX_YAML_DEPTH"]

MAX_YAML_NODES = 1_000_000  # nodes (scalars, lists, mappings) with every alias expanded
MAX_YAML_DEPTH = 100        # lists and mappings inside one another

_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_INT = re.compile(rf"^(?:[-+]?{_DIGITS}|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(rf"^(?:[-+]?(?:\.{_DIGITS}|{_DIGITS}(?:\.(?:{_DIGITS})?)?)"
                    r"(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_TAG = "tag:yaml.org,2002:"


class _CoreSchemaResolver(BaseResolver):
    """Tags plain scalars by YAML 1.2's core schema (module docstring), and ``<<`` as a merge."""


for _tag, _pattern, _first in (
        ("null", _NULL, ["~", "n", "N", ""]),
        ("bool", _BOOL, list("tTfF")),
        ("int", _INT, list("-+0123456789")),      # before float: 12 matches both
        ("float", _FLOAT, list("-+.0123456789")),
        ("merge", re.compile(r"^<<$"), ["<"])):
    _CoreSchemaResolver.add_implicit_resolver(_TAG + _tag, _pattern, _first)


def resolve_number(text: str) -> int | float | None:
    """The number a plain YAML scalar ``text`` stands for in a workflow file, else None:
    ``resolve_number("1e-3") == 0.001``; ``"1e-3"`` quoted in YAML is the string."""
    if _INT.match(text):
        return _int(text)
    if _FLOAT.match(text):
        return _float(text)
    return None


def _int(text: str) -> int:
    if text[:2] in ("0x", "0o"):
        return int(text[2:], 16 if text[1] == "x" else 8)
    return int(text)   # a sign, leading zeros and underscores between digits are fine


def _float(text: str) -> float:
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    lowered = text.lower()
    return special[lowered] if lowered in special else float(text)


class DuplicateKeyError(ConstructorError):
    """A mapping of the YAML text gives the same key twice.

    ``path`` is the key path of the mapping's duplicated key (``modules.trainer.settings.
    epochs``); ``line`` and ``first_line`` (1-based) are where it appears again and first.
    """

    def __init__(self, key: Any, path: str, line: int, first_line: int) -> None:
        self.key, self.path, self.line, self.first_line = key, path, line, first_line
        super().__init__(problem=self.describe())

    def describe(self) -> str:
        """One line: which key, where, and why it is refused."""
        return (f"duplicate key '{self.key}' at line {self.line} (first given at line "
                f"{self.first_line}); YAML would silently keep only the last one, so give "
                "each key once")


class YamlLimitError(yaml.YAMLError):
    """The YAML text would expand beyond what a workflow may hold (module docstring);
    ``str()`` is one line saying which bound and where."""


class _WorkflowConstructor(SafeConstructor):
    """Builds only the core schema's types (an explicit ``!!timestamp`` or ``!!python/...``
    tag is refused), refuses duplicate keys, and measures the node tree first."""

    yaml_constructors: dict[Any, Callable[..., Any]] = {}

    def get_single_data(self) -> Any:
        self._root = self.get_single_node()
        if self._root is None:
            return None
        _check_expansion(self._root)
        return self.construct_document(self._root)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        self._check_unique_keys(node)
        return super().construct_mapping(node, deep=deep)

    def _check_unique_keys(self, node: yaml.MappingNode) -> None:
        first: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == _TAG + "merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if seen is not None:
                parent = _key_path(getattr(self, "_root", None), node) or ""
                path = f"{parent}.{key}" if parent else str(key)
                raise DuplicateKeyError(key, path, key_node.start_mark.line + 1, seen + 1)
            first[key] = key_node.start_mark.line

    def _scalar(self, node: yaml.Node, convert: Callable[[str], Any], what: str) -> Any:
        """``convert`` of the scalar's text; a text that is no ``what`` (under an explicit
        tag such as ``!!int abc``) is a ConstructorError naming the line."""
        text = self.construct_scalar(node)
        try:
            return convert(text)
        except (ValueError, KeyError):
            raise ConstructorError(None, None, f"expected {what}, got {clip(repr(text), 80)}",
                                   node.start_mark) from None

    def construct_core_int(self, node: yaml.Node) -> int:
        return self._scalar(node, _int, "an integer")

    def construct_core_float(self, node: yaml.Node) -> float:
        return self._scalar(node, _float, "a number")

    def construct_core_bool(self, node: yaml.Node) -> bool:
        return self._scalar(node, lambda text: {"true": True, "false": False}[text.lower()],
                            "true or false")


for _tag, _construct in (
        ("null", SafeConstructor.construct_yaml_null),
        ("bool", _WorkflowConstructor.construct_core_bool),
        ("int", _WorkflowConstructor.construct_core_int),
        ("float", _WorkflowConstructor.construct_core_float),
        ("str", SafeConstructor.construct_yaml_str),
        ("seq", SafeConstructor.construct_yaml_seq),
        ("map", SafeConstructor.construct_yaml_map)):
    _WorkflowConstructor.add_constructor(_TAG + _tag, _construct)
_WorkflowConstructor.add_constructor(None, SafeConstructor.construct_undefined)


class _PurePythonLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                        yaml.composer.Composer, _WorkflowConstructor, _CoreSchemaResolver):
    """PyYAML's own parser (where PyYAML was built without libyaml)."""

    def __init__(self, text: str) -> None:
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _WorkflowConstructor.__init__(self)
        _CoreSchemaResolver.__init__(self)


LOADERS: list[type] = [_PurePythonLoader]
if yaml.__with_libyaml__:
    from yaml.cyaml import CParser

    class _LibyamlLoader(CParser, _WorkflowConstructor, _CoreSchemaResolver):
        """libyaml's parser (it also refuses nesting deeper than 1,000)."""

        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            _WorkflowConstructor.__init__(self)
            _CoreSchemaResolver.__init__(self)

    LOADERS.insert(0, _LibyamlLoader)


def load_yaml(text: str, loader: type | None = None) -> Any:
    """Parse the YAML ``text`` of a workflow as the module docstring says. Raises
    ``yaml.YAMLError``: :class:`DuplicateKeyError` for a key given twice,
    :class:`YamlLimitError` past a bound. ``loader`` picks one of :data:`LOADERS`
    (the first, the fastest, by default); tests read with each."""
    parser = (loader or LOADERS[0])(text)
    try:
        return parser.get_single_data()
    except RecursionError:   # PyYAML's own composer recurses per level
        raise YamlLimitError(f"lists and mappings are nested too deeply (more than "
                             f"{MAX_YAML_DEPTH} levels)") from None
    finally:
        parser.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node tree that, with its aliases expanded, holds more than
    :data:`MAX_YAML_NODES` nodes, nests deeper than :data:`MAX_YAML_DEPTH`, or contains
    itself. Each distinct node is visited once (sizes are remembered), so this takes
    time in proportion to the text, however far the aliases would expand."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()     # being measured: their children are on the stack
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, measured = stack.pop()
        children = _children(node)
        if measured:
            open_nodes.discard(id(node))
            sizes[id(node)] = size = 1 + sum(sizes[id(child)] for child in children)
            if size > MAX_YAML_NODES:
                raise YamlLimitError(
                    f"with its aliases expanded, the node at line {node.start_mark.line + 1} "
                    f"alone holds more than {MAX_YAML_NODES:,} values (anchors repeated "
                    "inside anchors?); write the values out, or use fewer aliases")
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise YamlLimitError(f"the node at line {node.start_mark.line + 1} contains an "
                                 "alias of itself; a workflow cannot be recursive")
        if children and depth > MAX_YAML_DEPTH:
            raise YamlLimitError(f"lists and mappings are nested more than {MAX_YAML_DEPTH} "
                                 f"levels deep (at line {node.start_mark.line + 1})")
        open_nodes.add(id(node))
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in children)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _key_path(root: yaml.Node | None, target: yaml.Node) -> str | None:
    """The dotted key path from ``root`` to the node ``target`` ("" for the root itself,
    None when not found); list items appear as ``[i]``. Only used to word an error."""
    trail: list[tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    visited: set[int] = set()
    while trail:
        node, path = trail.pop()
        if node is target:
            return path
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                trail.append((value, f"{path}.{name}" if path else str(name)))
        elif isinstance(node, yaml.SequenceNode):
            trail.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return None
