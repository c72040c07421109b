"""RFC 6902 JSON Patch: verified diffs and a strict, typed applier.

`make_patch` asks `jsonpatch` for a small diff and then proves it: applying the patch to
`old` must give exactly `new`, JSON types included (true is not 1, 1 is not 1.0). If it
ever does not, a structural diff that replaces the smallest differing value is used
instead, and that one is verified too. `apply_patch` is our own small applier so that
every failure is a PatchError and `test` compares JSON types exactly.

An untrusted patch (an API body, a model's edits, a library caller's) is applied with a
`PatchBudget`: its operations and pointers are checked at the door (the database applier's
bounds, PatchOverBounds), and the working document's size is kept as it goes, so that a copy that
would take it past the budget is refused before it is made (DocumentGrowsTooLarge). The size is an
upper bound of the compact JSON: each value added, replaced with or copied counts at its
pydantic-core length, a new member its key, and what is removed is never measured (that would cost
as much as the copy it prevents), so the budget bounds both the memory and the work of a patch.
The document's nesting is kept the same way (a measured value is nested at most 255 levels, a
move adds the levels its new place adds): past MAX_NESTING, PatchOverBounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonpatch
from pydantic_core import PydanticSerializationError, to_json

from user_memory.errors import DocumentGrowsTooLarge, InvalidPointer, PatchError, PatchOverBounds

__all__ = [
    "MAX_OPERATIONS",
    "MAX_POINTER_BYTES",
    "MAX_POINTER_TOKENS",
    "OPERATIONS",
    "PatchBudget",
    "PatchError",
    "apply_patch",
    "check_bounds",
    "check_growth",
    "copy_json",
    "escape_token",
    "json_bytes",
    "json_equal",
    "make_patch",
    "parse_pointer",
    "storable_patch",
]

Operation = dict[str, Any]
OPERATIONS = frozenset({"add", "remove", "replace", "move", "copy", "test"})  # RFC 6902's six

# The bounds of the database's applier (migrations/015 and 019: user_memory_apply_patch), which
# applies an end user's patch to the head before it stores it; an untrusted patch is held to them
# here too (PatchBudget), before anything is applied.
MAX_OPERATIONS = 1000
MAX_POINTER_BYTES = 2048
MAX_POINTER_TOKENS = 100
# A new member costs its key, its quotes, the colon and a comma beside its value.
_MEMBER_BYTES = 4
# The nesting pydantic-core writes (deeper values it refuses): every value the budget measured is
# within it. A working document may be nested at most MAX_NESTING levels: what the service reads,
# encodes and compares recurses once a level, and Python stops near 1,000 (a patch of adds and
# moves deeper, 11 KB, made one of 1,100 levels whose size check failed as a 500).
MEASURED_NESTING = 255
MAX_NESTING = 512
# JSON with every non-ASCII character escaped is at least as long as the compact UTF-8 text (an
# escape is 6 bytes, a character at most 4): the measure of what pydantic-core does not write.
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


class PatchBudget:
    """What one untrusted change may do to a document: at most `max_operations` operations (None:
    any number) and pointers within the database's bounds, checked at the door, and a working
    document kept under `max_bytes` along the way (twice the document limit, by convention).

    `size` (and `nesting`) are the working document's once known (measured on first use, then
    kept between patches that share the budget: a model's edits, applied one by one). A patch that
    fails leaves them as they were before it.
    """

    __slots__ = ("max_bytes", "max_operations", "nesting", "operations", "size")

    def __init__(self, max_bytes: int, *, max_operations: int | None = MAX_OPERATIONS, size: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_operations = max_operations
        self.size = size
        self.operations = 0
        self.nesting: int | None = None  # an upper bound of the working document's nesting


def json_bytes(value: Any, where: str = "") -> int:
    """An upper bound of the compact JSON bytes of `value`, at C speed (pydantic-core's JSON; the
    ASCII-escaped text for what it does not write, a lone surrogate). PatchOverBounds for a value
    nested deeper than pydantic-core writes (MEASURED_NESTING levels): no document of this service is."""
    try:
        return len(to_json(value))
    except PydanticSerializationError as err:
        if "depth" in str(err):
            raise PatchOverBounds(f"{where}the value is nested too deeply to measure") from None
    try:
        return len(_ASCII_ENCODER.encode(value))
    except (RecursionError, TypeError, ValueError):
        raise PatchOverBounds(f"{where}the value cannot be measured as JSON") from None


def check_bounds(patch: Any, max_operations: int | None = MAX_OPERATIONS) -> None:
    """PatchOverBounds when `patch` has more than `max_operations` operations or a pointer over
    MAX_POINTER_BYTES bytes or MAX_POINTER_TOKENS tokens (what else is wrong, apply_patch says)."""
    if not isinstance(patch, list):
        return
    if max_operations is not None and len(patch) > max_operations:
        raise PatchOverBounds(f"the patch has {len(patch):,} operations, over the limit of {max_operations:,}")
    for n, op in enumerate(patch):
        if isinstance(op, dict):
            for member in ("path", "from"):
                pointer = op.get(member)
                if isinstance(pointer, str) and not _pointer_within_bounds(pointer):
                    raise PatchOverBounds(
                        f"operation {n}: JSON Pointer {member!r} is over the limits of {MAX_POINTER_BYTES:,} bytes "
                        f"and {MAX_POINTER_TOKENS} tokens"
                    )


def _pointer_within_bounds(pointer: str) -> bool:
    return pointer.count("/") <= MAX_POINTER_TOKENS and (
        len(pointer) * 4 <= MAX_POINTER_BYTES or len(pointer.encode(errors="surrogatepass")) <= MAX_POINTER_BYTES
    )


def check_growth(document: Any, value: Any, max_bytes: int) -> None:
    """DocumentGrowsTooLarge when `document` and `value` together are over `max_bytes`: the bound of
    a change that places each of its values once (a merge patch, a tool's section update), checked
    before the change is made."""
    size = json_bytes(document) + json_bytes(value)
    if size > max_bytes:
        raise DocumentGrowsTooLarge("", size, max_bytes)


# JSON's scalar types: compared with ==, once their types are the same.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values with exact types: True != 1, 1 != 1.0, also inside containers."""
    # Every patch is verified with it over the whole document (make_patch): members are compared
    # in the loop, and only containers recurse (about twice as fast as a call per value).
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for key, x in a.items():
            if key not in b:
                return False
            y = b[key]
            t = type(x)
            if t is not type(y) or not (x == y if t in _SCALARS else json_equal(x, y)):
                return False
        return True
    if isinstance(a, list):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            t = type(x)
            if t is not type(y) or not (x == y if t in _SCALARS else json_equal(x, y)):
                return False
        return True
    return bool(a == b)


def escape_token(key: str) -> str:
    """Escape one object key as a JSON Pointer reference token."""
    return key.replace("~", "~0").replace("/", "~1")


def parse_pointer(pointer: Any) -> list[str]:
    """Split a JSON Pointer (RFC 6901) into unescaped reference tokens."""
    if not isinstance(pointer, str):
        raise InvalidPointer(f"JSON Pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise InvalidPointer(f"JSON Pointer {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    out = []
    for token in tokens:
        i = token.find("~")
        while i != -1:
            if i + 1 >= len(token) or token[i + 1] not in "01":
                raise InvalidPointer(f"JSON Pointer {pointer!r} has an invalid escape in {token!r}")
            i = token.find("~", i + 2)
        out.append(token.replace("~1", "/").replace("~0", "~"))
    return out


def _index(token: str, size: int, *, allow_end: bool, pointer: str) -> int:
    if allow_end and token == "-":
        return size
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"{pointer!r}: {token!r} is not a valid array index")
    index = int(token)
    limit = size if allow_end else size - 1
    if index > limit:
        raise PatchError(f"{pointer!r}: index {index} is out of range for an array of {size}")
    return index


def _resolve(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"{pointer!r}: member {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), allow_end=False, pointer=pointer)]
        else:
            raise PatchError(f"{pointer!r}: cannot descend into a {type(node).__name__}")
    return node


def copy_json(value: Any) -> Any:
    """Deep copy of a JSON value (dicts, lists, scalars); several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


class _Writer:
    """Applies operations copy-on-write: a container is copied (shallowly) the first time an
    operation writes inside it, so the input is never modified and untouched subtrees are shared.
    A patch that changes 5% of a document copies about 5% of it."""

    def __init__(self, doc: Any, in_place: bool) -> None:
        self.in_place = in_place
        self.owned: dict[int, Any] = {}  # id -> container created here (kept alive so ids stay unique)
        self.root = doc if in_place else self._own(doc)

    def _own(self, node: Any) -> Any:
        if self.in_place or not isinstance(node, dict | list) or id(node) in self.owned:
            return node
        copied: Any = dict(node) if isinstance(node, dict) else list(node)
        self.owned[id(copied)] = copied
        return copied

    def parent(self, tokens: list[str], pointer: str) -> Any:
        """The container that holds the last token, owned (safe to modify)."""
        # The root too: after a move or copy to "", it can be a subtree of the input.
        node = self.root = self._own(self.root)
        for token in tokens[:-1]:
            if isinstance(node, dict):
                if token not in node:
                    raise PatchError(f"{pointer!r}: member {token!r} does not exist")
                key: Any = token
            elif isinstance(node, list):
                key = _index(token, len(node), allow_end=False, pointer=pointer)
            else:
                raise PatchError(f"{pointer!r}: cannot descend into a {type(node).__name__}")
            child = node[key]
            owned = self._own(child)
            if owned is not child:
                node[key] = owned
            node = owned
        if not isinstance(node, dict | list):
            raise PatchError(f"{pointer!r}: parent is a {type(node).__name__}, not a container")
        return node

    def add(self, tokens: list[str], value: Any, pointer: str) -> None:
        if not tokens:
            self.root = value
            return
        parent = self.parent(tokens, pointer)
        if isinstance(parent, dict):
            parent[tokens[-1]] = value
        else:
            parent.insert(_index(tokens[-1], len(parent), allow_end=True, pointer=pointer), value)

    def remove(self, tokens: list[str], pointer: str) -> Any:
        if not tokens:
            raise PatchError("cannot remove the whole document")
        parent = self.parent(tokens, pointer)
        if isinstance(parent, dict):
            if tokens[-1] not in parent:
                raise PatchError(f"{pointer!r}: member {tokens[-1]!r} does not exist")
            return parent.pop(tokens[-1])
        return parent.pop(_index(tokens[-1], len(parent), allow_end=False, pointer=pointer))

    def replace(self, tokens: list[str], value: Any, pointer: str) -> None:
        if not tokens:
            self.root = value
            return
        parent = self.parent(tokens, pointer)
        if isinstance(parent, dict):
            if tokens[-1] not in parent:
                raise PatchError(f"{pointer!r}: member {tokens[-1]!r} does not exist")
            parent[tokens[-1]] = value
        else:
            parent[_index(tokens[-1], len(parent), allow_end=False, pointer=pointer)] = value


def _member(op: Operation, name: str, n: int) -> Any:
    if name not in op:
        raise PatchError(f"operation {n} ({op.get('op')!r}) is missing {name!r}")
    return op[name]


def apply_patch(
    doc: Any, patch: Any, *, in_place: bool = False, share: bool = False, budget: PatchBudget | None = None
) -> Any:
    """Apply an RFC 6902 patch and return the new document; `doc` is never modified.

    Any invalid patch, pointer or failed `test` raises PatchError. The patch applies
    atomically: on error nothing is returned and the input is untouched. The result shares
    nothing with `doc` or `patch`.

    `budget` holds an untrusted patch to its bounds: PatchOverBounds at the door (operations,
    pointers), DocumentGrowsTooLarge at the first operation that would take the working document
    past `budget.max_bytes`, before that operation copies or adds anything. Without it (a stored
    history being rebuilt, a diff of our own being verified) the patch is trusted.

    `share=True` copies only the containers the patch writes into: the result then shares
    the untouched subtrees with `doc` (both must be treated as read-only), which makes a
    small patch on a large document cheap, for checks that only read the result.
    `in_place=True` makes no copies at all, for callers that own both the document and the
    patch (rebuilding from freshly loaded rows): the document is then modified.
    """
    if not isinstance(patch, list):
        raise PatchError(f"a patch must be a list of operations, got {type(patch).__name__}")
    if budget is not None:
        check_bounds(patch, None if budget.max_operations is None else budget.max_operations - budget.operations)
    application = _Application(doc, in_place=in_place, share=share, budget=budget)
    for n, op in enumerate(patch):
        if not isinstance(op, dict):
            raise PatchError(f"operation {n} must be an object, got {type(op).__name__}")
        kind = op.get("op")
        if not isinstance(kind, str) or kind not in OPERATIONS:
            raise PatchError(f"operation {n} has an unknown op {kind!r}")
        pointer = _member(op, "path", n)
        getattr(application, kind)(op, n, pointer, parse_pointer(pointer))
    if budget is not None:
        budget.size, budget.nesting = application.size, application.nesting
        budget.operations += len(patch)
    return application.writer.root


class _Application:
    """One patch being applied: the working document, and the budget's measure of it (size and
    nesting) when the patch is untrusted. One method per operation, named as the operation."""

    def __init__(self, doc: Any, *, in_place: bool, share: bool, budget: PatchBudget | None) -> None:
        self.budget = budget
        self.size = self.nesting = 0
        if budget is not None:
            if budget.size is None or budget.nesting is None:
                budget.size, budget.nesting = _document_bytes(doc)
            self.size, self.nesting = budget.size, budget.nesting
        # Sharing or in place: copy on write (or not at all); otherwise copy the input once up front.
        self.writer = _Writer(doc, in_place) if in_place or share else _Writer(copy_json(doc), in_place=True)
        self.value_of: Callable[[Any], Any] = (lambda v: v) if in_place else copy_json

    def _measure(self, tokens: list[str], value: Any, n: int, *, member: bool = True) -> None:
        """Count `value` placed at `tokens` against the budget, before anything is copied or added."""
        if self.budget is not None:
            added = json_bytes(value, f"operation {n}: ")
            self.size = _grown(self.size, tokens, added, self.budget, n, member=member)
            self.nesting = _nested(self.nesting, len(tokens) + MEASURED_NESTING, n)

    def add(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        value = _member(op, "value", n)
        self._measure(tokens, value, n)
        self.writer.add(tokens, self.value_of(value), pointer)

    def remove(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        self.writer.remove(tokens, pointer)

    def replace(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        value = _member(op, "value", n)
        _resolve(self.writer.root, tokens, pointer)  # must exist
        self._measure(tokens, value, n, member=False)
        self.writer.replace(tokens, self.value_of(value), pointer)

    def test(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        if not json_equal(_resolve(self.writer.root, tokens, pointer), _member(op, "value", n)):
            raise PatchError(f"operation {n}: test failed at {pointer!r}")

    def move(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        source = _member(op, "from", n)
        from_tokens = parse_pointer(source)
        if from_tokens == tokens:
            _resolve(self.writer.root, tokens, pointer)
            return
        if tokens[: len(from_tokens)] == from_tokens:
            raise PatchError(f"operation {n}: cannot move {source!r} into its own child {pointer!r}")
        if self.budget is not None and tokens:  # the value only changes places: its new key is the growth
            self.size = _grown(self.size, tokens, 0, self.budget, n)
            # and it is nested deeper by as many levels as its new place is deeper
            self.nesting = _nested(self.nesting, self.nesting + max(0, len(tokens) - len(from_tokens)), n)
        value = self.writer.remove(from_tokens, source)
        if self.budget is not None and not tokens:  # the moved value becomes the whole document
            self.size = json_bytes(value, f"operation {n}: ")
        self.writer.add(tokens, value, pointer)

    def copy(self, op: dict[str, Any], n: int, pointer: str, tokens: list[str]) -> None:
        source = _member(op, "from", n)
        found = _resolve(self.writer.root, parse_pointer(source), source)
        self._measure(tokens, found, n)  # measured before it is copied: a copy over the budget is never made
        # A fresh copy: the same object must never sit at two places of the result.
        self.writer.add(tokens, copy_json(found), pointer)


def _document_bytes(doc: Any) -> tuple[int, int]:
    """The budget's start: the document's measure and a bound of its nesting (the ASCII-escaped
    text when it is nested deeper than pydantic-core writes; then nothing may nest it deeper)."""
    try:
        return json_bytes(doc), MEASURED_NESTING
    except PatchOverBounds:
        try:
            return len(_ASCII_ENCODER.encode(doc)), MAX_NESTING
        except (RecursionError, TypeError, ValueError):
            raise PatchOverBounds("the document is nested too deeply to measure") from None


def _nested(nesting: int, placed: int, n: int) -> int:
    """The bound of the working document's nesting once a value nested at most `placed` levels
    (its place's depth included) is in it; PatchOverBounds when that is over MAX_NESTING."""
    if placed <= nesting:
        return nesting
    if placed > MAX_NESTING:
        raise PatchOverBounds(f"operation {n}: the patch would nest the document more than {MAX_NESTING} levels deep")
    return placed


def _grown(size: int, tokens: list[str], added: int, budget: PatchBudget, n: int, *, member: bool = True) -> int:
    """The working document's size once `added` bytes are placed at `tokens` (the whole document
    when `tokens` is empty); DocumentGrowsTooLarge when that is over the budget."""
    grown = size + added + (len(tokens[-1]) + _MEMBER_BYTES if member else 0) if tokens else added
    if grown > budget.max_bytes:
        raise DocumentGrowsTooLarge(f"operation {n}: ", grown, budget.max_bytes)
    return grown


def _structural_diff(old: Any, new: Any, path: str, ops: list[Operation]) -> None:
    """Diff that recurses into objects and replaces any other differing value whole."""
    if json_equal(old, new):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape_token(key)}"})
        for key, value in new.items():
            child = f"{path}/{escape_token(key)}"
            if key in old:
                _structural_diff(old[key], value, child, ops)
            else:
                ops.append({"op": "add", "path": child, "value": copy_json(value)})
        return
    ops.append({"op": "replace", "path": path, "value": copy_json(new)})


def _reproduces(old: Any, patch: list[Operation], new: Any) -> bool:
    try:
        return json_equal(apply_patch(old, patch, share=True), new)
    except PatchError:
        return False


def make_patch(old: Any, new: Any) -> list[Operation]:
    """Return RFC 6902 operations turning `old` into `new`, verified to reproduce `new` exactly."""
    if json_equal(old, new):
        return []
    try:
        patch: list[Operation] = jsonpatch.make_patch(old, new).patch
    except Exception:  # any diff failure falls back to the structural diff below
        patch = []
    if patch and _reproduces(old, patch, new):
        return patch
    fallback: list[Operation] = []
    _structural_diff(old, new, "", fallback)
    if not _reproduces(old, fallback, new):  # pragma: no cover - structural diff is correct by construction
        fallback = [{"op": "replace", "path": "", "value": copy_json(new)}]
    return fallback


def _storable_pointer(pointer: Any) -> bool:
    # not a string: no such member (`from` of most operations)
    return not isinstance(pointer, str) or _pointer_within_bounds(pointer)


def storable_patch(patch: list[Operation], document: Any) -> list[Operation]:
    """`patch` when the database's applier takes it (operations and pointers within its bounds),
    else one operation that replaces the whole document with `document` (the patch's result)."""
    if len(patch) <= MAX_OPERATIONS and all(
        _storable_pointer(op.get("path")) and _storable_pointer(op.get("from")) for op in patch
    ):
        return patch
    return [{"op": "replace", "path": "", "value": copy_json(document)}]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: `patch` applied to `target`, as a new value.

    An object patch merges into the target member by member, recursively (a target that is not
    an object counts as `{}`); a `null` member deletes that key (absent keys are no error); any
    other value, lists included, replaces the target whole. Keys the patch does not name are
    kept as they are. Neither argument is modified and the result shares nothing with them.
    """
    return merge_into(copy_json(target), patch)


def merge_into(target: Any, patch: Any) -> Any:
    """`merge_patch` into a `target` the caller owns: modified in place, and returned."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_into(target.get(key), value)
    return target
