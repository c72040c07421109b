// A patch as a person reads it: what was added, removed or changed where, with the value before
// (taken from the older document as each operation finds it) and after.

function tokens(pointer) {
  return pointer === "" ? [] : pointer.split("/").slice(1).map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
}

function parentOf(doc, pointer) {
  const path = tokens(pointer);
  let node = doc;
  for (const t of path.slice(0, -1)) {
    if (node === null || typeof node !== "object") return [undefined, undefined];
    node = node[t];
  }
  return [node, path[path.length - 1]];
}

export function valueAt(doc, pointer) {
  let node = doc;
  for (const t of tokens(pointer)) {
    if (node === null || typeof node !== "object" || !(t in node)) return undefined;
    node = node[t];
  }
  return node;
}

function put(doc, pointer, value, insert) {
  const [parent, key] = parentOf(doc, pointer);
  if (Array.isArray(parent)) {
    const index = key === "-" ? parent.length : Number(key);
    if (insert) parent.splice(index, 0, value);
    else parent[index] = value;
  } else if (parent && typeof parent === "object") {
    parent[key] = value;
  }
}

function drop(doc, pointer) {
  const [parent, key] = parentOf(doc, pointer);
  if (Array.isArray(parent)) parent.splice(Number(key), 1);
  else if (parent && typeof parent === "object") delete parent[key];
}

// [{kind, path, before, after}] for each operation (test operations are left out).
export function describePatch(patch, older) {
  let doc = structuredClone(older ?? {});
  const changes = [];
  for (const op of patch) {
    const before = op.path === "" ? doc : valueAt(doc, op.path);
    switch (op.op) {
      case "add":
        changes.push({ kind: before === undefined || op.path.endsWith("/-") ? "added" : "changed", path: op.path, before: op.path.endsWith("/-") ? undefined : before, after: op.value });
        if (op.path === "") doc = structuredClone(op.value);
        else put(doc, op.path, structuredClone(op.value), true);
        break;
      case "replace":
        changes.push({ kind: "changed", path: op.path, before, after: op.value });
        if (op.path === "") doc = structuredClone(op.value);
        else put(doc, op.path, structuredClone(op.value), false);
        break;
      case "remove":
        changes.push({ kind: "removed", path: op.path, before, after: undefined });
        drop(doc, op.path);
        break;
      case "move": {
        const moved = valueAt(doc, op.from);
        changes.push({ kind: "moved", path: op.path, from: op.from, before: moved, after: moved });
        drop(doc, op.from);
        put(doc, op.path, moved, true);
        break;
      }
      case "copy": {
        const copied = structuredClone(valueAt(doc, op.from));
        changes.push({ kind: "added", path: op.path, from: op.from, before: undefined, after: copied });
        put(doc, op.path, copied, true);
        break;
      }
      default:
        break;
    }
  }
  return changes;
}
