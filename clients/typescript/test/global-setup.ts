/**
 * The suite runs against `user-memory serve`. Under `make test` the pytest wrapper
 * (tests/client/test_typescript.py) starts it on the session's database and passes its URL, the
 * token secret and the server's tool definitions in the environment. Run alone (`npm test` in
 * clients/typescript), this starts `user-memory serve` itself, on its own embedded PostgreSQL in a
 * temporary home, with the repository's virtual environment.
 */
import { fileURLToPath } from "node:url";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

// Not import.meta.dirname: Node 18 has no such thing.
const HERE = fileURLToPath(new URL(".", import.meta.url));

const ROOT = resolve(HERE, "../../..");
const PYTHON = process.env.USER_MEMORY_PYTHON ?? join(ROOT, ".venv/bin/python");

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => done(typeof address === "object" && address ? address.port : 0));
    });
  });
}

async function serve(env: NodeJS.ProcessEnv, extra: string[] = []): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child: ChildProcess = spawn(PYTHON, ["-m", "user_memory_local.cli", "serve", "--port", String(port), ...extra], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((ready, fail) => {
    let seen = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      seen += chunk.toString();
      if (seen.includes("user-memory API on")) ready();
    });
    child.on("exit", (code) => fail(new Error(`user-memory serve exited with ${code} before it answered`)));
  });
  const stop = async () => {
    const exited = new Promise((done) => child.once("exit", done));
    child.kill("SIGINT");
    const patience = setTimeout(() => child.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(patience);
    child.stdout?.destroy();
  };
  return { url: `http://127.0.0.1:${port}`, stop };
}

export default async function setup(): Promise<() => Promise<void>> {
  if (process.env.USER_MEMORY_API) return async () => {};
  const home = mkdtempSync(join(tmpdir(), "user-memory-ts-"));
  const secret = "typescript-test-secret-of-at-least-32-bytes";
  const definitions = join(home, "tool-definitions.json");
  writeFileSync(
    definitions,
    execFileSync(PYTHON, ["-m", "tests.client.typescript_support", "definitions"], { cwd: ROOT, encoding: "utf8" }),
  );
  const env: NodeJS.ProcessEnv = { ...process.env, USER_MEMORY_HOME: home, USER_MEMORY_TOKEN_SECRET: secret, PYTHONUNBUFFERED: "1" };
  delete env.DOCUMENT_SCHEMA;
  // Two servers on one embedded PostgreSQL (the same home): the default schema, with a worker queue of
  // its own (--worker: a refresh, a run's undo), and the companion's, without one.
  const plain = await serve(env, ["--worker"]);
  const companion = await serve({ ...env, DOCUMENT_SCHEMA: "companion" });
  process.env.USER_MEMORY_API = plain.url;
  process.env.USER_MEMORY_COMPANION_API = companion.url;
  process.env.USER_MEMORY_TOKEN_SECRET = secret;
  process.env.USER_MEMORY_TOOL_DEFINITIONS = definitions;
  return async () => {
    await companion.stop();
    await plain.stop(); // the last one stops the embedded PostgreSQL; the home goes once it has
    rmSync(home, { recursive: true, force: true });
  };
}
