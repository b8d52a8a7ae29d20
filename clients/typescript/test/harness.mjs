// Test harness: real leasemgr and executor binaries (built with go build
// unless SLOTLEASE_BIN_DIR names a directory holding them), each manager on
// its own embedded NATS server, ports and directories.

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, existsSync, mkdirSync, readFileSync, writeFileSync, linkSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as delay } from "node:timers/promises";
import { connect } from "../dist/esm/index.js";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "..", "..", "..");
export const fixtures = join(here, "fixtures");

let binDir;
/** The directory of leasemgr and executor, built once per test file if not given. */
export function bins() {
  if (binDir !== undefined) return binDir;
  if (process.env.SLOTLEASE_BIN_DIR) {
    binDir = process.env.SLOTLEASE_BIN_DIR;
  } else {
    binDir = mkdtempSync(join(tmpdir(), "slotlease-ts-bin-"));
    execFileSync("go", ["build", "-o", binDir, "./cmd/leasemgr", "./cmd/executor"], { cwd: repoRoot, stdio: "inherit" });
    process.on("exit", () => rmSync(binDir, { recursive: true, force: true }));
  }
  for (const b of ["leasemgr", "executor"]) {
    if (!existsSync(join(binDir, b))) throw new Error(`${join(binDir, b)} is missing`);
  }
  return binDir;
}

/**
 * A loopback port nobody listens on right now, from 14000-19999: below
 * Linux's ephemeral ports, so no outgoing connection takes it before the
 * program given it binds it, and apart from the Go test packages' ranges
 * (test/harness's Ports), which run beside this suite. Never the same one
 * twice, in this process or in the suite's other files, which run at the
 * same time (package.json, --test-concurrency): each port handed out is
 * claimed by a file in a directory every test process shares, created
 * exclusively and naming the claiming process, and removed as it exits; a
 * claim whose process has gone (killed) is taken over.
 */
const portClaims = join(tmpdir(), `slotlease-ts-ports-${process.getuid?.() ?? "user"}`);
mkdirSync(portClaims, { recursive: true, mode: 0o700 });
const given = new Set(); // the ports this process claimed, given back at its exit
process.on("exit", () => {
  for (const port of given) rmSync(join(portClaims, String(port)), { force: true });
});
export async function freePort() {
  for (let i = 0; i < 1000; i++) {
    const port = 14000 + Math.floor(Math.random() * 6000);
    if (given.has(port) || !claimPort(port)) continue;
    given.add(port); // claimed: kept even if something else listens there now
    const free = await new Promise((res) => {
      const s = createServer();
      s.once("error", () => res(false));
      s.listen(port, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (free) return port;
  }
  throw new Error("no free loopback port in 14000-19999");
}

/** Claims port for this process: true unless a live process holds it. */
function claimPort(port) {
  const f = join(portClaims, String(port));
  for (let tries = 0; tries < 2; tries++) {
    // Written aside, then linked: a claim is never seen without its pid.
    const mine = `${f}.${process.pid}`;
    writeFileSync(mine, String(process.pid));
    try {
      linkSync(mine, f);
      return true;
    } catch (err) {
      if (err.code !== "EEXIST") throw err;
    } finally {
      rmSync(mine, { force: true });
    }
    const owner = Number.parseInt(readFileSyncOr(f), 10);
    if (owner === process.pid || alive(owner)) return false;
    rmSync(f, { force: true }); // its process is gone: take it over
  }
  return false;
}

function readFileSyncOr(f) {
  try {
    return readFileSync(f, "utf8");
  } catch {
    return "";
  }
}

function alive(pid) {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}

/** Polls cond every 20 ms until it holds; fails after timeoutMs naming what it waited for. */
export async function eventually(what, cond, timeoutMs = 10000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await delay(20);
  }
}

/** A running process with its output captured. */
export class Proc {
  constructor(cmd, args, env) {
    this.out = "";
    this.child = spawn(cmd, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    this.child.stdout.on("data", (b) => (this.out += b));
    this.child.stderr.on("data", (b) => (this.out += b));
    this.exited = new Promise((r) => this.child.on("exit", (code, signal) => r({ code, signal })));
  }
  kill(sig = "SIGKILL") {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(sig);
  }
  async exit(timeoutMs = 10000) {
    let t;
    const r = await Promise.race([this.exited, new Promise((res) => (t = setTimeout(() => res(undefined), timeoutMs)))]);
    clearTimeout(t);
    if (r === undefined) throw new Error(`${this.child.spawnargs.join(" ")} did not exit within ${timeoutMs}ms; output:\n${this.out}`);
    return r;
  }
}

/**
 * A leasemgr on its own embedded server, with its own HOME (so its own
 * credentials directory) and store.
 */
export class Manager {
  static async start(opts) {
    const m = new Manager();
    m.node = opts.node;
    m.home = mkdtempSync(join(tmpdir(), "slotlease-ts-home-"));
    mkdirSync(join(m.home, ".config"), { recursive: true, mode: 0o700 });
    m.natsListen = `127.0.0.1:${await freePort()}`;
    m.httpAddr = `127.0.0.1:${await freePort()}`;
    // What leasemgr and executor read; clients get the same (connect({env})).
    m.env = {
      PATH: process.env.PATH,
      HOME: m.home,
      XDG_CONFIG_HOME: join(m.home, ".config"),
      TMPDIR: m.home,
      NODE_ID: opts.node,
      NATS_LISTEN: m.natsListen,
      NATS_STORE_DIR: join(m.home, "js"),
      HTTP_ADDR: m.httpAddr,
      LEASE_TTL: opts.ttl ?? "15s",
      POOL_CAPACITIES: opts.pools,
      ...(opts.env ?? {}),
    };
    await m.run();
    return m;
  }

  async run() {
    this.proc = new Proc(join(bins(), "leasemgr"), [], this.env);
    await eventually(
      `leasemgr ${this.node} to be ready`,
      async () => {
        if (this.proc.child.exitCode !== null) throw new Error(`leasemgr exited ${this.proc.child.exitCode}:\n${this.proc.out}`);
        return (await this.ready()) === 200;
      },
      20000,
    );
    this.readyAt = performance.now();
  }

  async ready() {
    try {
      const r = await fetch(`http://${this.httpAddr}/readyz`);
      await r.text();
      return r.status;
    } catch {
      return 0;
    }
  }

  /** The node's pools by name, from GET /v1/pools. */
  async pools() {
    const r = await fetch(`http://${this.httpAddr}/v1/pools`);
    const body = await r.json();
    return Object.fromEntries(body.pools.map((p) => [p.name, p]));
  }

  /** Stops leasemgr with sig and waits for it to exit. */
  async stop(sig = "SIGTERM") {
    this.proc.kill(sig);
    return this.proc.exit(15000);
  }

  /** The embedded server's credentials directory. */
  get authDir() {
    return join(this.home, ".config", "slotlease", `embedded-${this.natsListen.replace(":", "-")}`);
  }

  connect(opts = {}) {
    return connect({ env: this.env, ...opts });
  }

  /** Runs a binary from bins() with the manager's environment. */
  spawn(name, args) {
    return new Proc(join(bins(), name), args, this.env);
  }

  /** Runs a Node.js script with the manager's environment. */
  nodeScript(script, args = []) {
    return new Proc(process.execPath, [script, ...args], this.env);
  }

  async close() {
    if (this.proc !== undefined) {
      this.proc.kill("SIGKILL");
      await this.proc.exited;
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}

/** Resolves with what p settles to, as { ok, value } or { ok: false, error }. */
export function settle(p) {
  return p.then(
    (value) => ({ ok: true, value }),
    (error) => ({ ok: false, error }),
  );
}
