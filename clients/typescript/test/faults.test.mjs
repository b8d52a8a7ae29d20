// What the holder's liveness rule gives a Node.js holder, as it gives a Go
// one (docs/guarantees.md, 2.1 and 2.4): a SIGKILLed holder's slot comes
// back in about a second; a holder whose own end closes its connection
// learns of the loss before anyone else is granted the slot; work outlives
// a leasemgr restart, and in the default layout a crash too.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { readFileSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";
import { Client, LeaseLostError, ConnectionDroppedError, ConnectionSilentError } from "../dist/esm/index.js";
import { Manager, eventually, fixtures } from "./harness.mjs";

const managers = [];
after(async () => {
  for (const m of managers) await m.close();
});
async function start(opts) {
  const m = await Manager.start(opts);
  managers.push(m);
  return m;
}

test("a SIGKILLed Node.js holder's slot goes to a Go executor waiter in about a second", async () => {
  const mgr = await start({ node: "tskill", pools: "gpu=1" });
  const holder = mgr.nodeScript(join(fixtures, "holder.mjs"), ["gpu"]);
  await eventually("the Node.js holder to hold the slot", () => /holder: holding/.test(holder.out), 15000);
  // A second Node.js holder, queued, then the executor behind it.
  const queued = mgr.nodeScript(join(fixtures, "holder.mjs"), ["gpu"]);
  await eventually("the second Node.js holder to queue", () => /holder: queued/.test(queued.out), 15000);
  const waiter = mgr.spawn("executor", ["run", "--pool", "gpu", "--", "true"]);
  await eventually("the executor to queue", async () => (await mgr.pools()).gpu.queued === 2, 15000);
  // Killed while queued, its request leaves the queue instead of holding up the executor.
  const killedQueued = performance.now();
  queued.kill("SIGKILL");
  await eventually("the killed queued holder's request to leave the queue", async () => (await mgr.pools()).gpu.queued === 1, 10000);
  console.log(`# a SIGKILLed queued Node.js holder's request left the queue ${Math.round(performance.now() - killedQueued)}ms after the kill`);
  const killed = performance.now();
  holder.kill("SIGKILL");
  await eventually("the executor to be granted the slot", () => /executor: lease \S+ granted/.test(waiter.out), 10000);
  const ms = Math.round(performance.now() - killed);
  console.log(`# a SIGKILLed Node.js holder's slot was granted to a waiting executor run ${ms}ms after the kill (LEASE_TTL 15s, DISCONNECT_GRACE 0.8s)`);
  assert.ok(ms < 7500, `${ms}ms: about the disconnect grace, not the 15s TTL`);
  const r = await waiter.exit(10000);
  assert.equal(r.code, 0, waiter.out);
});

test("a holder whose own end closes its connection stops before the slot is granted to anyone else", async () => {
  const mgr = await start({ node: "tsdrop", pools: "gpu=1" });
  // A connection of its own, not in the default layout's trust (serverOnlyDrops off), that the test then closes.
  const seed = readFileSync(join(mgr.authDir, "executor.nk"), "utf8").trim();
  const nc = await natsConnect({ servers: `nats://${mgr.natsListen}`, authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)) });
  const holder = new Client(nc, { node: "tsdrop" });
  const waiterClient = await mgr.connect();
  try {
    const l = await holder.acquire("gpu");
    let lostAt;
    const lost = l.done.then((r) => ((lostAt = performance.now()), r));
    let grantedAt;
    const waiter = waiterClient.acquire("gpu").then((w) => ((grantedAt = performance.now()), w));
    await eventually("the waiter to queue", async () => (await mgr.pools()).gpu.queued === 1);
    const closed = performance.now();
    await nc.close();
    const reason = await lost;
    assert.ok(reason instanceof LeaseLostError, `${reason}`);
    assert.ok(reason.cause instanceof ConnectionDroppedError, `${reason.cause}`);
    const w = await waiter;
    console.log(
      `# connection closed by the holder: lease lost after ${Math.round(lostAt - closed)}ms, the waiter granted after ${Math.round(grantedAt - closed)}ms (grace 800ms)`,
    );
    assert.ok(lostAt < grantedAt, "the holder learned of the loss first");
    await w.release();
  } finally {
    await holder.close();
    await waiterClient.close();
  }
});

test("a reconnect moves the lease to the new connection before the grace frees it", async () => {
  const mgr = await start({ node: "tsmove", pools: "gpu=1" });
  // Not the default layout's trust: the client's own reconnect counts as a drop at its end.
  const c = await mgr.connect({ servers: `nats://${mgr.natsListen}` });
  try {
    const l = await c.acquire("gpu");
    const before = c.live.identity();
    const dropped = performance.now();
    await c.nc.reconnect(); // the client closes its socket: the server sees the holder's own close
    await eventually("the lease to move to the new connection", () => {
      const now = c.live.identity();
      return now !== undefined && now.id !== before.id && l.bound?.id === now.id;
    });
    console.log(`# a reconnecting holder's lease moved to its new connection ${Math.round(performance.now() - dropped)}ms after the drop (grace 800ms)`);
    // Past the grace a freed lease's release is refused (lease_not_found); a kept one is released.
    await eventually("the grace after the drop to pass", () => performance.now() - dropped > 1200, 5000);
    assert.equal(l.isEnded, false);
    await l.release();
  } finally {
    await c.close();
  }
});

/** Waits until lease l was renewed by a manager that is serving since `since` (monotonic ms): its deadline then lies a TTL less the margin past it. */
function renewedAfter(l, since) {
  return eventually(
    `lease ${l.id} to be renewed by the new manager`,
    async () => {
      if (l.isEnded) throw new Error(`lease ${l.id} ended: ${(await l.done)?.message ?? "released"}`);
      return l.expiresAt.getTime() - Date.now() + performance.now() >= since + l.ttlMs * 0.9;
    },
    15000,
  );
}

test("a lease outlives a leasemgr restart (SIGTERM), also on a connection to its URL", async () => {
  const mgr = await start({ node: "tsrestart", pools: "gpu=2" });
  const embedded = await mgr.connect(); // the default layout, as executor
  const byUrl = await mgr.connect({ servers: `nats://${mgr.natsListen}` }); // NATS_URL: the dropped clock runs
  assert.equal(embedded.live.serverDrops, true);
  assert.equal(byUrl.live.serverDrops, false);
  try {
    const a = await embedded.acquire("gpu");
    const b = await byUrl.acquire("gpu");
    const stopped = performance.now();
    await mgr.stop("SIGTERM");
    // Down longer than a drop may last (3/4 of the grace): only the stop notice keeps the NATS_URL holder's lease.
    await delay(1500);
    await mgr.run();
    console.log(`# leasemgr down ${Math.round(mgr.readyAt - stopped)}ms from SIGTERM to ready`);
    await renewedAfter(a, mgr.readyAt);
    await renewedAfter(b, mgr.readyAt);
    await a.release();
    await b.release();
    assert.equal(await a.done, null);
    assert.equal(await b.done, null);
  } finally {
    await embedded.close();
    await byUrl.close();
  }
});

test("in the default layout a lease outlives a leasemgr crash (SIGKILL); on a NATS_URL connection the dropped clock ends it", async () => {
  const mgr = await start({ node: "tscrash", pools: "gpu=2", env: { LEADER_TTL: "1s" } });
  const embedded = await mgr.connect();
  const byUrl = await mgr.connect({ servers: `nats://${mgr.natsListen}` });
  try {
    const a = await embedded.acquire("gpu");
    const b = await byUrl.acquire("gpu");
    const killed = performance.now();
    await mgr.stop("SIGKILL");
    const reason = await b.done;
    assert.ok(reason instanceof LeaseLostError && reason.cause instanceof ConnectionDroppedError, `${reason?.cause ?? reason}`);
    console.log(`# NATS_URL holder gave its lease up ${Math.round(performance.now() - killed)}ms after leasemgr's SIGKILL`);
    await mgr.run();
    console.log(`# leasemgr down ${Math.round(mgr.readyAt - killed)}ms from SIGKILL to ready`);
    await renewedAfter(a, mgr.readyAt);
    await a.release();
    assert.equal(await a.done, null);
  } finally {
    await embedded.close();
    await byUrl.close();
  }
});

test("a frozen leasemgr stops no work; a connection that stays silent past the silent clock ends its lease", async () => {
  const mgr = await start({ node: "tsfreeze", pools: "gpu=2" });
  const patient = await mgr.connect(); // nats.js defaults: the silent clock is 30 s
  // A client whose own pings give up after 2 x 500 ms: its silent clock is 1 s.
  const seed = readFileSync(join(mgr.authDir, "executor.nk"), "utf8").trim();
  const nc = await natsConnect({
    servers: `nats://${mgr.natsListen}`,
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
    pingInterval: 500,
    maxPingOut: 2,
  });
  const impatient = new Client(nc, { node: "tsfreeze" });
  assert.equal(impatient.live.silence, 1000);
  assert.equal(patient.live.silence, 30000);
  try {
    const a = await patient.acquire("gpu");
    const b = await impatient.acquire("gpu");
    const frozen = performance.now();
    process.kill(mgr.proc.child.pid, "SIGSTOP");
    let lostAt;
    void b.done.then(() => (lostAt = performance.now()));
    try {
      // Frozen for 2.5 s: past the impatient client's silent clock, well within the TTL budget.
      await eventually("2.5 s of freeze", () => performance.now() - frozen > 2500, 5000);
    } finally {
      process.kill(mgr.proc.child.pid, "SIGCONT");
    }
    const thawed = performance.now();
    assert.ok(b.isEnded, "the impatient client's lease ended during the freeze");
    const reason = await b.done;
    assert.ok(reason instanceof LeaseLostError && reason.cause instanceof ConnectionSilentError, `${reason?.cause ?? reason}`);
    console.log(`# frozen leasemgr: the 1 s silent clock ended a lease ${Math.round(lostAt - frozen)}ms into a ${Math.round(thawed - frozen)}ms freeze`);
    await renewedAfter(a, thawed);
    console.log(`# the default client's lease was renewed ${Math.round(performance.now() - thawed)}ms after the thaw`);
    await a.release();
    assert.equal(await a.done, null);
  } finally {
    await patient.close();
    await impatient.close();
    await nc.close();
  }
});
