"""RFC 6902 JSON Patch: verified diffs and a strict, typed applier.

`make_patch` asks `jsonpatch` for a small diff and then proves it: applying the patch to
`old` must give exactly `new`, JSON types included (true is not 1, 1 is not 1.0). If it
ever does not, a structural diff that replaces the smallest differing value is used
instead, and that one is verified too. `apply_patch` is our own small applier so that
every failure is a PatchError and `test` compares JSON types exactly.
"""

from __future__ import annotations

from typing import Any

import jsonpatch

from user_memory.errors import PatchError

__all__ = [
    "OPERATIONS",
    "PatchError",
    "apply_patch",
    "copy_json",
    "escape_token",
    "json_equal",
    "make_patch",
    "parse_pointer",
    "storable_patch",
]

Operation = dict[str, Any]
OPERATIONS = frozenset({"add", "remove", "replace", "move", "copy", "test"})  # RFC 6902's six

# The bounds of the database's applier (migrations/015: user_memory_apply_patch), which applies an
# end user's patch to the head before it stores it.
MAX_STORED_OPERATIONS = 1000
MAX_STORED_POINTER_BYTES = 2048
MAX_STORED_POINTER_TOKENS = 100


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
        raise PatchError(f"JSON Pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON Pointer {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    out = []
    for token in tokens:
        i = token.find("~")
        while i != -1:
            if i + 1 >= len(token) or token[i + 1] not in "01":
                raise PatchError(f"JSON Pointer {pointer!r} has an invalid escape in {token!r}")
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


def apply_patch(doc: Any, patch: Any, *, in_place: bool = False, share: bool = False) -> Any:
    """Apply an RFC 6902 patch and return the new document; `doc` is never modified.

    Any invalid patch, pointer or failed `test` raises PatchError. The patch applies
    atomically: on error nothing is returned and the input is untouched. The result shares
    nothing with `doc` or `patch`.

    `share=True` copies only the containers the patch writes into: the result then shares
    the untouched subtrees with `doc` (both must be treated as read-only), which makes a
    small patch on a large document cheap, for checks that only read the result.
    `in_place=True` makes no copies at all, for callers that own both the document and the
    patch (rebuilding from freshly loaded rows): the document is then modified.
    """
    if not isinstance(patch, list):
        raise PatchError(f"a patch must be a list of operations, got {type(patch).__name__}")
    # Sharing or in place: copy on write (or not at all); otherwise copy the input once up front.
    writer = _Writer(doc, in_place) if in_place or share else _Writer(copy_json(doc), in_place=True)
    value_of = (lambda v: v) if in_place else copy_json
    for n, op in enumerate(patch):
        if not isinstance(op, dict):
            raise PatchError(f"operation {n} must be an object, got {type(op).__name__}")
        kind = op.get("op")
        if not isinstance(kind, str) or kind not in OPERATIONS:
            raise PatchError(f"operation {n} has an unknown op {kind!r}")
        pointer = _member(op, "path", n)
        tokens = parse_pointer(pointer)
        if kind == "add":
            writer.add(tokens, value_of(_member(op, "value", n)), pointer)
        elif kind == "remove":
            writer.remove(tokens, pointer)
        elif kind == "replace":
            value = value_of(_member(op, "value", n))
            _resolve(writer.root, tokens, pointer)  # must exist
            writer.replace(tokens, value, pointer)
        elif kind == "test":
            if not json_equal(_resolve(writer.root, tokens, pointer), _member(op, "value", n)):
                raise PatchError(f"operation {n}: test failed at {pointer!r}")
        else:  # move, copy
            source = _member(op, "from", n)
            from_tokens = parse_pointer(source)
            if kind == "move":
                if from_tokens == tokens:
                    _resolve(writer.root, tokens, pointer)
                    continue
                if tokens[: len(from_tokens)] == from_tokens:
                    raise PatchError(f"operation {n}: cannot move {source!r} into its own child {pointer!r}")
                value = writer.remove(from_tokens, source)
            else:
                # A fresh copy: the same object must never sit at two places of the result.
                value = copy_json(_resolve(writer.root, from_tokens, source))
            writer.add(tokens, value, pointer)
    return writer.root


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
    if not isinstance(pointer, str):
        return True  # no such member (`from` of most operations)
    return pointer.count("/") <= MAX_STORED_POINTER_TOKENS and (
        len(pointer) * 4 <= MAX_STORED_POINTER_BYTES or len(pointer.encode()) <= MAX_STORED_POINTER_BYTES
    )


def storable_patch(patch: list[Operation], document: Any) -> list[Operation]:
    """`patch` when the database's applier takes it (operations and pointers within its bounds),
    else one operation that replaces the whole document with `document` (the patch's result)."""
    if len(patch) <= MAX_STORED_OPERATIONS and all(
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
