// connect() finds the embedded server's credentials as `executor` does:
// the same directory, the same refusals, the role's inbox prefix.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, cpSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { connect, resolveConfig, authDirUnder, BadRequestError, UnavailableError } from "../dist/esm/index.js";
import { Manager } from "./harness.mjs";

let mgr;
before(async () => {
  mgr = await Manager.start({ node: "tsconn", pools: "gpu=1" });
});
after(async () => {
  await mgr?.close();
});

test("the default directory is leasemgr's: <config dir>/slotlease/embedded-<host>-<port>", () => {
  const { config } = resolveConfig({ env: mgr.env });
  assert.equal(config.authDir, mgr.authDir);
  assert.equal(config.embeddedCreds, join(mgr.authDir, "executor.nk"));
  assert.equal(config.inboxPrefix, "_INBOX");
  assert.equal(config.embedded, true);
  assert.deepEqual(config.servers, [`nats://${mgr.natsListen}`]);
  assert.equal(config.node, "tsconn");
  assert.equal(authDirUnder("/c", "[::1]:4222"), "/c/slotlease/embedded-__1-4222");
  assert.equal(authDirUnder("/c", ":4222"), "/c/slotlease/embedded-any-4222");
  assert.equal(authDirUnder("/c", "localhost:4222"), "/c/slotlease/embedded-127.0.0.1-4222");
  const port = mgr.natsListen.split(":")[1];
  assert.equal(resolveConfig({ env: { ...mgr.env, NATS_URL: `nats://localhost:${port}` } }).config.authDir, mgr.authDir);
  // A single-server NATS_URL looks in that server's directory; a list never does.
  assert.equal(resolveConfig({ env: { ...mgr.env, NATS_URL: `nats://${mgr.natsListen}` } }).config.authDir, mgr.authDir);
  assert.equal(resolveConfig({ env: { ...mgr.env, NATS_URL: `nats://${mgr.natsListen},nats://127.0.0.1:1` } }).config.authDir, undefined);
  // Explicit credentials win.
  const explicit = resolveConfig({ env: { ...mgr.env, NATS_NKEY: join(mgr.authDir, "reader.nk") } }).config;
  assert.equal(explicit.embeddedCreds, undefined);
  assert.equal(explicit.nkeyFile, join(mgr.authDir, "reader.nk"));
});

test("credentials others could read, or that are not plain files, are refused with the path and the fix", () => {
  const file = join(mgr.authDir, "executor.nk");
  try {
    chmodSync(file, 0o640);
    assert.throws(() => resolveConfig({ env: mgr.env }), (e) => e instanceof BadRequestError && e.message.includes(file) && e.message.includes(`chmod 600 ${file}`));
  } finally {
    chmodSync(file, 0o600);
  }
  try {
    chmodSync(mgr.authDir, 0o750);
    assert.throws(() => resolveConfig({ env: mgr.env }), (e) => e instanceof BadRequestError && e.message.includes(`chmod 700 ${mgr.authDir}`));
  } finally {
    chmodSync(mgr.authDir, 0o700);
  }
  const d = mkdtempSync(join(tmpdir(), "slotlease-ts-link-"));
  try {
    chmodSync(d, 0o700);
    symlinkSync(file, join(d, "executor.nk"));
    assert.throws(() => resolveConfig({ env: { ...mgr.env, NATS_AUTH_DIR: d } }), (e) => e instanceof BadRequestError && /symbolic link/.test(e.message) && e.message.includes("NATS_AUTH_DIR"));
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test("NATS_AUTH_DIR names the directory", async () => {
  const d = mkdtempSync(join(tmpdir(), "slotlease-ts-auth-"));
  try {
    cpSync(mgr.authDir, join(d, "auth"), { recursive: true });
    const env = { ...mgr.env, NATS_AUTH_DIR: join(d, "auth"), XDG_CONFIG_HOME: join(d, "nowhere") };
    const c = await connect({ env });
    try {
      const s = await c.stats("gpu");
      assert.equal(s.capacity, 1);
    } finally {
      await c.close();
    }
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test("the reader role reads pools and events and may not acquire", async () => {
  const r = await mgr.connect({ role: "reader" });
  try {
    assert.equal((await r.stats("gpu")).capacity, 1);
    await assert.rejects(r.acquire("gpu"), BadRequestError);
    const it = r.events({ pool: "gpu" });
    await r.nc.flush();
    const e = await mgr.connect();
    await (await e.acquire("gpu")).release();
    await e.close();
    const first = await it.next();
    assert.equal(first.value.kind, "requested");
    await it.return();
  } finally {
    await r.close();
  }
});

test("without credentials the embedded server refuses the connection", async () => {
  const env = { ...mgr.env, XDG_CONFIG_HOME: join(mgr.home, "elsewhere") };
  await assert.rejects(connect({ env }), (e) => e instanceof UnavailableError && /is leasemgr running\?/.test(e.message));
});
