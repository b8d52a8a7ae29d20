// The client against one real leasemgr: acquire and release, queue order,
// every error code, waits, retries by request id, acquireAll, rates, stats
// and events.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  Client,
  LeaseError,
  LeaseLostError,
  errorCodes,
  BadRequestError,
  UnknownPoolError,
  InvalidSlotsError,
  ExceedsCapacityError,
  WaitExpiredError,
  QueueFullError,
  WouldWaitError,
  DroppedError,
  CancelledError,
  SupersededError,
  HolderDisconnectedError,
  LeaseNotFoundError,
  TokenMismatchError,
  ConflictError,
  TooManyAttemptsError,
  PoolBusyError,
  UnavailableError,
  InternalError,
} from "../dist/esm/index.js";
import { Manager, eventually, settle, fixtures } from "./harness.mjs";
import { join } from "node:path";

let mgr;
let client;

before(async () => {
  mgr = await Manager.start({
    node: "tsnode",
    pools: "gpu=1,fifo=1,multi=3,qf=1,drop=1,a=1,b=1,c=1,d=1,ev=1,wx=1,idem=1,rated=5,errs=1,busy=1,gone=1,wl=1,sec=64,tma=1,keys=3,tok=4,grp=1,rsd=1",
    env: {
      POOL_MAX_QUEUE: "qf=1,drop=1",
      POOL_ON_FULL: "drop=drop_oldest",
      POOL_RATES: "rated=1/m",
      CLUSTER_POOLS: "capi=1",
      POOL_POLICIES: "keys=fair",
      POOL_KEY_LIMITS: "keys=1",
      POOL_BUDGETS: "tok=1000/h",
    },
  });
  client = await mgr.connect();
});

/** Waits until pool has no slot in use: a release is answered before its delete is stored (docs/protocol.md, 5.6). */
function freed(pool) {
  return eventually(`pool ${pool} to have no slot in use`, async () => (await client.stats(pool)).in_use === 0, 5000);
}

after(async () => {
  await client?.close();
  await mgr?.close();
});

test("acquire and release", async () => {
  const l = await client.acquire("gpu");
  assert.equal(l.node, "tsnode");
  assert.equal(l.pool, "gpu");
  assert.equal(l.slots, 1);
  assert.ok(l.token > 0);
  assert.ok(l.expiresAt.getTime() > Date.now() + 10_000, `deadline ${l.expiresAt.toISOString()} about 13.5s ahead`);
  assert.equal(l.fastReleaseMs, 800, "the embedded server's leases are bound to the connection");
  assert.equal((await client.stats("gpu")).in_use, 1);
  await l.release();
  assert.equal(await l.done, null, "done resolves with null once released");
  assert.ok(l.signal.aborted);
  await freed("gpu");
  await l.release(); // twice: a no-op
});

test("a held lease's waits leave no listener behind", async () => {
  const l = await client.acquire("gpu");
  // With fast release the heartbeat wakes every grace/8 (100 ms): let it run a while.
  const t0 = performance.now();
  await eventually("ten heartbeat ticks", () => performance.now() - t0 > 1000, 5000);
  // Internals, read on purpose: each wait must remove its listeners when it ends.
  assert.ok(client.wakeN.ls.size <= 2, `wake listeners ${client.wakeN.ls.size}`);
  assert.ok(l.stopL.ls.size <= 2, `stop listeners ${l.stopL.ls.size}`);
  await l.release();
  assert.equal(client.wakeN.ls.size, 0);
});

test("withLease releases on every exit path", async () => {
  const v = await client.withLease("wl", {}, async (l) => {
    assert.equal((await client.stats("wl")).in_use, 1);
    return l.token;
  });
  assert.ok(v > 0);
  await freed("wl");
  const boom = new Error("boom");
  await assert.rejects(client.withLease("wl", {}, async () => Promise.reject(boom)), (e) => e === boom);
  await freed("wl");
});

test("strict FIFO with several waiters", async () => {
  const holder = await client.acquire("fifo");
  const order = [];
  const waiters = [];
  for (let i = 1; i <= 4; i++) {
    let queuedAt;
    const queued = new Promise((r) => (queuedAt = r));
    waiters.push(
      client.acquire("fifo", { onQueued: (p) => queuedAt(p) }).then(async (l) => {
        order.push(i);
        await l.release();
      }),
    );
    assert.equal(await queued, i, `waiter ${i} queued at position ${i}`);
  }
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [1, 2, 3, 4]);
});

test("a multi-slot head is not jumped", async () => {
  const two = await client.acquire("multi", { slots: 2 }); // 1 of 3 left
  const granted = [];
  let headQueued;
  const head = client.acquire("multi", { slots: 2, onQueued: (p) => headQueued(p) }).then((l) => (granted.push("head"), l));
  assert.equal(await new Promise((r) => (headQueued = r)), 1);
  // One slot is free, but a newcomer asking for it must queue behind the head.
  let smallQueued;
  const small = client.acquire("multi", { slots: 1, onQueued: (p) => smallQueued(p) }).then((l) => (granted.push("small"), l));
  assert.equal(await new Promise((r) => (smallQueued = r)), 2, "the one-slot request is queued behind the head, not granted");
  await assert.rejects(client.acquire("multi", { slots: 1, noWait: true }), WouldWaitError);
  await two.release();
  // Both fit now; their grants are stored concurrently, so either answer may come first.
  const [h, s] = await Promise.all([head, small]);
  assert.deepEqual(granted.sort(), ["head", "small"]);
  await Promise.all([h.release(), s.release()]);
});

test("fairness keys: a key at its limit waits without holding up another key", async () => {
  const a1 = await client.acquire("keys", { key: "cust-a" });
  assert.equal(a1.record.key, "cust-a");
  let queuedAt;
  const queued = new Promise((r) => (queuedAt = r));
  const a2 = client.acquire("keys", { key: "cust-a", onQueued: (p) => queuedAt(p) });
  assert.equal(await queued, 1, "a second request of cust-a waits: its key holds its limit of 1, 2 slots free");
  const b1 = await client.acquire("keys", { key: "cust-b" }); // granted at once, though cust-a waits
  assert.equal(b1.record.key, "cust-b");
  const st = await client.stats("keys");
  assert.equal(st.key_cap, 1);
  assert.equal(st.policy, "fair");
  assert.equal(st.in_use, 2);
  assert.equal(st.queued, 1);
  assert.deepEqual(
    st.scheduler.keys.map((k) => [k.key, k.in_use, k.queued, k.capped ?? false]),
    [["cust-a", 1, 1, true], ["cust-b", 1, 0, false]],
  );
  await a1.release();
  const a2l = await a2; // cust-a's own release lets its next go
  assert.equal(a2l.record.key, "cust-a");
  await Promise.all([a2l.release(), b1.release()]);
  await assert.rejects(client.acquire("keys", { key: "k".repeat(129) }), BadRequestError);
});

test("wait expiry", async () => {
  const holder = await client.acquire("wx");
  const t0 = performance.now();
  const err = await client.acquire("wx", { wait: 300 }).catch((e) => e);
  assert.ok(err instanceof WaitExpiredError, `got ${err}`);
  assert.equal(err.code, "wait_expired");
  console.log(`# a 300ms wait expired after ${Math.round(performance.now() - t0)}ms`);
  await holder.release();
});

test("re-sends of an acquire say so, and a late one after a cancel is told so", async () => {
  // A spy in the managers' account sees every acquire of pool rsd as sent.
  const spy = await mgr.connect({ env: { ...mgr.env, NATS_NKEY: join(mgr.authDir, "manager.nk") } });
  const poller = await mgr.connect({ pollIntervalMs: 100 });
  try {
    const sends = spy.nc.subscribe("lease.tsnode.rsd.acquire");
    await spy.nc.flush();
    const holder = await client.acquire("rsd");
    const ac = new AbortController();
    const waiting = poller.acquire("rsd", { requestId: "rsd-1", secret: "rsd-secret", signal: ac.signal }).catch((e) => e);
    const seen = [];
    for await (const m of sends) {
      const body = JSON.parse(new TextDecoder().decode(m.data));
      if (body.request_id === "rsd-1") seen.push(body.resend === true);
      if (seen.length === 3) break;
    }
    assert.deepEqual(seen, [false, true, true], "only the sends after the first are marked");
    ac.abort();
    await waiting;
    await eventually("the cancel handled", async () => (await client.stats("rsd")).queued === 0, 5000);
    // A re-send that reaches the manager after the cancel: told, not queued.
    const late = await settle(
      poller.request("lease.tsnode.rsd.acquire", { request_id: "rsd-1", holder: poller.holder, slots: 1, secret: "rsd-secret", resend: true }),
    );
    assert.ok(late.error instanceof CancelledError, `late re-send: ${late.error ?? JSON.stringify(late.value)}`);
    assert.equal((await client.stats("rsd")).queued, 0, "nothing queued by the late re-send");
    await holder.release();
  } finally {
    await poller.close();
    await spy.close();
  }
});

test("idempotent retry by request id", async () => {
  const id = `job-${Date.now()}`;
  const first = await client.acquire("idem", { requestId: id, secret: "s3cret" });
  // The same request from another connection (a restarted process): the same lease.
  const other = await mgr.connect();
  try {
    const again = await other.acquire("idem", { requestId: id, secret: "s3cret" });
    assert.equal(again.token, first.token);
    assert.equal(again.id, id);
    assert.equal((await client.stats("idem")).in_use, 1, "one lease, not two");
    // Another secret is another holder: conflict.
    await assert.rejects(other.acquire("idem", { requestId: id, secret: "other" }), ConflictError);
    await again.release();
    await assert.rejects(first.release(), LeaseLostError, "the first handle finds it gone");
    // Once it has ended, the id is free again: a new lease, a higher token.
    const next = await client.acquire("idem", { requestId: id, secret: "s3cret" });
    assert.ok(next.token > first.token);
    await next.release();
  } finally {
    await other.close();
  }
});

/**
 * A stand-in manager for node "ghost", in the managers' account on the real
 * server, that plays the protocol's answers for pool p: acquire is answered
 * with `granted` (plus `extra`), the first renewal with `unavailable` (as a
 * manager stopping for a restart answers) unless `slowMs` is given, later
 * ones with `renewed` and the record `renewed(body)` gives (each `slowMs`
 * late, as a manager on a loaded store answers); release and cancel
 * succeed. `renewals` holds the bodies of the renewals it received.
 */
async function standInManager(rec, extra, renewed, slowMs = 0) {
  const stand = await mgr.connect({ env: { ...mgr.env, NATS_NKEY: join(mgr.authDir, "manager.nk") } });
  const enc = (v) => new TextEncoder().encode(JSON.stringify(v));
  const renewals = [];
  stand.nc.subscribe("lease.ghost.p.*", {
    callback: (_err, m) => {
      const verb = m.subject.split(".").pop();
      const body = JSON.parse(new TextDecoder().decode(m.data));
      if (verb === "acquire") m.respond(enc({ status: "granted", lease: rec, ...extra }));
      if (verb === "renew") {
        renewals.push(body);
        if (slowMs > 0) setTimeout(() => m.respond(enc({ status: "renewed", lease: renewed(body) })), slowMs);
        else m.respond(enc(renewals.length === 1
          ? { status: "error", error: { code: "unavailable", message: "lease manager for node ghost is shutting down; retry" } }
          : { status: "renewed", lease: renewed(body) }));
      }
      if (verb === "release") m.respond(enc({ status: "released" }));
      if (verb === "cancel") m.respond(enc({ status: "cancelled" }));
    },
  });
  await stand.nc.flush();
  return { renewals, close: () => stand.close() };
}

/** A lease record of node "ghost", pool p, held by the test's client. */
function ghostRecord(id, token, more = {}) {
  const ttl = 15000;
  return {
    id, node: "ghost", pool: "p", slots: 1, holder: client.holder, token, ttl_ms: ttl,
    granted_at: new Date().toISOString(), expires_at: new Date(Date.now() + ttl).toISOString(), secret: "ghost-secret", ...more,
  };
}

test("a grant's confirmation is asked again after an unavailable answer", async () => {
  // An acquire answered from an earlier grant (existing: the holder must
  // confirm it), whose confirming renewal is first answered
  // "unavailable". The client asks again instead of failing the acquire.
  const rec = ghostRecord("ghost-1", 7);
  const stand = await standInManager(rec, { existing: true }, () => rec);
  try {
    const l = await client.acquire("p", { node: "ghost", requestId: "ghost-1", secret: "ghost-secret" });
    assert.equal(l.token, 7);
    const ids = stand.renewals.map((b) => b.lease_id);
    assert.ok(ids.length >= 2 && ids.every((id) => id === "ghost-1"), `renewals ${ids}: the refused confirmation was not asked again`);
    await l.release();
  } finally {
    await stand.close();
  }
});

test("a fast-release lease's move to the holder's connection is asked again after an unavailable answer", async () => {
  // A lease with fast release granted bound to a connection that is not
  // the client's (a reconnect between the request and its grant): the
  // client moves it with a renewal before it relies on it. That renewal is
  // first answered "unavailable"; the client asks again instead of failing
  // the acquire, and the lease ends bound to its connection.
  const rec = ghostRecord("ghost-2", 9, { conn_server: "NOT-THE-CLIENTS-SERVER", conn_id: 999999, disconnect_grace_ms: 800 });
  const stand = await standInManager(rec, {}, (body) => ({ ...rec, conn_server: body.conn_server, conn_id: body.conn_id }));
  try {
    const l = await client.acquire("p", { node: "ghost", requestId: "ghost-2", secret: "ghost-secret" });
    assert.equal(l.token, 9);
    assert.equal(l.fastReleaseMs, 800);
    const conns = stand.renewals.map((b) => b.conn_id);
    assert.ok(conns.length >= 2, `renewals ${conns}: the refused move was not asked again`);
    assert.ok(conns.every((id) => typeof id === "number" && id !== 999999), `renewals ${conns}: not sent from the client's connection`);
    await l.release();
  } finally {
    await stand.close();
  }
});

test("a fast-release lease's move waits for a slow answer", async () => {
  // The move's answer comes 300 ms late, past an eighth of the 800 ms grace.
  // The lease's clocks, still those of a connection this client never
  // pinged, had passed long before; the holder does not rely on the lease
  // yet, so they do not cut the move short (they used to: every attempt
  // ended after 100 ms and the acquire failed).
  const rec = ghostRecord("ghost-3", 11, { conn_server: "NOT-THE-CLIENTS-SERVER", conn_id: 999999, disconnect_grace_ms: 800 });
  const stand = await standInManager(rec, {}, (body) => ({ ...rec, conn_server: body.conn_server, conn_id: body.conn_id }), 300);
  try {
    const l = await client.acquire("p", { node: "ghost", requestId: "ghost-3", secret: "ghost-secret" });
    assert.equal(l.token, 11);
    assert.ok(stand.renewals.length >= 1, "no renewal moved the lease");
    await l.release();
  } finally {
    await stand.close();
  }
});

test("every error code", async (t) => {
  const seen = new Set();
  const expect = async (p, cls) => {
    const e = await p.then(
      (v) => assert.fail(`resolved with ${JSON.stringify(v?.record ?? v)}; want ${cls.name}`),
      (e) => e,
    );
    assert.ok(e instanceof cls, `got ${e?.name}: ${e?.message}; want ${cls.name}`);
    assert.ok(e instanceof LeaseError);
    seen.add(e.code);
    return e;
  };
  const raw = (verb, body, pool = "errs") => client.request(`lease.tsnode.${pool}.${verb}`, body);

  await t.test("refused by the manager", async () => {
    await expect(client.acquire("errs", { tenant: "t".repeat(129) }), BadRequestError);
    await expect(raw("acquire", { REQUEST_ID: "x", holder: "h", slots: 1 }), BadRequestError);
    await expect(client.acquire("nope"), UnknownPoolError);
    await expect(client.acquire("errs", { slots: 0 }), InvalidSlotsError);
    await expect(client.acquire("errs", { slots: 2 }), ExceedsCapacityError);
    const held = await client.acquire("errs", { requestId: "held-1", secret: "sec" });
    await expect(client.acquire("errs", { noWait: true }), WouldWaitError);
    await expect(client.acquire("errs", { wait: 50 }), WaitExpiredError);
    await expect(client.acquire("errs", { requestId: "held-1", secret: "not-it" }), ConflictError);
    await expect(raw("renew", { lease_id: "held-1", token: held.token + 1, secret: "sec" }), TokenMismatchError);
    await expect(raw("release", { lease_id: "held-1", token: held.token, secret: "wrong" }), TokenMismatchError);
    // cancelled: a cancel with the request's holder and secret, sent by someone else.
    const queued = client.acquire("errs", { requestId: "to-cancel", secret: "cs", onQueued: () => void raw("cancel", { request_id: "to-cancel", holder: client.holder, secret: "cs" }) });
    await expect(queued, CancelledError);
    await held.release();
    await expect(raw("release", { lease_id: "held-1", token: held.token, secret: "sec" }), LeaseNotFoundError);
  });

  await t.test("superseded: the group option replaces queued requests and asks holders to stop", async () => {
    await expect(client.acquire("grp", { onGroup: "cancel_pending" }), BadRequestError);
    await expect(client.acquire("grp", { group: "g", onGroup: "newest" }), BadRequestError);
    await expect(client.acquire("grp", { group: "g".repeat(129) }), BadRequestError);
    const held = await client.acquire("grp", { group: "g" });
    assert.equal(held.record.group, "g");
    const old = client.acquire("grp", { group: "g" });
    await eventually("the old request to queue", async () => (await client.stats("grp")).queued === 1);
    // Another tenant's group of the same name is another group.
    const other = client.acquire("grp", { group: "g", tenant: "b", onGroup: "cancel_pending" });
    await eventually("tenant b's request to queue", async () => (await client.stats("grp")).queued === 2);
    const newer = client.acquire("grp", { group: "g", onGroup: "cancel_pending", requestId: "grp-pending" });
    const e = await expect(old, SupersededError);
    assert.match(e.message, /superseded in group "g" by request "grp-pending"/);
    const newest = client.acquire("grp", { group: "g", onGroup: "cancel_in_progress", requestId: "grp-newest" });
    await expect(newer, SupersededError);
    const asked = Date.now();
    const reason = await new Promise((resolve) => held.stopSignal.addEventListener("abort", () => resolve(held.stopSignal.reason), { once: true }));
    const took = Date.now() - asked;
    console.log(`# holder told to stop ${took}ms after the request`);
    assert.ok(took < 4000, `told after ${took}ms: the stop_requested event should make it renew at once, not at its next renewal (TTL/3 = 5s)`);
    assert.ok(reason instanceof SupersededError);
    assert.match(reason.message, /"grp-newest" of group "g"/);
    assert.equal(held.signal.aborted, false, "asked to stop, the lease is still held");
    await held.release();
    await (await other).release();
    const l = await newest;
    assert.equal(l.stopSignal.aborted, false);
    await l.release();
  });

  await t.test("queue_full with its retry hint", async () => {
    const h = await client.acquire("qf");
    const w = client.acquire("qf");
    await eventually("the first waiter to queue", async () => (await client.stats("qf")).queued === 1);
    const e = await expect(client.acquire("qf"), QueueFullError);
    assert.equal(e.retryAfterMs, 5000, "TTL/3");
    console.log(`# queue_full retryAfterMs ${e.retryAfterMs}`);
    await h.release();
    await (await w).release();
  });

  await t.test("dropped: the oldest waiter of a full drop_oldest queue", async () => {
    const h = await client.acquire("drop");
    const old = client.acquire("drop");
    await eventually("the first waiter to queue", async () => (await client.stats("drop")).queued === 1);
    const newer = client.acquire("drop");
    const e = await expect(old, DroppedError);
    assert.match(e.message, /dropped from pool "drop"/);
    const s = await client.stats("drop");
    assert.equal(s.on_full, "drop_oldest");
    assert.equal(s.queued, 1);
    await h.release();
    await (await newer).release();
  });

  await t.test("too_many_attempts: a connection that sent 16 wrong secrets", async () => {
    const held = await client.acquire("tma");
    const guesser = await mgr.connect();
    try {
      const release = (secret) => guesser.request("lease.tsnode.tma.release", { lease_id: held.id, token: held.token, secret });
      for (let i = 0; i < 16; i++) await expect(release(`guess${i}`), TokenMismatchError);
      // Refused unchecked from now on, the right secret included.
      const e = await expect(release(held.record.secret), TooManyAttemptsError);
      assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 60_000, `retryAfterMs ${e.retryAfterMs}`);
      console.log(`# too_many_attempts retryAfterMs ${e.retryAfterMs}`);
    } finally {
      await guesser.close();
    }
    // The holder's own connection is not held back.
    await held.release();
    assert.equal(await held.done, null);
  });

  await t.test("holder_disconnected: an acquire naming a connection that closed at the holder's end", async () => {
    const gone = await mgr.connect();
    const id = gone.live.identity();
    assert.ok(id !== undefined);
    await gone.close();
    const h = await client.acquire("errs");
    let n = 0;
    // The manager learns of the close from the server's advisory, confirmed by the server: until then it answers would_wait.
    await eventually("the manager to know the connection closed", async () => {
      const r = await settle(raw("acquire", { request_id: `hd-${n++}`, holder: "h", slots: 1, no_wait: true, conn_server: id.server, conn_id: id.id }));
      if (!r.ok && r.error instanceof WouldWaitError) return false;
      await expect(Promise.reject(r.ok ? new Error("granted") : r.error), HolderDisconnectedError);
      return true;
    });
    await h.release();
  });

  await t.test("pool_busy, and a lease lost to a removed pool", async () => {
    const admin = await mgr.connect({ nkeySeed: join(mgr.authDir, "manager.nk"), inboxPrefix: "_SLOTLEASE_MGR" });
    try {
      const l = await client.acquire("gone");
      await expect(admin.resize({ remove: ["gone"] }), PoolBusyError);
      await admin.resize({ remove: ["gone"], force: true });
      const reason = await l.done; // the next renewal is refused
      assert.ok(reason instanceof LeaseLostError, `${reason}`);
      assert.ok(reason.cause instanceof UnknownPoolError || reason.cause instanceof LeaseNotFoundError, `${reason.cause}`);
      assert.ok(l.signal.aborted);
      await assert.rejects(l.release(), LeaseLostError);
    } finally {
      await admin.close();
    }
  });

  await t.test("unavailable: no manager serves the node", async () => {
    const nobody = new Client(client.nc, { node: "nobody", noManagerWaitMs: 300 });
    try {
      await expect(nobody.acquire("gpu"), UnavailableError);
    } finally {
      await nobody.close();
    }
  });

  await t.test("internal, and the mapping of every code", () => {
    for (const code of errorCodes) {
      const e = LeaseError.from({ code, message: "m", retry_after_ms: 7 });
      assert.equal(e.code, code);
      assert.equal(e.retryAfterMs, 7);
      assert.match(e.name, /Error$/);
    }
    assert.ok(LeaseError.from({ code: "internal", message: "x" }) instanceof InternalError);
    assert.ok(LeaseError.from({ code: "no_such_code", message: "x" }) instanceof InternalError);
    seen.add("internal"); // a handler panic: not reachable from a client
  });

  assert.deepEqual([...seen].sort(), [...errorCodes].sort(), "every protocol error code was seen");
});

// Issue 38: the secret was drawn from nuid right after the request id, so
// it was the public lease id plus 33..333 in its last digits. 10,000
// acquires: every secret is 16 bytes in canonical base64url, all distinct,
// none shares 6 leading characters with its lease id nor 8 with another
// secret, and their bits are balanced. (4 characters of 64 would match by
// chance in about one run of 1,600; 6 in one of 7 million, 8 of another
// secret in one of 5 million.)
test("secrets are 128 random bits that share nothing with the id", async () => {
  const n = 10_000;
  const workers = 32;
  const secrets = new Map(); // secret -> lease id
  let started = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (started < n) {
        started++;
        const l = await client.acquire("sec");
        secrets.set(l.record.secret, l.id);
        await l.release();
      }
    }),
  );
  console.log(`# ${n} acquires and releases in ${Math.round(performance.now() - t0)}ms`);
  assert.equal(secrets.size, n, "all secrets distinct");
  const common = (a, b) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
  };
  let ones = 0;
  for (const [secret, id] of secrets) {
    const b = Buffer.from(secret, "base64url");
    assert.ok(b.length === 16 && b.toString("base64url") === secret, `secret ${secret}: ${b.length} bytes, want 16 in canonical base64url`);
    assert.ok(common(secret, id) < 6, `secret ${secret} shares ${common(secret, id)} characters with its lease id ${id}`);
    for (const x of b) for (let v = x; v > 0; v >>= 1) ones += v & 1;
  }
  const sorted = [...secrets.keys()].sort();
  for (let i = 1; i < sorted.length; i++) {
    assert.ok(common(sorted[i - 1], sorted[i]) < 8, `secrets ${sorted[i - 1]} and ${sorted[i]} share a prefix: drawn in sequence, not at random`);
  }
  // n x 128 bits, half of them ones: the standard deviation is 566.
  const d = ones - (n * 128) / 2;
  assert.ok(Math.abs(d) < 3400, `${ones} of ${n * 128} secret bits are ones: ${d} from half, more than 6 standard deviations`);
});

test("a rated pool's would_wait says when to retry", async () => {
  // The bucket starts empty: 1/m lets the first slot in up to a minute from the start.
  const e = await client.acquire("rated", { noWait: true }).catch((e) => e);
  assert.ok(e instanceof WouldWaitError, `${e}`);
  assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 60_000, `retryAfterMs ${e.retryAfterMs}`);
  console.log(`# rated pool (1/m) would_wait retryAfterMs ${e.retryAfterMs}`);
});

test("acquireAll: many sets in random orders, no deadlock, Go's global order", async () => {
  const pools = ["a", "b", "c", "d"];
  const shuffle = (xs) => xs.map((x) => [Math.random(), x]).sort((p, q) => p[0] - q[0]).map((p) => p[1]);
  const t0 = performance.now();
  let done = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let round = 0; round < 3; round++) {
        const want = shuffle(pools).slice(0, 2 + Math.floor(Math.random() * 3));
        const set = await client.acquireAll(shuffle(want).map((pool) => ({ pool })));
        assert.deepEqual(
          set.leases.map((l) => l.pool),
          [...want].sort(),
          "acquired in name order whatever the order asked",
        );
        await new Promise((r) => setTimeout(r, 2));
        await set.release();
        done++;
      }
    }),
  );
  assert.equal(done, 48);
  console.log(`# acquireAll: 48 sets of 2-4 of 4 one-slot pools, 16 at once, done in ${Math.round(performance.now() - t0)}ms`);
  // The node's pools before the cluster's, whatever the names.
  const set = await client.acquireAll([{ pool: "capi" }, { pool: "gpu" }]);
  assert.deepEqual(
    set.leases.map((l) => `${l.node}/${l.pool}`),
    ["tsnode/gpu", "cluster/capi"],
  );
  await set.release();
  // All or none: a refusal releases what was granted.
  await assert.rejects(client.acquireAll([{ pool: "a" }, { pool: "nope" }]), UnknownPoolError);
  await freed("a");
  await assert.rejects(client.acquireAll([{ pool: "a" }, { pool: "a" }]), BadRequestError);
});

test("budgets: units reserve an estimate, releaseUsage settles the actual", async () => {
  await assert.rejects(client.acquire("tok"), BadRequestError); // a budget pool needs an estimate
  await assert.rejects(client.acquire("tok", { units: 1001 }), ExceedsCapacityError);
  await assert.rejects(client.acquire("tok", { units: 1.5 }), BadRequestError);
  await assert.rejects(client.acquire("tok", { units: 2 ** 40 + 1 }), BadRequestError);
  const ac = new AbortController();
  const events = client.events({ node: "tsnode", pool: "tok", signal: ac.signal });
  const granted = [];
  const settled = [];
  const seen = (async () => {
    for await (const ev of events) {
      if (ev.kind === "granted") granted.push(ev.units);
      if (ev.kind === "released") settled.push(ev.settled);
      // Order holds within a subject only (docs/protocol.md, section 6):
      // a released event may come before the granted one it follows.
      if (settled.length === 3 && granted.length === 3) break;
    }
  })();
  await client.nc.flush();
  const figures = async () => {
    const s = await client.stats("tok");
    return [s.budget_used ?? 0, s.budget_reserved ?? 0];
  };

  const a = await client.acquire("tok", { units: 600 });
  assert.equal(a.units, 600);
  assert.equal(a.record.units, 600);
  const s = await client.stats("tok");
  assert.equal(s.budget, "1000/h");
  assert.equal(s.budget_limit, 1000);
  assert.equal(s.budget_window_ms, 3_600_000);
  assert.deepEqual(await figures(), [0, 600]);
  const e = await client.acquire("tok", { units: 500, noWait: true }).catch((e) => e);
  assert.ok(e instanceof WouldWaitError, `${e}`);
  // A waiter the budget alone holds back starts as soon as the holder
  // settles less than its estimate.
  const waiter = client.acquire("tok", { units: 500 });
  await eventually("the waiter to queue", async () => (await client.stats("tok")).queued === 1, 5000);
  await assert.rejects(a.releaseUsage(-1), BadRequestError);
  await a.releaseUsage(200);
  const b = await waiter;
  assert.equal(b.units, 500);
  await eventually("200 spent, 500 reserved", async () => JSON.stringify(await figures()) === "[200,500]", 5000);
  await b.release(); // no actual: the estimate is settled
  await eventually("700 spent", async () => JSON.stringify(await figures()) === "[700,0]", 5000);
  const c = await client.acquire("tok", { units: 300 });
  await c.releaseUsage(0);
  await seen;
  ac.abort();
  assert.deepEqual(granted, [600, 500, 300]);
  assert.deepEqual(settled, [200, 500, 0]);
  assert.deepEqual(await figures(), [700, 0]);
});

test("stats and events", async () => {
  const all = await client.stats();
  assert.ok(all.some((p) => p.name === "ev" && p.capacity === 1));
  await assert.rejects(client.stats("nope"), UnknownPoolError);
  const ac = new AbortController();
  const events = client.events({ node: "tsnode", pool: "ev", signal: ac.signal });
  const kinds = [];
  const seen = (async () => {
    for await (const ev of events) {
      kinds.push(ev.kind);
      assert.equal(ev.pool, "ev");
      assert.equal(ev.secret, undefined);
      if (ev.kind === "released") break;
    }
  })();
  // The subscription is in place once a round trip has passed.
  await client.nc.flush();
  const l = await client.acquire("ev");
  await l.release();
  await seen;
  assert.deepEqual(kinds, ["requested", "granted", "released"]);
  ac.abort();
});

test("a client that closes leaves nothing running (the holder process exits on its own)", async () => {
  const p = mgr.nodeScript(join(fixtures, "holder.mjs"), ["gpu", "release"]);
  const r = await p.exit(15000);
  assert.equal(r.code, 0, p.out);
  assert.match(p.out, /holder: released and closed/);
});

test("close releases what the client holds and withdraws what it waits for", async () => {
  const c = await mgr.connect();
  const l = await c.acquire("gpu");
  const w = settle(c.acquire("gpu"));
  await eventually("the waiter to queue", async () => (await client.stats("gpu")).queued === 1);
  await c.close();
  const r = await w;
  assert.equal(r.ok, false);
  assert.ok(l.isEnded);
  await eventually("the closed client's lease and request to be gone", async () => {
    const s = await client.stats("gpu");
    return s.in_use === 0 && s.queued === 0;
  });
});
