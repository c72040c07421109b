/**
 * The client: `new Client(baseUrl, token)`, with `.memory`, `.kv`, `.activity`, `.account` (and the
 * operators' `.admin`, `.runs`, `.webhooks`), the same calls as the Python client's
 * `user_memory_client.Client`.
 *
 * Every answer type comes from `openapi.ts`, generated from the served OpenAPI document, and every
 * route this file calls is checked against it by the compiler (`Route` below only admits a path
 * and method the document declares, and the answer is that operation's 200 body), so a change of
 * the API that breaks a call fails `npm run typecheck` rather than a user's app.
 */
import { ConfigurationError, InvalidArgument, PreconditionFailed, VersionConflict } from "./errors.js";
import type { components, paths } from "./openapi.js";
import { Transport, type Fetch, type Retries, type RetryNotice, type Token } from "./transport.js";

type Schemas = components["schemas"];
export type Memory = Schemas["Memory"];
export type History = Schemas["History"];
export type HistoryItem = Schemas["HistoryItem"];
export type Diff = Schemas["Diff"];
export type Changes = Schemas["Changes"];
export type Prompt = Schemas["Prompt"];
export type SearchResults = Schemas["SearchResults"];
export type SearchHit = Schemas["SearchHit"];
export type Written = Schemas["Written"];
export type KvEntry = Schemas["KvEntry"];
export type KvPage = Schemas["KvPage"];
export type KvDeleted = Schemas["KvDeleted"];
export type KvTouched = Schemas["KvTouched"];
export type ActivityItem = Schemas["ActivityItem"];
export type ActivityRecorded = Schemas["ActivityRecorded"];
export type Export = Schemas["Export"];
export type Erased = Schemas["Erased"];
export type JsonValue = Schemas["JsonValue"];
export type Element = Schemas["Element"];
export type ElementWritten = Schemas["ElementWritten"];
export type ActiveGoals = Schemas["ActiveGoals"];
export type TodosDue = Schemas["TodosDue"];
export type EventsInRange = Schemas["EventsInRange"];
export type Occurrence = Schemas["Occurrence"];
export type EventsImported = Schemas["EventsImported"];
export type RatingRecorded = Schemas["RatingRecorded"];
export type Digest = Schemas["Digest"];
export type RefreshQueued = Schemas["RefreshQueued"];
export type ExportJob = Schemas["ExportJob"];
export type ErasureReceipts = Schemas["ErasureReceipts"];
export type ErasureReceipt = Schemas["ErasureReceipt"];
export type RunList = Schemas["RunList"];
export type RunReport = Schemas["RunReport"];
export type RunRevert = Schemas["RunRevert"];
export type Webhook = Schemas["Webhook"];
export type WebhookCreated = Schemas["WebhookCreated"];
export type Webhooks = Schemas["Webhooks"];
export type WebhookDeleted = Schemas["WebhookDeleted"];
/** One RFC 6902 operation (the served schema marks every member optional-or-null; this is stricter). */
export type PatchOperation =
  | { op: "add" | "replace" | "test"; path: string; value: JsonValue }
  | { op: "remove"; path: string }
  | { op: "move" | "copy"; from: string; path: string };
/** An RFC 6902 JSON Patch (a list) or an RFC 7396 merge patch (an object). */
export type Patch = PatchOperation[] | { [key: string]: JsonValue };
export type SearchMode = "auto" | "fts" | "vector" | "fused";
/** Given the head after a conflict, the edit to make on it instead (null: give up and throw). */
export type Rebase<B> = (head: Memory) => B | null | Promise<B | null>;

export const USER_AGENT = "user-memory-client-ts/0.1";
const JSON_TYPE = "application/json";
const JSON_PATCH = "application/json-patch+json";
const MERGE_PATCH = "application/merge-patch+json";

type Method = "get" | "put" | "post" | "delete" | "patch";
type Route = { [P in keyof paths]: { [M in Method]: paths[P][M] extends undefined ? never : [P, M] }[Method] }[keyof paths];
/** The operation's success body: its 200's, or its 202's (a route that queues work answers 202). */
type Answer<R extends Route> = paths[R[0]][R[1]] extends {
  responses: { 200: { content: { "application/json": infer A } } };
}
  ? A
  : paths[R[0]][R[1]] extends { responses: { 202: { content: { "application/json": infer A } } } }
    ? A
    : never;
type Query<R extends Route> = paths[R[0]][R[1]] extends { parameters: { query?: infer Q } } ? Q : never;

export interface EditOptions<B> {
  /** The version this edit is based on (a number, or the ETag '"7"'); stale: PreconditionFailed. */
  ifMatch?: number | string;
  /** With ifMatch: the edit to make on the head instead, when another write got in first. */
  rebase?: Rebase<B>;
  /** Default 3. */
  maxRebases?: number;
  /** Default: a new `client:<uuid>` per call, the same on each of its retries. */
  idempotencyKey?: string;
}

export interface ClientOptions {
  retries?: Retries;
  /** Default: globalThis.fetch. */
  fetch?: Fetch;
  userAgent?: string;
  /** Told before each retry's wait (the route's template, never its values). */
  onRetry?: (notice: RetryNotice) => void;
  /** For tests: the jitter's source of numbers in [0, 1). */
  random?: () => number;
}

function newKey(): string {
  return `client:${uuid4()}`;
}

/** A random UUID: Web Crypto's where there is one (browsers, edge, Node 19+), else Math.random's
 * (Node 18 has no global crypto); a key needs to be unique, not secret. */
function uuid4(): string {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (crypto?.randomUUID) return crypto.randomUUID();
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16));
  hex[12] = "4";
  hex[16] = ((Number.parseInt(hex[16] ?? "0", 16) & 0x3) | 0x8).toString(16);
  const h = hex.join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function quote(version: number | string): string {
  return typeof version === "number" ? `"${version}"` : version;
}

class Resource {
  constructor(protected readonly transport: Transport) {}

  protected async run<R extends Route>(
    route: R,
    options: {
      path?: Record<string, string>;
      query?: Query<R> | Record<string, string | number | undefined | null>;
      body?: unknown;
      contentType?: string;
      headers?: Record<string, string>;
    } = {},
  ): Promise<Answer<R>> {
    const [template, method] = route;
    let path: string = template;
    for (const [name, value] of Object.entries(options.path ?? {})) {
      // URL parsers resolve "." and ".." segments (escaped or not): they would name another route.
      if (value === "." || value === "..") {
        throw new InvalidArgument(`a ${name} cannot be ${JSON.stringify(value)}: a URL path cannot hold it`);
      }
      path = path.replace(`{${name}}`, encodeURIComponent(value));
    }
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries((options.query ?? {}) as Record<string, unknown>)) {
      if (value !== undefined && value !== null) search.set(name, value instanceof Date ? value.toISOString() : String(value));
    }
    const qs = search.toString();
    const headers: Record<string, string> = { ...options.headers };
    // Every write carries a key, the same on each retry (the request below is resent as it is), as
    // the Python client's; an edit's own (editHeaders) is kept.
    if (method !== "get" && headers["Idempotency-Key"] === undefined) headers["Idempotency-Key"] = newKey();
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["Content-Type"] = options.contentType ?? JSON_TYPE;
    }
    const request = { method: method.toUpperCase(), template, path: qs ? `${path}?${qs}` : path, headers, body };
    const answer = await this.transport.send(request);
    return JSON.parse(answer.text) as Answer<R>;
  }
}

/** The caller's memory document: read, follow, edit, search. */
export class MemoryApi extends Resource {
  /** The head, a past version, or the version current at a time. */
  get(options: { version?: number; asOf?: Date | string } = {}): Promise<Memory> {
    const asOf = options.asOf instanceof Date ? options.asOf.toISOString() : options.asOf;
    return this.run(["/me/memory", "get"], { query: { version: options.version, as_of: asOf } });
  }

  /** One page of versions, newest first. */
  history(options: { limit?: number; before?: number } = {}): Promise<History> {
    return this.run(["/me/memory/history", "get"], { query: { limit: options.limit ?? 50, before: options.before } });
  }

  /** Every version, newest first, page by page. */
  async *iterHistory(options: { pageSize?: number; before?: number } = {}): AsyncGenerator<HistoryItem> {
    let before = options.before;
    for (;;) {
      const page = await this.history({ limit: options.pageSize ?? 50, before });
      yield* page.items;
      if (page.next_before === undefined || page.next_before === null) return;
      before = page.next_before;
    }
  }

  /** The RFC 6902 patch from one version to another. */
  diff(from: number, to: number): Promise<Diff> {
    return this.run(["/me/memory/diff", "get"], { query: { from, to } });
  }

  /** One patch from `since` to the head (`.version` is the next `since`). */
  changes(since: number): Promise<Changes> {
    return this.run(["/me/memory/changes", "get"], { query: { since } });
  }

  /** The head as a compact text block for a system prompt, cut to a token budget (default 800). */
  prompt(options: { budgetTokens?: number } = {}): Promise<Prompt> {
    return this.run(["/me/memory/prompt", "get"], { query: { budget_tokens: options.budgetTokens ?? 800 } });
  }

  /**
   * Summarize the caller's pending activity now, on the worker queue (202: a run key
   * `ondemand:<time>`); within the deployment's minimum interval of the last one, that one with
   * `status: "already_queued"`. A deployment without a worker queue: NotEnabled.
   */
  refresh(): Promise<RefreshQueued> {
    return this.run(["/me/memory/refresh", "post"]);
  }

  /** The items of the memory that best match `q` (at most k, up to 100: one page). */
  search(q: string, options: { k?: number; mode?: SearchMode } = {}): Promise<SearchResults> {
    return this.run(["/me/memory/search", "get"], { query: { q, k: options.k ?? 10, mode: options.mode ?? "auto" } });
  }

  /** Edit: a list is an RFC 6902 JSON Patch, an object an RFC 7396 merge patch. */
  patch(patch: Patch, options: EditOptions<Patch> = {}): Promise<Written> {
    return this.edit(patch, options, (body, headers) =>
      this.run(["/me/memory", "patch"], {
        body,
        contentType: Array.isArray(body) ? JSON_PATCH : MERGE_PATCH,
        headers,
      }),
    );
  }

  /** Replace the whole document (validated against the deployment's schema). */
  replace(document: { [key: string]: JsonValue }, options: EditOptions<{ [key: string]: JsonValue }> = {}): Promise<Written> {
    return this.edit(document, options, (body, headers) => this.run(["/me/memory", "put"], { body, headers }));
  }

  /** A new version whose document is an older version's. */
  revert(version: number, options: Omit<EditOptions<never>, "rebase" | "maxRebases"> = {}): Promise<Written> {
    return this.run(["/me/memory/revert", "post"], { body: { version }, headers: editHeaders(options) });
  }

  /** Empty one section (or all) as a new version; history keeps what was there. */
  prune(section?: string, options: Omit<EditOptions<never>, "rebase" | "maxRebases"> = {}): Promise<Written> {
    return this.run(["/me/memory", "delete"], { query: { section }, headers: editHeaders(options) });
  }

  private async edit<B>(
    body: B,
    options: EditOptions<B>,
    send: (body: B, headers: Record<string, string>) => Promise<Written>,
  ): Promise<Written> {
    const maxRebases = options.maxRebases ?? 3;
    let ifMatch = options.ifMatch;
    let key = options.idempotencyKey ?? newKey();
    for (let rebases = 0; ; rebases++) {
      try {
        return await send(body, editHeaders({ ifMatch, idempotencyKey: key }));
      } catch (err) {
        const stale = err instanceof PreconditionFailed || err instanceof VersionConflict;
        if (!stale || options.rebase === undefined || rebases >= maxRebases) throw err;
        const head = await this.get();
        const next = await options.rebase(head);
        if (next === null || next === undefined) throw err;
        body = next;
        ifMatch = head.version;
        key = newKey(); // a rebase is a new edit: a new key
      }
    }
  }
}

function editHeaders(options: { ifMatch?: number | string; idempotencyKey?: string }): Record<string, string> {
  const headers: Record<string, string> = { "Idempotency-Key": options.idempotencyKey ?? newKey() };
  if (options.ifMatch !== undefined) headers["If-Match"] = quote(options.ifMatch);
  return headers;
}

/** Key-value memory: JSON values by namespace and key, each with an optional time to live. */
export class KvApi extends Resource {
  /** One live entry (NotFound when there is none). */
  get(namespace: string, key: string): Promise<KvEntry> {
    return this.run(["/me/kv/{namespace}/{key}", "get"], { path: { namespace, key } });
  }

  /** Insert or replace an entry (a PUT: a repeat writes the same thing again). */
  put(namespace: string, key: string, value: JsonValue, options: { ttlSeconds?: number } = {}): Promise<KvEntry> {
    return this.run(["/me/kv/{namespace}/{key}", "put"], {
      path: { namespace, key },
      body: { value, ttl_seconds: options.ttlSeconds ?? null },
    });
  }

  /** Delete an entry (NotFound when there was no live entry). */
  delete(namespace: string, key: string): Promise<KvDeleted> {
    return this.run(["/me/kv/{namespace}/{key}", "delete"], { path: { namespace, key } });
  }

  /** Keep entries with a TTL alive for their TTL again; the answer names those touched. */
  touch(namespace: string, keys: string[]): Promise<KvTouched> {
    return this.run(["/me/kv/{namespace}/touch", "post"], { path: { namespace }, body: { keys } });
  }

  /** One page of live entries in key order (only keys that start with `prefix`, if given). */
  list(namespace: string, options: { limit?: number; after?: string; prefix?: string } = {}): Promise<KvPage> {
    return this.run(["/me/kv/{namespace}", "get"], {
      path: { namespace },
      query: { limit: options.limit ?? 100, after: options.after, prefix: options.prefix },
    });
  }

  /** Every live entry of a namespace in key order, page by page. */
  async *iter(namespace: string, options: { prefix?: string; pageSize?: number } = {}): AsyncGenerator<KvEntry> {
    let after: string | undefined;
    for (;;) {
      const page = await this.list(namespace, { limit: options.pageSize ?? 100, after, prefix: options.prefix });
      yield* page.items;
      if (page.next_after === undefined || page.next_after === null) return;
      after = page.next_after;
    }
  }
}

export class ActivityApi extends Resource {
  /** Record what happened to the user (repeats of (source, external_id) are ignored). */
  record(items: ActivityItem[]): Promise<ActivityRecorded> {
    return this.run(["/me/activity", "post"], { body: { items } });
  }
}

export class AccountApi extends Resource {
  /** Everything stored about the user. */
  export(): Promise<Export> {
    return this.run(["/me/export", "get"]);
  }

  /** Start an export of everything as JSON Lines (any size); poll `exportJob(id)` until done. */
  startExport(): Promise<ExportJob> {
    return this.run(["/me/export", "post"]);
  }

  /** One of the user's exports: its status and, once done, a pre-signed `url`. */
  exportJob(exportId: string): Promise<ExportJob> {
    return this.run(["/me/exports/{export_id}", "get"], { path: { export_id: exportId } });
  }

  /** Erase every row of the user, history included, and its finished exports; with the receipt. */
  erase(): Promise<Erased> {
    return this.run(["/me", "delete"]);
  }
}

/** Operators' calls (the token must hold the operator scope or group). */
export class AdminApi extends Resource {
  /** Summarize a user's pending activity now (202: run key `ondemand:<time>`), rate-limited as the user's own. */
  refresh(userId: string): Promise<RefreshQueued> {
    return this.run(["/admin/users/{user_id}/memory/refresh", "post"], { path: { user_id: userId } });
  }

  /** Start an export of any user as JSON Lines; poll `exportJob(id)` until done. */
  startExport(userId: string): Promise<ExportJob> {
    return this.run(["/admin/users/{user_id}/export", "post"], { path: { user_id: userId } });
  }

  /** Any export job: its status and, once done, a pre-signed `url`. */
  exportJob(exportId: string): Promise<ExportJob> {
    return this.run(["/admin/exports/{export_id}", "get"], { path: { export_id: exportId } });
  }

  /** Erasure receipts, newest first (one user's, by id); `after`: the page before's `next`. */
  erasures(options: { limit?: number; after?: string; userId?: string } = {}): Promise<ErasureReceipts> {
    return this.run(["/admin/erasures", "get"], {
      query: { limit: options.limit ?? 50, after: options.after, user_id: options.userId },
    });
  }

  /** Every erasure receipt (one user's, by id), newest first, page by page. */
  async *iterErasures(options: { userId?: string; pageSize?: number } = {}): AsyncGenerator<ErasureReceipt> {
    let after: string | undefined;
    for (;;) {
      const page = await this.erasures({ limit: options.pageSize ?? 50, after, userId: options.userId });
      yield* page.receipts;
      if (page.next === undefined || page.next === null) return;
      after = page.next;
    }
  }
}

/** Operators only (a token with the operator scope): runs and undoing one. */
export class RunsApi extends Resource {
  /** One page of runs, the newest first, each with its totals. */
  list(options: { limit?: number; after?: string } = {}): Promise<RunList> {
    return this.run(["/admin/runs", "get"], { query: { limit: options.limit ?? 20, after: options.after } });
  }

  /** Every run, the newest first, page by page. */
  async *iter(options: { pageSize?: number } = {}): AsyncGenerator<RunReport> {
    let after: string | undefined;
    for (;;) {
      const page = await this.list({ limit: options.pageSize ?? 20, after });
      yield* page.items;
      if (page.next_after === undefined || page.next_after === null) return;
      after = page.next_after;
    }
  }

  /** One run's totals (a key such as `daily:2026-11-21`; its colon is sent percent-encoded). */
  get(runKey: string): Promise<RunReport> {
    return this.run(["/admin/runs/{run_key}", "get"], { path: { run_key: runKey } });
  }

  /** Undo a run for every user it touched (or `userId`) through the worker queue; again: resume. */
  revert(runKey: string, options: { userId?: string } = {}): Promise<RunRevert> {
    return this.run(["/admin/runs/{run_key}/revert", "post"], {
      path: { run_key: runKey },
      query: { user_id: options.userId },
    });
  }

  /** An undo so far: users reverted, conflicts with their paths, failures, pending. */
  revertStatus(revertId: string): Promise<RunRevert> {
    return this.run(["/admin/run-reverts/{revert_id}", "get"], { path: { revert_id: revertId } });
  }
}

/** Operators (a token with the operator scope): endpoints that receive memory-changed events. */
export class WebhooksApi extends Resource {
  /** A new endpoint; `.secret` (whsec_...) is answered once: the receiver verifies with it. */
  register(url: string, options: { description?: string } = {}): Promise<WebhookCreated> {
    return this.run(["/admin/webhooks", "post"], { body: { url, description: options.description ?? "" } });
  }

  /** Every endpoint with its state (a disabled one says why). */
  list(): Promise<Webhooks> {
    return this.run(["/admin/webhooks", "get"]);
  }

  get(webhookId: string): Promise<Webhook> {
    return this.run(["/admin/webhooks/{webhook_id}", "get"], { path: { webhook_id: webhookId } });
  }

  disable(webhookId: string): Promise<Webhook> {
    return this.run(["/admin/webhooks/{webhook_id}/disable", "post"], { path: { webhook_id: webhookId } });
  }

  /** Send to it again, failures and backoff cleared. */
  enable(webhookId: string): Promise<Webhook> {
    return this.run(["/admin/webhooks/{webhook_id}/enable", "post"], { path: { webhook_id: webhookId } });
  }

  /** The endpoint, its delivery marks and its secret. */
  delete(webhookId: string): Promise<WebhookDeleted> {
    return this.run(["/admin/webhooks/{webhook_id}", "delete"], { path: { webhook_id: webhookId } });
  }
}

type Fields = { [key: string]: JsonValue };
type WriteOptions = Omit<EditOptions<never>, "rebase" | "maxRebases">;
const day = (d: Date | string | undefined) => (d instanceof Date ? d.toISOString().slice(0, 10) : d);
const instant = (t: Date | string | undefined) => (t instanceof Date ? t.toISOString() : t);

/**
 * One collection of the companion layer (DOCUMENT_SCHEMA=companion): goals, to-dos or events.
 * Each write is a new version of the memory (`ifMatch`, `idempotencyKey` as for the memory).
 */
export class ElementsApi extends Resource {
  constructor(
    transport: Transport,
    readonly collection: "goals" | "todos" | "events",
  ) {
    super(transport);
  }

  /** A new element (an id is generated when `fields` has none; ElementExists when it is taken). */
  create(fields: Fields, options: WriteOptions = {}): Promise<ElementWritten> {
    return this.run([`/me/${this.collection}`, "post"] as ["/me/goals", "post"], { body: fields, headers: editHeaders(options) });
  }

  get(elementId: string): Promise<Element> {
    return this.run([`/me/${this.collection}/{element_id}`, "get"] as ["/me/goals/{element_id}", "get"], {
      path: { element_id: elementId },
    });
  }

  /** An RFC 7396 merge of the element's fields (null removes a field). */
  update(elementId: string, fields: Fields, options: WriteOptions = {}): Promise<ElementWritten> {
    return this.run([`/me/${this.collection}/{element_id}`, "patch"] as ["/me/goals/{element_id}", "patch"], {
      path: { element_id: elementId },
      body: fields,
      contentType: MERGE_PATCH,
      headers: editHeaders(options),
    });
  }

  /** Mark it done (a to-do) or completed (a goal, an event); again: nothing written. */
  complete(elementId: string, options: WriteOptions = {}): Promise<ElementWritten> {
    return this.run(
      [`/me/${this.collection}/{element_id}/complete`, "post"] as ["/me/goals/{element_id}/complete", "post"],
      { path: { element_id: elementId }, headers: editHeaders(options) },
    );
  }

  /** Remove it as a new version (history keeps it). */
  delete(elementId: string, options: WriteOptions = {}): Promise<ElementWritten> {
    return this.run([`/me/${this.collection}/{element_id}`, "delete"] as ["/me/goals/{element_id}", "delete"], {
      path: { element_id: elementId },
      headers: editHeaders(options),
    });
  }
}

export class GoalsApi extends ElementsApi {
  /** Active goals, nearest target date first. */
  active(options: { withinDays?: number } = {}): Promise<ActiveGoals> {
    return this.run(["/me/goals", "get"], { query: { within_days: options.withinDays } });
  }
}

export class TodosApi extends ElementsApi {
  /** Open to-dos due on or before a day (the user's today by default), overdue first. */
  due(options: { on?: Date | string } = {}): Promise<TodosDue> {
    return this.run(["/me/todos/due", "get"], { query: { on: day(options.on) } });
  }
}

export class EventsApi extends ElementsApi {
  /** Occurrences overlapping [from, to) (default: now and 7 days on); one answer, which may be cut short (`next_from`). */
  between(from?: Date | string, to?: Date | string): Promise<EventsInRange> {
    return this.run(["/me/events", "get"], { query: { from: instant(from), to: instant(to) } });
  }

  /** Every occurrence in [from, to), asking again from `next_from` while answers are cut short. */
  async *iterBetween(from: Date | string, to: Date | string): AsyncGenerator<Occurrence> {
    let cursor = instant(from);
    for (;;) {
      const page = await this.between(cursor, to);
      yield* page.items;
      if (page.next_from === undefined || page.next_from === null || page.next_from === cursor) return;
      cursor = page.next_from;
    }
  }

  /** Import Google Calendar events (an event, a list, or an Events.list page) in one version. */
  importGoogle(page: Fields | Fields[], options: WriteOptions = {}): Promise<EventsImported> {
    return this.run(["/me/events/import", "post"], { body: page, headers: editHeaders(options) });
  }
}

/** The companion layer: goals, to-dos, events, ratings, the daily digest. */
export class CompanionApi extends Resource {
  readonly goals: GoalsApi;
  readonly todos: TodosApi;
  readonly events: EventsApi;

  constructor(transport: Transport) {
    super(transport);
    this.goals = new GoalsApi(transport, "goals");
    this.todos = new TodosApi(transport, "todos");
    this.events = new EventsApi(transport, "events");
  }

  /** Rate one interaction 1 to 5 (a repeat replaces it). */
  rate(
    interactionId: string,
    rating: number,
    options: { tags?: string[]; comment?: string; ratedAt?: Date | string } = {},
  ): Promise<RatingRecorded> {
    const body: Record<string, unknown> = {
      interaction_id: interactionId,
      rating,
      tags: options.tags ?? [],
      comment: options.comment ?? "",
    };
    if (options.ratedAt !== undefined) body.rated_at = instant(options.ratedAt);
    return this.run(["/me/ratings", "post"], { body });
  }

  /** The daily digest the nightly run made (the latest by default). */
  digest(options: { day?: Date | string } = {}): Promise<Digest> {
    return this.run(["/me/digest", "get"], { query: { day: day(options.day) } });
  }
}

/**
 * A client for one user's token: `new Client("http://127.0.0.1:8080", token)`. The token is a
 * string, or a function (sync or async) called for every request and again after a 401, so it may
 * refresh. A base URL without http:// or https:// throws ConfigurationError at once.
 */
export class Client {
  readonly memory: MemoryApi;
  readonly kv: KvApi;
  readonly activity: ActivityApi;
  readonly account: AccountApi;
  /** Needs a deployment on the companion schema (DOCUMENT_SCHEMA=companion). */
  readonly companion: CompanionApi;
  /** Operators' calls (a token with the operator scope): */
  readonly admin: AdminApi;
  readonly runs: RunsApi;
  readonly webhooks: WebhooksApi;
  readonly baseUrl: string;

  constructor(baseUrl: string, token: Token, options: ClientOptions = {}) {
    if (typeof baseUrl !== "string") throw new ConfigurationError("the base URL must be a string");
    const transport = new Transport(baseUrl, token, { userAgent: USER_AGENT, ...options });
    this.baseUrl = transport.baseUrl;
    this.memory = new MemoryApi(transport);
    this.kv = new KvApi(transport);
    this.activity = new ActivityApi(transport);
    this.account = new AccountApi(transport);
    this.companion = new CompanionApi(transport);
    this.admin = new AdminApi(transport);
    this.runs = new RunsApi(transport);
    this.webhooks = new WebhooksApi(transport);
  }
}
