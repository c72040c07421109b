// The console: see and steer one user's memory. Views are addressed by the fragment
// (#/memory, the landing: the memory as a person reads it, its recent changes beside it;
// #/timeline, #/version/12, #/compare/11/12, #/edit, ...; ?u=<user id> for an operator's look-up).

import { Api, ApiError } from "./api.js";
import { claimsOf, currentToken, isOperator, signOut, startSignIn } from "./auth.js";
import { describePatch } from "./diff.js";
import { append, bytes, clear, h, json, orderLike, plural, pointerWords, readableDocument, short, when } from "./dom.js";
import { barChart, lineChart } from "./plot.js";

const PAGE = 50;
const RECENT = 10; // versions beside the memory on the landing
// flash: a line a view shows next to the button that caused it, after it re-rendered (a save);
// savedOrder: the document as the editor last saved it, whose key order the editor keeps.
const state = { config: null, token: null, claims: null, operator: false, user: null, flash: null, savedOrder: null };
const main = () => document.getElementById("main");

// -- start ------------------------------------------------------------------------------------------

async function start() {
  try {
    const answer = await fetch("console/config.json", { credentials: "omit" });
    state.config = await answer.json();
    const current = await currentToken(state.config);
    state.token = current.token;
    notice(current.ignored);
  } catch (err) {
    return showSignIn(err.message);
  }
  if (!state.token) return showSignIn();
  state.claims = claimsOf(state.token);
  state.operator = isOperator(state.claims, state.config.operator_scope);
  document.getElementById("who").textContent = state.operator
    ? `Operator ${state.claims.sub}`
    : `Signed in as ${state.claims.sub}`;
  const signOutButton = document.getElementById("sign-out");
  signOutButton.hidden = false;
  signOutButton.addEventListener("click", () => {
    signOut();
    location.hash = "";
    location.reload();
  });
  if (state.operator) {
    const lookup = document.getElementById("lookup");
    lookup.hidden = false;
    lookup.addEventListener("submit", (event) => {
      event.preventDefault();
      const user = new FormData(lookup).get("user").trim();
      if (user) go("memory", [], user);
    });
  }
  window.addEventListener("hashchange", route);
  route();
}

function showSignIn(problem) {
  const view = clear(main());
  append(view, h("h2", {}, "Sign in"));
  if (problem) append(view, h("p", { class: "error", role: "alert" }, problem));
  if (state.config && state.config.issuer) {
    const status = h("span", { class: "status", role: "status" });
    const signIn = () => startSignIn(state.config).catch((e) => { status.textContent = e.message; });
    append(view, h("div", { class: "actions" }, h("button", { type: "button", onclick: signIn }, "Sign in"), status));
  } else {
    append(
      view,
      h("p", {}, "This console signs in with a development token. On the machine running ", h("code", {}, "user-memory serve"), ", run:"),
      h("pre", {}, "user-memory console <user id> [--operator]"),
      h("p", {}, "and open the URL it prints."),
    );
  }
}

// -- routing ------------------------------------------------------------------------------------------

const VIEWS = {
  memory: ["Memory", memoryView],
  timeline: ["Timeline", timelineView],
  version: ["Version", versionView],
  compare: ["Compare", compareView],
  edit: ["Edit", editView],
  kv: ["Key-value", kvView],
  companion: ["Companion", companionView],
  conversations: ["Conversations", conversationsView],
  search: ["Search", searchView],
  plots: ["Plots", plotsView],
  runs: ["Runs", runsView],
  run: ["Run", runView],
  export: ["Export", exportView],
  erasures: ["Erasures", erasuresView],
  webhooks: ["Webhooks", webhooksView],
};
const NAV = ["memory", "timeline", "compare", "edit", "kv", "companion", "conversations", "search", "plots", "runs", "export", "erasures", "webhooks"];
// Views of the whole deployment (operators, no user looked up), and views of one's own account.
const DEPLOYMENT_VIEWS = ["runs", "run", "erasures", "webhooks"];
const OWN_VIEWS = ["export"];

function link(view, args = [], user = state.user, extra = {}) {
  const query = new URLSearchParams(extra);
  if (user) query.set("u", user);
  const text = query.toString();
  return `#/${[view, ...args].map(encodeURIComponent).join("/")}${text ? "?" + text : ""}`;
}

function go(view, args = [], user = state.user, extra = {}) {
  location.hash = link(view, args, user, extra);
}

function parseHash() {
  const [path, query] = location.hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { view: parts[0] || "memory", args: parts.slice(1), query: new URLSearchParams(query || "") };
}

function api() {
  return new Api(state.token, state.user);
}

function canWrite() {
  return !state.user; // operators read other users' memories; writes are the user's own
}

let routed = 0;

async function route() {
  const { view, args, query } = parseHash();
  const generation = ++routed;
  state.user = query.get("u");
  const [title, render] = VIEWS[view] || VIEWS.memory;
  renderNav(view);
  // Each view renders into a container of its own: one still loading when the address changes
  // again finishes into a container no longer on the page.
  const container = h("div", { class: "view" });
  const whose = DEPLOYMENT_VIEWS.includes(view) ? "every user" : state.user ? `user ${state.user}` : "your memory";
  const lookUp = state.operator && !state.user && (VIEWS[view] ? view : "memory") === "memory";
  append(container, h("h2", { id: "view-title" }, lookUp ? "Look up a user" : `${title}: ${whose}`));
  main().removeAttribute("data-ready");
  clear(main()).append(container);
  document.title = `${title} · user-memory console`;
  try {
    await render(container, args, query);
  } catch (err) {
    showError(container, err);
  }
  if (generation === routed) {
    main().setAttribute("data-ready", view);
    performance.mark(`console-ready:${view}`); // time to interactive (bench/bench_console.py)
  }
}

function renderNav(current) {
  const nav = clear(document.getElementById("nav"));
  nav.hidden = false;
  const items = NAV.filter((v) => v !== "companion" || state.config.schema === "companion").filter(
    (v) => v !== "runs" || (state.operator && !state.user), // runs span users: an operator's, not a look-up's
  ).filter(
    (v) => (!DEPLOYMENT_VIEWS.includes(v) || (state.operator && !state.user)) && (!OWN_VIEWS.includes(v) || !state.user),
  );
  append(
    nav,
    h(
      "ul",
      {},
      items.map((v) =>
        h("li", {}, h("a", { href: link(v), "aria-current": v === current ? "page" : false }, VIEWS[v][0])),
      ),
    ),
  );
}

function showError(container, err) {
  if (err instanceof ApiError && err.status === 403) {
    append(container, h("p", { class: "error", role: "alert" }, `Not allowed (403): ${err.message}`));
  } else if (err instanceof ApiError && err.status === 401) {
    // An expired or refused token: this tab's token is dropped, and signing in starts again.
    signOut();
    append(
      container,
      h("p", { class: "error", role: "alert" }, `Not signed in (401): ${err.message}`),
      h("button", { type: "button", onclick: () => location.reload() }, "Sign in again"),
    );
  } else {
    append(container, h("p", { class: "error", role: "alert" }, `Failed: ${err.message}`));
  }
}

// The line a view shows next to `button`'s place after re-rendering, once.
function takeFlash(place) {
  const flash = state.flash;
  if (!flash || flash.place !== place) return "";
  state.flash = null;
  return flash.text;
}

// Asks before `act` runs, in `target` (beside the button that asked): nothing is written until
// the person confirms; Cancel (or Escape) leaves everything as it was.
function confirmFirst(target, question, yes, act) {
  clear(target);
  const cancel = () => clear(target);
  const box = h(
    "div",
    { class: "confirm", role: "group", "aria-label": "Confirm", onkeydown: (e) => e.key === "Escape" && cancel() },
    h("p", {}, question),
    h("div", { class: "actions" },
      h("button", { type: "button", class: "danger", onclick: () => { clear(target); act(); } }, yes),
      h("button", { type: "button", class: "secondary", onclick: cancel }, "Cancel")),
  );
  append(target, box);
  box.querySelector("button").focus();
}

// A message that stays until the page is loaded again (a view's status line replaces `say`'s).
function notice(text) {
  const shown = document.getElementById("notice");
  shown.textContent = text || "";
  shown.hidden = !text;
}

// -- the landing: the memory as a person reads it, its recent changes beside it -----------------------

async function memoryView(container) {
  if (state.operator && !state.user) {
    append(
      container,
      h("p", {}, "Enter a user's id in the User id field above to see their memory, as they would, with its history. Every look is logged with your id."),
    );
    document.getElementById("lookup-user").focus();
    return;
  }
  const [head, recent] = await Promise.all([api().get("memory"), api().get("memory/history", { limit: RECENT })]);
  const memory = h("section", { class: "memory", "aria-labelledby": "memory-title" },
    h("h3", { id: "memory-title" }, head.version ? `The memory at version ${head.version}` : "The memory"));
  if (!head.version) {
    append(memory, h("p", {}, "Nothing remembered yet: the first nightly run, an agent tool or an edit writes version 1."));
  } else {
    append(
      memory,
      h("p", { class: "facts" }, `Written ${when(head.data.created_at)} · ${sourceKind(head.data)}`),
      readableDocument(head.data.document),
      h("p", {}, h("a", { href: link("version", [head.version]), class: "action" }, "This version, with its JSON")),
    );
  }
  const items = recent.data.items;
  const changes = h("aside", { class: "recent", "aria-labelledby": "recent-title" },
    h("h3", { id: "recent-title" }, "Recent changes"),
    items.length
      ? h("ol", { class: "recent-list", "aria-label": "Recent versions, newest first" }, items.map(timelineItem))
      : h("p", {}, "No versions yet."),
    recent.data.next_before !== null ? h("p", {}, h("a", { href: link("timeline"), class: "action" }, "Every version (timeline)")) : "");
  append(container, h("div", { class: "landing" }, memory, changes));
}

// -- timeline -----------------------------------------------------------------------------------------

function sourceKind(item) {
  const source = item.source || "";
  if (item.provenance && (item.provenance.mode === "edit" || item.provenance.mode === "document")) return "nightly run";
  if (source.startsWith("agent:")) return "agent tool";
  if (source.startsWith("api: revert")) return "revert";
  if (source.startsWith("api: prune")) return "prune";
  if (source.startsWith("api")) return "API";
  if (source.startsWith("daily summary") || source.startsWith("summary")) return "nightly run";
  return source ? "service" : "unknown";
}

// Dollars with enough digits for one user's day (a nightly summary costs a fraction of a cent).
function usd(n) {
  return `$${n.toFixed(n > 0 && n < 0.01 ? 6 : 2)}`;
}

function provenanceOf(p) {
  if (!p) return null;
  const tokens = (p.prompt_tokens || 0) + (p.completion_tokens || 0);
  const parts = [];
  const facts = [];
  if (p.model) facts.push(`model ${p.model}`);
  if (p.mode) facts.push(`mode ${p.mode}`);
  if (p.activities !== undefined) facts.push(`${p.activities} activities`);
  facts.push(`${tokens.toLocaleString("en")} tokens`);
  if (typeof p.cost_usd === "number") facts.push(usd(p.cost_usd));
  parts.push(h("p", { class: "facts" }, facts.join(" · ")));
  const list = (title, items, line) =>
    items && items.length ? [h("h4", {}, title), h("ul", { class: "reasons" }, items.map((x) => h("li", {}, line(x))))] : [];
  parts.push(
    ...list("Refused", p.refused, (e) => [h("code", {}, `${e.op} ${pointerWords(e.path)}`), " — refused: ", e.why]),
    ...list("Restored", p.restored, (e) => [h("code", {}, pointerWords(e.path)), " — ", e.why]),
    ...list("Filled", p.filled, (e) => [h("code", {}, pointerWords(e.path || "")), " — ", e.why || ""]),
    ...list("Kept people's edits", p.kept_human_edits, (e) => [h("code", {}, pointerWords(e.path)), " — ", e.why || ""]),
    ...list("Ignored requests", p.ignored_requests, (e) => [e.kind, " — ", e.why]),
  );
  return parts;
}

function timelineItem(item) {
  const kind = sourceKind(item);
  const summary = [
    h("a", { href: link("version", [item.version]), class: "version" }, `v${item.version}`),
    " ",
    h("time", { datetime: item.created_at }, when(item.created_at)),
    " · ",
    h("span", { class: `kind kind-${kind.replace(" ", "-")}` }, kind),
    ` · ${item.operations} operation${item.operations === 1 ? "" : "s"}, ${bytes(item.change_bytes)}`,
  ];
  const p = item.provenance;
  const edits = p && p.edits ? p.edits.length : 0;
  const refused = p && p.refused ? p.refused.length : 0;
  const body = [h("p", { class: "line" }, summary), h("p", { class: "source" }, item.source || "")];
  // The model's reasons in sight, one line an edit; the rest (model, tokens, refusals) one click away.
  if (p && p.edits && p.edits.length) {
    body.push(
      h("ul", { class: "reasons", "aria-label": `Edits of version ${item.version}` },
        p.edits.map((e) => h("li", {}, h("code", {}, `${e.op} ${pointerWords(e.path)}`), " — ", e.reason || "(no reason given)"))),
    );
  }
  if (p) {
    body.push(
      h(
        "details",
        { class: "why" },
        h("summary", {}, `Why: ${edits} edit${edits === 1 ? "" : "s"} applied, ${refused} refused`),
        provenanceOf(p),
      ),
    );
  }
  if (item.version > 1) {
    body.push(h("a", { href: link("compare", [item.version - 1, item.version]), class: "action" }, `Compare with v${item.version - 1}`));
  }
  return h("li", { class: "entry" }, h("article", { "aria-label": `Version ${item.version}` }, body));
}

async function timelineView(container) {
  const asOf = h("form", { class: "inline", onsubmit: (event) => {
    event.preventDefault();
    const value = new FormData(event.target).get("at");
    if (value) go("version", ["as-of"], state.user, { at: new Date(value + "Z").toISOString() });
  } },
  h("label", { for: "as-of" }, "As of (UTC)"),
  h("input", { id: "as-of", name: "at", type: "datetime-local", required: true }),
  h("button", { type: "submit" }, "Show the memory then"));
  const list = h("ol", { class: "timeline", "aria-label": "Versions, newest first" });
  const more = h("button", { type: "button", class: "more", hidden: true }, "Load older versions");
  const shown = h("span", { class: "status", role: "status" });
  append(container, asOf, list, h("div", { class: "actions" }, more, shown));
  let before = null;
  let count = 0;
  const load = async () => {
    more.disabled = true;
    const { data } = await api().get("memory/history", { limit: PAGE, before });
    if (!data.items.length && before === null) append(list, h("li", {}, "No versions yet."));
    append(list, data.items.map(timelineItem));
    count += data.items.length;
    before = data.next_before;
    more.hidden = before === null;
    more.disabled = false;
    shown.textContent = count ? `${plural(count, "version")} shown` : "";
  };
  more.addEventListener("click", () => load().catch((err) => showError(container, err)));
  await load();
}

// -- one version, "as of" -----------------------------------------------------------------------------

async function versionView(container, args, query) {
  const asOf = args[0] === "as-of" ? query.get("at") : null;
  const found = await api().get("memory", asOf ? { as_of: asOf } : { version: args[0] });
  let headVersion = (await api().get("memory")).version;
  const v = found.data.version;
  const headLine = h("p", { id: "head-line" }, `The head is version ${headVersion}.`);
  append(
    container,
    h("p", {}, asOf ? `As of ${when(asOf)}: version ${v}` : `Version ${v}`, ` · written ${when(found.data.created_at)} · `, found.data.source || ""),
    headLine,
  );
  const actions = h("div", { class: "actions" });
  const toHead = h("a", { href: link("compare", [v, headVersion]), class: "action", hidden: v === headVersion }, `Compare with the head (v${headVersion})`);
  append(actions, toHead);
  const result = h("div", { class: "result" });
  if (canWrite() && v !== headVersion) {
    const revert = async () => {
      try {
        const written = await api().call("POST", "me/memory/revert", { body: { version: v }, ifMatch: headVersion });
        // The page now names the new head: its line, and the comparison it offers.
        headVersion = written.data.version;
        headLine.textContent = `The head is version ${headVersion}.`;
        toHead.href = link("compare", [v, headVersion]);
        toHead.textContent = `Compare with the head (v${headVersion})`;
        append(result, h("p", { class: "status", role: "status" }, `Reverted: version ${headVersion} has version ${v}'s document.`));
      } catch (err) {
        conflictOrError(result, err, () => route());
      }
    };
    append(
      actions,
      h("button", { type: "button", onclick: () => confirmFirst(
        result,
        `Revert to version ${v}? A new version is written with version ${v}'s document; the history keeps every version.`,
        `Yes, revert to version ${v}`,
        revert,
      ) }, `Revert to version ${v}`),
    );
  }
  append(
    container,
    actions,
    result,
    h("section", { class: "version-memory", "aria-label": `The memory at version ${v}` }, readableDocument(found.data.document)),
    h("details", { class: "raw" }, h("summary", {}, "The document as JSON"),
      h("pre", { class: "document", tabindex: 0, "aria-label": `Document at version ${v}` }, json(found.data.document))),
  );
}

// -- compare ------------------------------------------------------------------------------------------

async function compareView(container, args) {
  const head = await api().get("memory");
  const a = args[0] !== undefined ? Number(args[0]) : Math.max(0, head.version - 1);
  const b = args[1] !== undefined ? Number(args[1]) : head.version;
  append(
    container,
    h("form", { class: "inline", onsubmit: (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      go("compare", [form.get("a"), form.get("b")]);
    } },
    h("label", { for: "cmp-a" }, "From version"),
    h("input", { id: "cmp-a", name: "a", type: "number", min: 0, max: head.version, value: a, required: true }),
    h("label", { for: "cmp-b" }, "to version"),
    h("input", { id: "cmp-b", name: "b", type: "number", min: 0, max: head.version, value: b, required: true }),
    h("button", { type: "submit" }, "Compare")),
  );
  const [older, newer, diff] = await Promise.all([
    api().get("memory", { version: a }),
    api().get("memory", { version: b }),
    api().get("memory/diff", { from: a, to: b }),
  ]);
  const changes = describePatch(diff.data.patch, older.data.document);
  const words = { added: "Added", removed: "Removed", changed: "Changed", moved: "Moved" };
  append(
    container,
    h("h3", {}, `${changes.length} change${changes.length === 1 ? "" : "s"} from v${a} to v${b}`),
    h(
      "ul",
      { class: "changes" },
      changes.map((c) =>
        h(
          "li",
          { class: `change change-${c.kind}` },
          h("strong", {}, words[c.kind]),
          " ",
          h("code", {}, pointerWords(c.path)),
          c.from ? [" from ", h("code", {}, pointerWords(c.from))] : "",
          c.kind === "changed" ? [": ", h("del", {}, short(c.before)), " → ", h("ins", {}, short(c.after))] : "",
          c.kind === "added" ? [": ", h("ins", {}, short(c.after))] : "",
          c.kind === "removed" ? [": was ", h("del", {}, short(c.before))] : "",
        ),
      ),
    ),
    h("details", { class: "patch" }, h("summary", {}, "The patch (RFC 6902)"), h("pre", {}, json(diff.data.patch))),
    h(
      "div",
      { class: "side-by-side" },
      h("section", { "aria-label": `Version ${a}` }, h("h3", {}, `Version ${a}`), h("pre", { class: "document", tabindex: 0, "aria-label": `Document at version ${a}` }, json(older.data.document))),
      h("section", { "aria-label": `Version ${b}` }, h("h3", {}, `Version ${b}`), h("pre", { class: "document", tabindex: 0, "aria-label": `Document at version ${b}` }, json(newer.data.document))),
    ),
  );
}

// -- steer: edit, prune ---------------------------------------------------------------------------------

function conflictOrError(target, err, reload) {
  clear(target);
  if (err instanceof ApiError && err.conflict) {
    const now = err.problem.current_version;
    append(
      target,
      h(
        "div",
        { class: "conflict", role: "alert" },
        h("h3", {}, "Conflict: the memory changed meanwhile"),
        h("p", {}, `Someone else wrote version ${now ?? "newer"} after you loaded it. Nothing was saved.`),
        h("button", { type: "button", onclick: reload }, "Load the latest version"),
      ),
    );
  } else {
    append(target, h("p", { class: "error", role: "alert" }, `Not saved: ${err.message}`));
  }
}

async function editView(container) {
  if (!canWrite()) {
    append(container, h("p", {}, "Operators read other users' memories here; edits are the user's own."));
    return;
  }
  const head = await api().get("memory");
  const version = head.version;
  const problems = h("ul", { id: "editor-problems", class: "problems", "aria-live": "polite" });
  const result = h("div", { class: "result" });
  const saveStatus = h("span", { class: "status", role: "status" }, takeFlash("save"));
  const pruneStatus = h("span", { class: "status", role: "status" }, takeFlash("prune"));
  const pruneConfirm = h("div", { class: "result" });
  const editor = h("textarea", { id: "editor", name: "document", rows: 24, spellcheck: "false", "aria-describedby": "editor-problems" });
  // The database keeps no key order: a document just saved is shown in the order it was written.
  const saved = state.savedOrder;
  state.savedOrder = null;
  editor.value = json(saved ? orderLike(head.data.document, saved) : head.data.document);

  const check = async () => {
    clear(problems);
    let document;
    try {
      document = JSON.parse(editor.value);
    } catch (err) {
      append(problems, h("li", {}, `Not JSON: ${err.message}`));
      editor.setAttribute("aria-invalid", "true");
      return null;
    }
    const { data } = await api().call("POST", "me/memory/validate", { body: document });
    append(problems, data.problems.map((p) => h("li", {}, h("code", {}, pointerWords(p.path)), ": ", p.message)));
    editor.setAttribute("aria-invalid", data.valid ? "false" : "true");
    return data.valid ? document : null;
  };
  const save = async (event) => {
    event.preventDefault();
    clear(result);
    saveStatus.textContent = "";
    try {
      const document = await check();
      if (!document) return;
      const written = await api().call("PUT", "me/memory", { body: document, ifMatch: version });
      state.savedOrder = document;
      state.flash = { place: "save", text: `Saved as version ${written.data.version}.` };
      await route(); // the editor now holds the saved version, the line beside Save says so
    } catch (err) {
      conflictOrError(result, err, () => route());
    }
  };
  const prune = async (section) => {
    try {
      const url = `me/memory?section=${encodeURIComponent(section)}`;
      const written = await api().call("DELETE", url, { ifMatch: version });
      state.flash = { place: "prune", text: `Pruned ${section}: version ${written.data.version}.` };
      await route();
    } catch (err) {
      conflictOrError(result, err, () => route());
    }
  };
  const sections = Object.keys(head.data.document);
  append(
    container,
    h("p", {}, `Editing version ${version}. Saving checks the document against the schema first, and only saves over version ${version}.`),
    h(
      "form",
      { onsubmit: save, class: "editor" },
      h("label", { for: "editor" }, "Memory document (JSON)"),
      editor,
      problems,
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => check().catch((err) => conflictOrError(result, err, () => route())) }, "Check"),
        h("button", { type: "submit" }, "Save"),
        saveStatus),
    ),
    result,
    h(
      "form",
      { class: "inline prune", onsubmit: (event) => {
        event.preventDefault();
        clear(result);
        pruneStatus.textContent = "";
        const section = new FormData(event.target).get("section");
        if (!section) return;
        confirmFirst(
          pruneConfirm,
          `Prune ${section}? A new version is written with ${section} emptied; the history keeps the old one.`,
          `Yes, prune ${section}`,
          () => prune(section),
        );
      } },
      h("label", { for: "prune-section" }, "Prune section"),
      // No section is chosen until the person picks one: pruning is never a default.
      h("select", { id: "prune-section", name: "section", required: true },
        h("option", { value: "", selected: true, disabled: true }, "Choose a section…"),
        sections.map((s) => h("option", { value: s }, s))),
      h("button", { type: "submit" }, "Prune"),
      pruneStatus,
    ),
    pruneConfirm,
  );
}

// -- key-value ----------------------------------------------------------------------------------------

async function kvView(container, args) {
  const { data } = await api().get("kv");
  if (!data.items.length) {
    append(container, h("p", {}, "No key-value entries."));
    return;
  }
  append(
    container,
    h("table", { class: "grid" },
      h("caption", {}, "Namespaces"),
      h("thead", {}, h("tr", {}, ["Namespace", "Entries", "Updated", "Soonest expiry"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.items.map((n) => h("tr", {},
        h("td", {}, h("a", { href: link("kv", [n.namespace]) }, n.namespace)),
        h("td", {}, n.entries), h("td", {}, when(n.updated_at)), h("td", {}, n.next_expiry ? when(n.next_expiry) : "never"))))),
  );
  const namespace = args[0];
  if (!namespace) return;
  const page = await api().get(`kv/${encodeURIComponent(namespace)}`, { limit: 100 });
  append(
    container,
    h("table", { class: "grid" },
      h("caption", {}, `Entries of ${namespace}`),
      h("thead", {}, h("tr", {}, ["Key", "Value", "Updated", "Expires"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, page.data.items.map((e) => h("tr", {},
        h("td", {}, e.key), h("td", {}, h("code", {}, short(e.value, 300))), h("td", {}, when(e.updated_at)),
        h("td", {}, e.expires_at ? when(e.expires_at) : "never"))))),
  );
}

// -- companion ----------------------------------------------------------------------------------------

function mondayOf(day) {
  const d = new Date(Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate()));
  d.setUTCDate(d.getUTCDate() - ((d.getUTCDay() + 6) % 7));
  return d;
}

async function companionView(container, args) {
  const [goals, todos] = await Promise.all([api().get("goals"), api().get("todos/due")]);
  const progress = (goal) => {
    const last = [...(goal.progress || [])].reverse().find((p) => typeof p.percent === "number");
    return last ? last.percent : 0;
  };
  append(
    container,
    h("section", { "aria-labelledby": "goals-title" },
      h("h3", { id: "goals-title" }, "Goals"),
      goals.data.items.length ? h("ul", { class: "goals" }, goals.data.items.map((g) => {
        const goal = g.element;
        const id = `goal-${goal.id}`;
        return h("li", {},
          h("span", { id }, goal.title), goal.target_date ? ` · target ${goal.target_date}` : "", " ",
          h("progress", { max: 100, value: progress(goal), "aria-labelledby": id }), ` ${progress(goal)}%`);
      })) : h("p", {}, "No active goals.")),
    h("section", { "aria-labelledby": "todos-title" },
      h("h3", { id: "todos-title" }, `To-dos due by ${todos.data.day}`),
      h("h4", {}, "Overdue"),
      todos.data.overdue.length ? h("ul", { class: "todos overdue" }, todos.data.overdue.map((t) => h("li", {}, t.element.text, " · due ", when(t.element.due_date)))) : h("p", {}, "Nothing overdue."),
      h("h4", {}, "Due"),
      todos.data.due.length ? h("ul", { class: "todos" }, todos.data.due.map((t) => h("li", {}, t.element.text, " · due ", when(t.element.due_date)))) : h("p", {}, "Nothing due.")),
  );
  const start = args[0] ? new Date(args[0] + "T00:00:00Z") : mondayOf(new Date());
  const end = new Date(start.getTime() + 7 * 86400000);
  const events = await api().get("events", { from: start.toISOString(), to: end.toISOString() });
  const days = [...Array(7).keys()].map((i) => new Date(start.getTime() + i * 86400000));
  const iso = (d) => d.toISOString().slice(0, 10);
  const previous = new Date(start.getTime() - 7 * 86400000);
  append(
    container,
    h("section", { "aria-labelledby": "week-title" },
      h("h3", { id: "week-title" }, `Week of ${iso(start)}`),
      h("div", { class: "actions" },
        h("a", { href: link("companion", [iso(previous)]), class: "action" }, "Previous week"),
        h("a", { href: link("companion", [iso(end)]), class: "action" }, "Next week")),
      h("ol", { class: "week" }, days.map((day) => h("li", { class: "day" },
        h("h4", {}, day.toLocaleDateString("en", { weekday: "short", timeZone: "UTC" }), " ", iso(day)),
        h("ul", {}, events.data.items
          .filter((o) => iso(new Date(o.occurrence_start)) === iso(day))
          .map((o) => h("li", { class: "occurrence" },
            h("time", { datetime: o.occurrence_start }, new Date(o.occurrence_start).toISOString().slice(11, 16)),
            " ", o.event.summary, o.event.recurrence && o.event.recurrence.length ? h("span", { class: "repeats" }, " (repeats)") : "")))))),
      events.data.unexpanded.length ? h("p", {}, `Not expanded (over budget): ${events.data.unexpanded.join(", ")}`) : ""),
  );
}

// -- conversations ------------------------------------------------------------------------------------

async function conversationsView(container) {
  const list = h("ul", { class: "conversations" });
  const more = h("button", { type: "button", hidden: true }, "Load more conversations");
  append(container, list, more);
  let after = null;
  const load = async () => {
    const { data } = await api().get("conversations", { limit: 20, after });
    if (!data.items.length && after === null) append(list, h("li", {}, "No conversations."));
    append(list, data.items.map((c) => {
      const memory = c.memory || {};
      const rows = Object.entries(memory).map(([k, v]) => [h("dt", {}, k.replaceAll("_", " ")), h("dd", {}, Array.isArray(v) ? v.map((x) => short(x, 400)).join("; ") : short(v, 400))]);
      return h("li", {},
        h("article", { "aria-label": `Conversation ${c.conversation_id}` },
          h("h3", {}, c.conversation_id),
          h("p", {}, `${c.messages} messages, last ${when(c.last_message_at)}`, c.memory ? ` · memory through message ${c.memory_through}` : " · no memory yet"),
          c.memory ? h("dl", {}, rows) : ""));
    }));
    after = data.next_after;
    more.hidden = !after;
  };
  more.addEventListener("click", () => load().catch((err) => showError(container, err)));
  await load();
}

// -- search -------------------------------------------------------------------------------------------

async function searchView(container, args, query) {
  const q = query.get("q") || "";
  append(
    container,
    h("form", { role: "search", class: "inline", onsubmit: (event) => {
      event.preventDefault();
      go("search", [], state.user, { q: new FormData(event.target).get("q") });
    } },
    h("label", { for: "search-q" }, "Search the memory"),
    h("input", { id: "search-q", name: "q", type: "search", value: q, required: true, maxlength: 500 }),
    h("button", { type: "submit" }, "Search")),
  );
  if (!q) return;
  const { data } = await api().get("memory/search", { q, k: 20 });
  append(
    container,
    h("h3", {}, `${data.items.length} result${data.items.length === 1 ? "" : "s"} (${data.mode})`),
    h("ol", { class: "results" }, data.items.map((hit) => h("li", {},
      h("code", {}, pointerWords(hit.path)), " — ", short(hit.text, 300), " ",
      h("a", { href: link("version", [hit.version]) }, `v${hit.version}`)))),
  );
}

// -- plots --------------------------------------------------------------------------------------------

async function plotsView(container) {
  const { data } = await api().get("memory/stats", { days: 90 });
  const days = data.per_day.map((d) => d.day);
  append(
    container,
    lineChart({
      id: "size",
      title: `Memory size over the last ${data.sizes.length} versions`,
      labels: data.sizes.map((p) => `v${p.version}`),
      values: data.sizes.map((p) => p.bytes),
      format: bytes,
    }),
    barChart({
      id: "edits",
      title: "Edits applied and refused per day",
      labels: days,
      series: [
        { name: "applied", values: data.per_day.map((d) => d.edits_applied), class: "applied" },
        { name: "refused", values: data.per_day.map((d) => d.edits_refused), class: "refused" },
      ],
    }),
    barChart({
      id: "tokens",
      title: "LLM tokens per day",
      labels: days,
      series: [{ name: "tokens", values: data.per_day.map((d) => d.tokens), class: "tokens" }],
      format: (n) => n.toLocaleString("en"),
    }),
    barChart({
      id: "cost",
      title: "LLM cost per day (USD, at the prices of each run)",
      labels: days,
      series: [{ name: "cost", values: data.per_day.map((d) => d.cost_usd || 0), class: "tokens" }],
      format: usd,
    }),
  );
}

// -- runs (operators) ---------------------------------------------------------------------------------

function runRow(r) {
  return h("tr", {},
    h("th", { scope: "row" }, h("a", { href: link("run", [r.run_key], null) }, r.run_key)),
    h("td", {}, when(r.last_written_at)),
    h("td", {}, r.users), h("td", {}, r.versions), h("td", {}, r.edits_applied), h("td", {}, r.edits_refused),
    h("td", {}, r.facts_restored), h("td", {}, r.tokens.toLocaleString("en")), h("td", {}, usd(r.cost_usd)));
}

async function runsView(container) {
  const body = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "Load older runs");
  append(
    container,
    h("p", {}, "Every run (nightly, on demand, an undo), the newest first. Open one to undo it."),
    h("table", { class: "grid" },
      h("caption", {}, "Runs"),
      h("thead", {}, h("tr", {}, ["Run", "Last written", "Users", "Versions", "Edits applied", "Refused", "Facts restored", "Tokens", "Cost"].map((t) => h("th", { scope: "col" }, t)))),
      body),
    more,
  );
  let after = null;
  const load = async () => {
    const { data } = await api().call("GET", "admin/runs", { query: { limit: 20, after } });
    if (!data.items.length && after === null) append(body, h("tr", {}, h("td", { colspan: 9 }, "No runs yet.")));
    append(body, data.items.map(runRow));
    after = data.next_after;
    more.hidden = !after;
  };
  more.addEventListener("click", () => load().catch((err) => showError(container, err)));
  await load();
}

function revertReport(target, r) {
  const state_ = r.done ? "Done" : "Working";
  clear(target).append(
    h("p", { role: "status" }, `${state_}: ${r.reverted} reverted, ${r.unchanged} unchanged, ${r.conflict} in conflict, ${r.failed} failed, ${r.pending} pending (of ${r.users}).`),
    r.conflicts.length ? h("table", { class: "grid" },
      h("caption", {}, "Conflicts: users left untouched (a later version changed what the run changed)"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "User"), h("th", { scope: "col" }, "Paths"))),
      h("tbody", {}, r.conflicts.map((c) => h("tr", {},
        h("th", { scope: "row" }, h("a", { href: link("timeline", [], c.user_id) }, c.user_id)),
        h("td", {}, c.paths.map(pointerWords).join(", ")))))) : "",
    r.failures.length ? h("ul", { "aria-label": "Failures" }, r.failures.map((f) => h("li", {}, `${f.user_id}: ${f.error}`))) : "",
  );
}

async function followRevert(target, revertId) {
  for (;;) {
    const { data } = await api().call("GET", `admin/run-reverts/${encodeURIComponent(revertId)}`);
    revertReport(target, data);
    if (data.done || !target.isConnected) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function runView(container, args) {
  const key = args[0];
  const { data: r } = await api().call("GET", `admin/runs/${encodeURIComponent(key)}`);
  const figures = [
    ["Users changed", r.users], ["Versions written", r.versions], ["Edits applied", r.edits_applied],
    ["Edits refused", r.edits_refused], ["Facts restored", r.facts_restored], ["Facts filled", r.facts_filled],
    ["Activities", r.activities], ["Model calls", r.calls], ["Tokens", r.tokens.toLocaleString("en")],
    ["Cost", usd(r.cost_usd)], ["First written", when(r.first_written_at)], ["Last written", when(r.last_written_at)],
  ];
  append(
    container,
    h("h3", {}, key),
    h("dl", { class: "figures" }, figures.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("p", {}, "Users that failed wrote no version: the worker's logs and the UsersFailed metric count them."),
  );
  if (!r.versions) return;
  const result = h("div", { class: "result" });
  const only = h("input", { id: "revert-user", name: "user", autocomplete: "off", spellcheck: "false", size: 38 });
  const confirm = h("div", { class: "confirm", hidden: true });
  const start = h("button", { type: "button", onclick: () => {
    const whom = only.value.trim() ? `user ${only.value.trim()}` : `every user it touched (${r.users})`;
    clear(confirm).append(
      h("p", {}, `Undo ${key} for ${whom}? Each gets a new version; users edited since on the same paths are left untouched and listed.`),
      h("button", { type: "button", onclick: async () => {
        confirm.hidden = true;
        try {
          const { data } = await api().call("POST", `admin/runs/${encodeURIComponent(key)}/revert`, { query: { user_id: only.value.trim() } });
          await followRevert(result, data.revert_id);
        } catch (err) {
          clear(result);
          showError(result, err);
        }
      } }, "Yes, undo the run"),
      h("button", { type: "button", onclick: () => { confirm.hidden = true; } }, "Cancel"),
    );
    confirm.hidden = false;
  } }, "Undo this run…");
  append(
    container,
    h("h3", {}, "Undo this run"),
    h("p", {}, h("label", { for: "revert-user" }, "Only for user id (optional)"), " ", only),
    h("div", { class: "actions" }, start),
    confirm,
    result,
  );
}

// -- export (the caller's own memory) ----------------------------------------------------------------

function exportStatus(target, job) {
  const line = job.status === "done"
    ? `Done: ${job.lines} lines, ${job.bytes.toLocaleString("en")} bytes. The link works for a limited time.`
    : job.status === "failed" ? `Failed: ${job.error || "the export could not be written"}.` : `Working (${job.status})…`;
  clear(target).append(
    h("p", { role: "status" }, line),
    job.url ? h("p", {}, h("a", { href: job.url, download: "" }, "Download the export (JSON Lines)")) : "",
  );
}

async function exportView(container) {
  const result = h("div", { class: "result" });
  const start = h("button", { type: "button", onclick: async () => {
    start.disabled = true;
    try {
      let { data: job } = await api().call("POST", "me/export");
      exportStatus(result, job);
      while ((job.status === "pending" || job.status === "running") && result.isConnected) {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        ({ data: job } = await api().call("GET", `me/exports/${encodeURIComponent(job.id)}`));
        exportStatus(result, job);
      }
    } catch (err) {
      clear(result);
      showError(result, err);
    } finally {
      start.disabled = false;
    }
  } }, "Export my memory");
  append(
    container,
    h("p", {}, "Everything stored about you (every version with its provenance, key-value entries, activity) as one file of JSON Lines, which an operator can import into another deployment."),
    h("div", { class: "actions" }, start),
    result,
  );
}

// -- erasure receipts (operators) -----------------------------------------------------------------------

function receiptRow(r) {
  const deleted = Object.entries(r.deleted).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(", ");
  return h("tr", {},
    h("td", {}, when(r.erased_at)), h("td", {}, r.requested_by),
    h("td", {}, h("code", {}, r.user_hash.slice(0, 16) + "…")), h("td", {}, deleted || "nothing"));
}

async function erasuresView(container) {
  const body = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "Load older receipts");
  append(
    container,
    h("p", {}, "Every erasure, the newest first: when, at whose request, and what was deleted. A receipt names the user only by a salted hash."),
    h("table", { class: "grid" },
      h("caption", {}, "Erasure receipts"),
      h("thead", {}, h("tr", {}, ["Erased", "Requested by", "User hash", "Deleted"].map((t) => h("th", { scope: "col" }, t)))),
      body),
    more,
  );
  let after = null;
  const load = async () => {
    const { data } = await api().call("GET", "admin/erasures", { query: { limit: 20, after } });
    if (!data.receipts.length && after === null) append(body, h("tr", {}, h("td", { colspan: 4 }, "No erasures yet.")));
    append(body, data.receipts.map(receiptRow));
    after = data.next;
    more.hidden = !after;
  };
  more.addEventListener("click", () => load().catch((err) => showError(container, err)));
  await load();
}

// -- webhook endpoints (operators) ----------------------------------------------------------------------

function webhookRow(w, container) {
  const state_ = w.enabled ? (w.failures ? `failing (${w.failures})` : "enabled") : `disabled${w.disabled_reason ? `: ${w.disabled_reason}` : ""}`;
  const toggle = h("button", { type: "button", onclick: async () => {
    try {
      await api().call("POST", `admin/webhooks/${encodeURIComponent(w.id)}/${w.enabled ? "disable" : "enable"}`);
      await route();
    } catch (err) {
      showError(container, err);
    }
  } }, w.enabled ? `Disable ${w.url}` : `Enable ${w.url}`);
  return h("tr", {},
    h("th", { scope: "row" }, w.url), h("td", {}, w.description), h("td", {}, state_),
    h("td", {}, w.last_delivered_at ? when(w.last_delivered_at) : "never"), h("td", {}, w.last_error || ""), h("td", {}, toggle));
}

async function webhooksView(container) {
  const { data } = await api().call("GET", "admin/webhooks");
  append(
    container,
    h("p", {}, "The endpoints memory-changed events are posted to. One that keeps failing is disabled; enabling it clears its failures."),
    h("table", { class: "grid" },
      h("caption", {}, "Webhook endpoints"),
      h("thead", {}, h("tr", {}, ["URL", "Description", "State", "Last delivered", "Last error", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, data.webhooks.length ? data.webhooks.map((w) => webhookRow(w, container)) : h("tr", {}, h("td", { colspan: 6 }, "No endpoints registered.")))),
  );
}

// A signed-in URL pasted into a tab that already shows the console changes only the fragment:
// start again with it (which takes it only in development and without a session; auth.js).
window.addEventListener("hashchange", () => {
  if (new URLSearchParams(location.hash.slice(1)).get("token")) location.reload();
});

start();
