/** What the tests share: the API's URL, development tokens, and a proxy that misbehaves on cue. */
import { createHmac, randomUUID } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export const API = need("USER_MEMORY_API");
/** The same server's database, served with DOCUMENT_SCHEMA=companion and without a worker queue
 * (API has one: `serve --worker`). */
export const COMPANION_API = need("USER_MEMORY_COMPANION_API");

function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the suite with npm test (test/global-setup.ts starts serve)`);
  return value;
}

const b64 = (data: string | Buffer) => Buffer.from(data).toString("base64url");

/** A development token for `user`, as `user-memory token` issues it (HS256, the local issuer). */
export function tokenFor(user: string, options: { ttlSeconds?: number; secret?: string; scopes?: string[] } = {}): string {
  const now = Math.floor(Date.now() / 1000);
  const claims: Record<string, unknown> = { sub: user, iss: "user-memory-local", aud: "user-memory", iat: now, exp: now + (options.ttlSeconds ?? 3600) };
  if (options.scopes?.length) claims.scope = options.scopes.join(" ");
  const unsigned = `${b64(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64(JSON.stringify(claims))}`;
  const signature = createHmac("sha256", options.secret ?? need("USER_MEMORY_TOKEN_SECRET")).update(unsigned).digest();
  return `${unsigned}.${b64(signature)}`;
}

export const newUser = () => randomUUID();

/** The operator scope (`user-memory token --operator`: OPERATOR_SCOPE's default). */
export const OPERATOR_SCOPE = "user-memory/operator";
export const operatorToken = () => tokenFor(newUser(), { scopes: [OPERATOR_SCOPE] });

/**
 * What the proxy does with the next request:
 * - "503": answers 503 (a problem) without passing it on;
 * - "429": answers 429 with Retry-After: 1;
 * - "drop": closes the connection without passing the request on;
 * - "lost": passes it on, then closes the connection instead of answering (the write happened);
 * - "hang": never answers.
 * When nothing is planned, the request passes through.
 */
export type Cue = "503" | "429" | "drop" | "lost" | "hang";

export interface Seen {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  cue: Cue | "pass";
}

export class MisbehavingProxy {
  readonly seen: Seen[] = [];
  private readonly plan: Cue[] = [];
  private server: Server | undefined;
  private readonly hung: IncomingMessage[] = [];
  url = "";

  constructor(private readonly upstream: string) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const cue = this.plan.shift() ?? "pass";
      this.seen.push({ method: req.method ?? "", path: req.url ?? "", headers: req.headers, cue });
      const problem = (status: number, headers: Record<string, string> = {}) => {
        res.writeHead(status, { "Content-Type": "application/problem+json", ...headers });
        res.end(JSON.stringify({ type: "about:blank", title: "cue", status, detail: `the proxy's ${status}` }));
      };
      if (cue === "503") return problem(503);
      if (cue === "429") return problem(429, { "Retry-After": "1" });
      if (cue === "drop") return req.socket.destroy();
      if (cue === "hang") return void this.hung.push(req);
      const target = new URL(req.url ?? "/", this.upstream);
      const forward = httpRequest(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (answer) => {
        if (cue === "lost") {
          answer.resume();
          answer.on("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      forward.on("error", () => req.socket.destroy());
      req.pipe(forward);
    });
    await new Promise<void>((ready) => this.server?.listen(0, "127.0.0.1", ready));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The next requests' fates, in order. */
  cue(...cues: Cue[]): void {
    this.plan.push(...cues);
  }

  /** Forget the cues not used yet. */
  clear(): void {
    this.plan.length = 0;
  }

  async stop(): Promise<void> {
    for (const req of this.hung) req.socket.destroy();
    this.server?.closeAllConnections();
    await new Promise((done) => this.server?.close(done));
  }
}
