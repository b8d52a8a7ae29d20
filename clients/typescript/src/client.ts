// The client: acquire, renew, release, stats and events over one NATS
// connection, with the Go client's rules (lease/client.go,
// lease/acquireall.go, lease/wake.go).

import { hostname } from "node:os";
import { createInbox, nuid, NoRespondersError, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import {
  BadRequestError,
  ClientClosedError,
  ConflictError,
  InternalError,
  InvalidSlotsError,
  LeaseError,
  LeaseLostError,
  UnavailableError,
  UnknownPoolError,
  WaitExpiredError,
} from "./errors.js";
import { checkUnits, Lease, LeaseSet, margin, releaseAll, type LeaseHost } from "./lease.js";
import { newSecret } from "./secret.js";
import { Liveness, type Conn } from "./liveness.js";
import {
  CLUSTER_NODE,
  DEFAULT_PREFIX,
  eventFilter,
  MAX_GROUP_LEN,
  MAX_HOLDER_LEN,
  MAX_POLL_MS,
  MAX_SET_POOLS,
  MAX_WAIT_MS,
  prefixProblem,
  requestIdProblem,
  resizeSubject,
  statsSubject,
  subject,
  tokenProblem,
  type EventKind,
  type LeaseEvent,
  type LeaseRecord,
  type PoolStats,
  type Reply,
  type ResizeRequest,
} from "./protocol.js";
import { abortReason, abortSource, Notifier, now, Queue, waitFirst, type Source } from "./util.js";

/** Settings of a Client. */
export interface ClientOptions {
  /** The node whose lease manager to ask (required). */
  node: string;
  /** The subject prefix (LEASE_SUBJECT_PREFIX; "lease" otherwise). */
  prefix?: string;
  /** Names this client in leases and events (`<hostname>:<pid>` otherwise). */
  holder?: string;
  /**
   * The prefix of the client's reply subjects; it must be the connection's
   * inbox prefix (the one its permissions allow). Default: the
   * connection's own.
   */
  inboxPrefix?: string;
  /** How long an acquire waits for a first answer before it sends again, and bounds one request (5000). */
  requestTimeoutMs?: number;
  /** How often a queued acquire re-sends its request (5000). */
  pollIntervalMs?: number;
  /** How long a first acquire keeps asking while no lease manager serves the node (10000). */
  noManagerWaitMs?: number;
  /**
   * Every drop of the connection is its server's doing: it goes straight to
   * leasemgr's embedded server over loopback, and this program never closes
   * it (nor makes it reconnect) while it holds leases. A lease with fast
   * release is then not given up when its connection drops, only by its
   * silent and TTL clocks, so its work outlives a crash of leasemgr too, as
   * `executor`'s does (Go: lease.WithServerOnlyDrops). connect() sets it in
   * the default layout. Never set it for a connection through a proxy or a
   * load balancer.
   */
  serverOnlyDrops?: boolean;
  /** @internal the role of the credentials, when connect() found them. */
  role?: Role;
  /** @internal close the connection with the client (connect() made it). */
  ownsConnection?: boolean;
}

/** The embedded server's roles a program may take (docs/security.md). */
export type Role = "executor" | "reader";

/** Options of one acquire. */
export interface AcquireOptions {
  /** Number of slots (1). */
  slots?: number;
  /** The node to ask (the client's otherwise), e.g. "cluster" for a cluster pool. */
  node?: string;
  /** Longest time to stay queued, in ms; then the acquire rejects with WaitExpiredError. 0 or absent: no limit. */
  wait?: number;
  /** Priority in a pool with the priority policy: higher first (low -1, normal 0, high 1). */
  priority?: number;
  /** Tenant in a pool with the fair policy. */
  tenant?: string;
  /**
   * Fairness key in a pool with the fair policy: slots are shared by key
   * within a tenant, and POOL_KEY_LIMITS caps the slots in flight per key.
   */
  key?: string;
  /**
   * The estimate of the work's usage (tokens, cents: the budget's unit),
   * 1 to 2^40: a pool with a budget (POOL_BUDGETS) requires it and
   * reserves it while the lease is held; settle the actual with
   * Lease.releaseUsage. Pools without a budget ignore it.
   */
  units?: number;
  /**
   * Concurrency group (at most 128 bytes), scoped to the pool on the
   * manager that serves it, the tenant and the connection's credential.
   */
  group?: string;
  /**
   * What this request does to its group's older ones: "cancel_pending"
   * replaces the queued ones (they reject with SupersededError);
   * "cancel_in_progress" also asks the holders to stop (lease.stopSignal).
   * Needs group.
   */
  onGroup?: "cancel_in_progress" | "cancel_pending";
  /**
   * The request id: retrying with the same id after a lost reply or a crash
   * returns the same lease (with the same secret). A fresh one otherwise.
   */
  requestId?: string;
  /**
   * The secret that proves holdership (otherwise 128 fresh random bits:
   * secret.ts); give the same one with the same requestId when retrying
   * from another process, and make it as hard to guess.
   */
  secret?: string;
  /** Try-acquire: granted at once, or WouldWaitError. */
  noWait?: boolean;
  /** Gives up waiting: the request is withdrawn and the acquire rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called with the 1-based queue position when queued, and on every poll while waiting. */
  onQueued?: (position: number) => void;
}

/** One pool of an acquireAll. */
export interface Want {
  pool: string;
  slots?: number;
}

/** Where one acquire of an acquireAll waits, and what the set holds meanwhile. */
export interface Queued {
  pool: string;
  node: string;
  slots: number;
  position: number;
  /** "<pool> on node <node>" for each lease already held. */
  holding: string[];
}

/** Options of acquireAll: those of acquire for each pool, with wait bounding the whole set and requestId made per pool as `<id>-<pool>`. */
export interface AcquireAllOptions extends Omit<AcquireOptions, "slots" | "node" | "onQueued"> {
  node?: string;
  onQueued?: (q: Queued) => void;
}

/** Options of events(). */
export interface EventsOptions {
  node?: string;
  pool?: string;
  kind?: EventKind;
  /** Ends the iteration. */
  signal?: AbortSignal;
}

function isNoResponders(m: Msg): boolean {
  return m.data.length === 0 && m.headers?.code === 503;
}

/** Asks lease managers for slots over one NATS connection. One Client serves any number of leases. */
export class Client implements LeaseHost {
  readonly nc: NatsConnection;
  readonly node: string;
  readonly prefix: string;
  readonly holder: string;
  readonly requestTimeoutMs: number;
  readonly pollIntervalMs: number;
  readonly noManagerWaitMs: number;
  readonly role: Role | undefined;
  /** @internal */
  readonly live: Liveness;

  private readonly inbox: string;
  private readonly sub: Subscription;
  private readonly waiters = new Map<string, Queue<Msg>>();
  private readonly leases = new Set<Lease>();
  private readonly acquiring = new Set<{ abort: AbortController; done: Promise<unknown> }>();
  private readonly eventSubs = new Map<Subscription, () => void>();
  private readonly ownsConnection: boolean;
  private closed = false;
  private closing: Promise<void> | undefined;

  // Waking the heartbeats: a reconnect, a server's lame duck notice, or a
  // node's manager announcing a clean stop, makes every lease renew at once
  // (lease/wake.go, lease/lameduck.go).
  private readonly wakeN = new Notifier();
  private readonly stopSubs = new Map<string, Subscription>();
  // A stop_requested event naming one of this client's leases (a newer
  // request of its concurrency group) wakes the heartbeats too, at most
  // once a second: the renewal's answer is what counts, so a forged event
  // costs a renewal (lease/groupstop.go).
  private readonly stopAskSubs = new Map<string, Subscription>();
  private lastStopPoke = 0;
  private statusIter: { stop(): void } | undefined;

  constructor(nc: NatsConnection, opts: ClientOptions) {
    if (nc === undefined || nc === null) throw new BadRequestError("no NATS connection");
    const node = opts.node;
    const np = node === undefined ? "is required" : tokenProblem(node);
    if (np !== undefined) throw new BadRequestError(`node ${JSON.stringify(node ?? "")}: ${np}`);
    const prefix = opts.prefix ?? DEFAULT_PREFIX;
    const pp = prefixProblem(prefix);
    if (pp !== undefined) throw new BadRequestError(`prefix ${JSON.stringify(prefix)}: ${pp}`);
    const holder = opts.holder ?? `${hostname()}:${process.pid}`;
    if (holder === "" || Buffer.byteLength(holder) > MAX_HOLDER_LEN) throw new BadRequestError(`holder must be 1 to ${MAX_HOLDER_LEN} bytes`);
    for (const [name, v] of [
      ["requestTimeoutMs", opts.requestTimeoutMs],
      ["pollIntervalMs", opts.pollIntervalMs],
    ] as const) {
      if (v !== undefined && !(v > 0)) throw new BadRequestError(`${name} ${v} must be positive`);
    }
    if (opts.noManagerWaitMs !== undefined && !(opts.noManagerWaitMs >= 0)) {
      throw new BadRequestError(`noManagerWaitMs ${opts.noManagerWaitMs} must not be negative`);
    }
    this.nc = nc;
    this.node = node;
    this.prefix = prefix;
    this.holder = holder;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 5000;
    this.pollIntervalMs = opts.pollIntervalMs ?? 5000;
    this.noManagerWaitMs = opts.noManagerWaitMs ?? 10000;
    this.role = opts.role;
    this.ownsConnection = opts.ownsConnection ?? false;
    this.live = new Liveness(nc, opts.serverOnlyDrops ?? false);
    const inboxPrefix = opts.inboxPrefix ?? (nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix ?? "_INBOX";
    this.inbox = createInbox(inboxPrefix);
    this.sub = nc.subscribe(`${this.inbox}.*`, {
      callback: (err, msg) => {
        if (err !== null) return;
        this.dispatch(msg);
      },
    });
    this.watchStatus();
  }

  /**
   * Follows the connection's status from the start, as the Go client's
   * lame duck handler does (lease/lameduck.go): a reconnect wakes the
   * heartbeats; a server's lame duck notice, which may come before a grant
   * on its connection, is noted too.
   */
  private watchStatus(): void {
    const it = this.nc.status();
    this.statusIter = it as unknown as { stop(): void };
    void (async () => {
      try {
        for await (const s of it) {
          if (s.type === "reconnect") this.fire();
          else if (s.type === "ldm") this.lameDuckNotice();
        }
      } catch {
        // closed
      }
    })();
  }

  /**
   * The server of the connection said it is in lame duck mode (Go:
   * lease.LameDuckNotice): the leases bound to the connection leave fast
   * release before the server closes it (lease.ts).
   */
  private lameDuckNotice(): void {
    const c = this.live.identity();
    if (c === undefined) return; // already gone: the reconnect moves the leases
    this.live.lameDuck(c);
    this.fire();
  }

  private dispatch(msg: Msg): void {
    const id = msg.subject.slice(this.inbox.length + 1);
    this.waiters.get(id)?.push(msg);
  }

  /** @internal */
  inboxReply(id: string): string {
    return `${this.inbox}.${id}`;
  }

  private register(id: string, q: Queue<Msg>): void {
    if (this.closed) throw new ClientClosedError();
    if (this.waiters.has(id)) throw new ConflictError(`request id ${JSON.stringify(id)} is already being acquired by this client`);
    this.waiters.set(id, q);
  }

  /** @internal */
  registerFresh(q: Queue<Msg>): string {
    if (this.closed) throw new ClientClosedError();
    for (;;) {
      const id = nuid.next();
      if (!this.waiters.has(id)) {
        this.waiters.set(id, q);
        return id;
      }
    }
  }

  /** @internal */
  unregister(id: string): void {
    this.waiters.delete(id);
  }

  /** @internal */
  publish(subj: string, reply: string, body: string): void {
    this.nc.publish(subj, body, { reply });
  }

  /** @internal */
  wakeSource<E>(e: E): Source<E> {
    return this.wakeN.source(e);
  }

  private fire(): void {
    this.wakeN.emit();
  }

  /** Sets up the wake-ups for leases of node: its stop notices (the connection's reconnects: watchStatus). */
  private hookWake(node: string): void {
    if (this.closed) return;
    if (!this.stopSubs.has(node)) {
      try {
        this.stopSubs.set(
          node,
          this.nc.subscribe(eventFilter(this.prefix, node, "", "stopping"), {
            callback: () => this.fire(),
          }),
        );
      } catch {
        // Without it a holder keeps the deadline of its last renewal
        // through a manager restart.
      }
    }
    if (!this.stopAskSubs.has(node)) {
      try {
        this.stopAskSubs.set(
          node,
          this.nc.subscribe(eventFilter(this.prefix, node, "", "stop_requested"), {
            callback: (err, msg) => {
              if (err === null) this.onStopAsked(msg);
            },
          }),
        );
      } catch {
        // Without it the holder hears of a stop request at its next renewal.
      }
    }
  }

  /** Wakes the heartbeats when a stop_requested event names a lease of this client. */
  private onStopAsked(msg: Msg): void {
    let evs: unknown;
    try {
      evs = JSON.parse(new TextDecoder().decode(msg.data));
    } catch {
      return;
    }
    const list = (Array.isArray(evs) ? evs : [evs]) as LeaseEvent[];
    const mine = list.some((ev) => ev?.kind === "stop_requested" && [...this.leases].some((l) => l.id === ev.lease_id && l.node === ev.node && l.pool === ev.pool));
    if (mine && now() - this.lastStopPoke >= 1000) {
      this.lastStopPoke = now();
      this.fire();
    }
  }

  /** @internal */
  leaseEnded(l: Lease): void {
    this.leases.delete(l);
  }

  /** @internal one request with one reply; an error reply rejects as its LeaseError. */
  async request(subj: string, body: unknown, timeoutMs: number = this.requestTimeoutMs): Promise<Reply> {
    let m: Msg;
    try {
      m = await this.nc.request(subj, JSON.stringify(body), { timeout: timeoutMs });
    } catch (err) {
      if (err instanceof NoRespondersError || (err as { cause?: unknown }).cause instanceof NoRespondersError) {
        throw new UnavailableError(`no lease manager answers on ${subj}`);
      }
      throw new UnavailableError(`${subj}: ${(err as Error).message}`, undefined, { cause: err });
    }
    let r: Reply;
    try {
      r = m.json<Reply>();
    } catch (err) {
      throw new InternalError(`malformed reply from the lease manager: ${(err as Error).message}`);
    }
    if (r.status === "error") throw LeaseError.from(r.error);
    return r;
  }

  /**
   * Asks for slots of pool and waits, in the pool's queue order, until they
   * are granted, refused, or opts.signal aborts (then the request is
   * withdrawn; a grant that raced the withdrawal is given back by the
   * manager). Holding is not guaranteed after it resolves: watch
   * lease.done (or lease.signal) and stop the work when it ends.
   */
  async acquire(pool: string, opts: AcquireOptions = {}): Promise<Lease> {
    const abort = new AbortController();
    const done = this.acquireWith(pool, opts, abort.signal);
    const entry = { abort, done: done.catch(() => {}) };
    this.acquiring.add(entry);
    try {
      return await done;
    } finally {
      this.acquiring.delete(entry);
    }
  }

  private async acquireWith(pool: string, opts: AcquireOptions, closing: AbortSignal): Promise<Lease> {
    if (this.closed) throw new ClientClosedError();
    if (this.role === "reader") throw new BadRequestError("the reader role may not acquire: connect with the executor role");
    const node = opts.node ?? this.node;
    const slots = opts.slots ?? 1;
    for (const [what, v] of [
      ["node", node],
      ["pool", pool],
    ] as const) {
      const p = tokenProblem(v);
      if (p !== undefined) throw new BadRequestError(`${what} ${JSON.stringify(v)}: ${p}`);
    }
    if (!Number.isSafeInteger(slots)) throw new InvalidSlotsError(`slots must be an integer, got ${slots}`);
    // A fresh id has no history: every grant for it is written after the
    // first send below. A caller's id may have been granted before.
    const ownId = opts.requestId === undefined;
    const id = opts.requestId ?? nuid.next();
    const idp = requestIdProblem(id);
    if (idp !== undefined) throw new BadRequestError(idp);
    const wait = opts.wait ?? 0;
    if (!(wait >= 0) || wait > MAX_WAIT_MS) throw new BadRequestError(`wait ${wait}ms must be from 0 to the protocol's 30 days (wait_ms ${MAX_WAIT_MS})`);
    let waitMs = Math.floor(wait);
    if (wait > 0 && waitMs === 0) waitMs = 1; // a wait under 1ms is a very short wait, not no limit
    const secret = opts.secret ?? newSecret(); // never nuid, as the id is: secret.ts
    let pollMs = Math.round(this.pollIntervalMs);
    if (pollMs > MAX_POLL_MS) pollMs = 0; // polls rarer than the protocol's bound: promise nothing
    const req: Record<string, unknown> = { request_id: id, holder: this.holder, slots, secret };
    if (waitMs > 0) req.wait_ms = waitMs;
    if (pollMs > 0) req.poll_ms = pollMs;
    if (opts.priority !== undefined && opts.priority !== 0) req.priority = opts.priority;
    if (opts.tenant !== undefined && opts.tenant !== "") req.tenant = opts.tenant;
    if (opts.key !== undefined && opts.key !== "") req.key = opts.key;
    if (opts.units !== undefined && opts.units !== 0) req.units = checkUnits(opts.units, 1);
    if (opts.noWait === true) req.no_wait = true;
    const gp = groupProblem(opts.group, opts.onGroup);
    if (gp !== undefined) throw new BadRequestError(gp);
    if (opts.group !== undefined && opts.group !== "") req.group = opts.group;
    if (opts.onGroup !== undefined) req.on_group = opts.onGroup;
    // Each send names the connection it goes on (fast release).
    const body = (): string => {
      const c: Conn | undefined = this.live.identity();
      if (c !== undefined) {
        req.conn_server = c.server;
        req.conn_id = c.id;
      } else {
        delete req.conn_server;
        delete req.conn_id;
      }
      return JSON.stringify(req);
    };
    const q = new Queue<Msg>();
    this.register(id, q);
    try {
      const subj = subject(this.prefix, node, pool, "acquire");
      const reply = this.inboxReply(id);
      const send = () => {
        try {
          this.publish(subj, reply, body());
        } catch (err) {
          throw new UnavailableError(`acquire not sent: ${(err as Error).message}`);
        }
      };
      const firstSent = now();
      send();
      req.resend = true; // every later send re-sends this one
      let queued = false;
      let answered = false;
      let noManagerSince: number | undefined;
      const nextPoll = () => (queued ? this.pollIntervalMs : this.requestTimeoutMs);
      let timerAt = now() + this.requestTimeoutMs;
      for (;;) {
        const what = await waitFirst<"msg" | "aborted" | "timer">(
          [q.source("msg"), abortSource(opts.signal, "aborted"), abortSource(closing, "aborted")],
          timerAt - now(),
          "timer",
        );
        if (what === "aborted") {
          await this.withdraw(node, pool, id, secret);
          throw opts.signal?.aborted === true ? abortReason(opts.signal) : new ClientClosedError();
        }
        if (what === "timer") {
          // No answer in time: the request or its answer was lost, or the
          // manager restarted. The same request id makes re-sending safe.
          send();
          timerAt = now() + nextPoll();
          continue;
        }
        const ev = q.take();
        if (ev === undefined) continue;
        if (isNoResponders(ev)) {
          // Nobody serves the node right now: a takeover or restart, or a
          // wrong node id. Ask again soon, for as long as a takeover may take.
          noManagerSince ??= now();
          if (!answered && now() - noManagerSince >= this.noManagerWaitMs) {
            throw new UnavailableError(`no lease manager answers on ${subj} (asked for ${this.noManagerWaitMs}ms)`);
          }
          timerAt = now() + Math.min(nextPoll(), 250);
          continue;
        }
        noManagerSince = undefined;
        answered = true;
        let r: Reply;
        try {
          r = ev.json<Reply>();
        } catch (err) {
          throw new InternalError(`malformed reply from the lease manager: ${(err as Error).message}`);
        }
        if (r.status === "queued") {
          queued = true;
          if (opts.onQueued !== undefined && r.position !== undefined && r.position > 0) opts.onQueued(r.position);
          timerAt = now() + this.pollIntervalMs;
          continue;
        }
        if (r.status === "granted") {
          if (r.lease === undefined) throw new InternalError("grant without a lease from the lease manager");
          this.live.serverStopping(r.server_stopping);
          return await this.newLease(node, r.lease, firstSent, !ownId && (queued || r.existing === true));
        }
        const e = r.status === "error" ? LeaseError.from(r.error) : new InternalError(`unexpected reply status ${JSON.stringify(r.status)}`);
        if (e instanceof UnavailableError) {
          timerAt = now() + nextPoll(); // the store or manager is failing over; keep asking
          continue;
        }
        throw e;
      }
    } finally {
      this.unregister(id);
    }
  }

  /** Cancels an acquire whose caller gave up, bounded; if the cancel is lost, an unused grant expires after its TTL. */
  private async withdraw(node: string, pool: string, id: string, secret: string): Promise<void> {
    await this.request(subject(this.prefix, node, pool, "cancel"), { request_id: id, holder: this.holder, secret }).catch(() => {});
  }

  /**
   * Starts the heartbeat of a granted lease. Its deadline is measured from
   * a request sent before the record was written: the first acquire when
   * the grant cannot be older (the id was made by this call), otherwise a
   * renewal sent now (a caller's id that was queued or answered from an
   * earlier grant, or a grant so late that little of the TTL is left).
   */
  private async newLease(node: string, rec: LeaseRecord, firstSent: number, confirm: boolean): Promise<Lease> {
    const l = new Lease(this, rec);
    const ttl = rec.ttl_ms;
    let base = firstSent;
    if (confirm || now() - firstSent > ttl / 3) {
      try {
        base = await l.confirm(now() + ttl - margin(ttl));
      } catch (err) {
        await this.withdraw(rec.node, rec.pool, rec.id, rec.secret ?? "");
        const e = err instanceof LeaseError ? err : new UnavailableError((err as Error).message);
        throw LeaseError.from({ code: e.code, message: `confirming the grant: ${e.message}` });
      }
    }
    l.ttlDeadline = base + ttl - margin(ttl);
    this.hookWake(node);
    if (l.grace > 0 && !(await l.bindLive())) {
      await this.withdraw(rec.node, rec.pool, rec.id, rec.secret ?? "");
      throw new UnavailableError("the connection to the NATS server could not be confirmed for the granted lease (fast release); acquire again");
    }
    if (this.closed) {
      // Closed while the grant was being confirmed: give it back.
      l.startHeartbeat();
      await l.release().catch(() => {});
      throw new ClientClosedError();
    }
    this.leases.add(l);
    l.startHeartbeat();
    return l;
  }

  /**
   * Runs fn while holding slots of pool, and releases them on every exit
   * path. fn gets the lease: stop the work when lease.signal aborts. If the
   * lease was lost before fn settled, withLease rejects with the
   * LeaseLostError (the work ran, at least in part, without its lease).
   */
  async withLease<T>(pool: string, opts: AcquireOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T> {
    const l = await this.acquire(pool, opts);
    let result: T;
    try {
      result = await fn(l);
    } catch (err) {
      await l.release().catch(() => {});
      throw err;
    }
    await l.release(); // rejects with the loss if the lease was lost meanwhile
    return result;
  }

  /**
   * Acquires slots of several pools at once: all of them or none. A pool is
   * taken from the cluster (node "cluster") when the cluster pools' manager
   * serves it, else from the client's node. The pools are acquired in one
   * global order, the same as Go's AcquireAll (the node's pools first, then
   * the cluster's, each group by name), and what is granted is held while
   * the next is waited for, so sets never deadlock each other. On any
   * refusal every lease already granted is released first.
   */
  async acquireAll(wants: Want[], opts: AcquireAllOptions = {}): Promise<LeaseSet> {
    checkWants(wants, opts.requestId);
    const node = opts.node ?? this.node;
    const cluster = await this.clusterPools(node, wants, opts.signal);
    const steps = wants.map((w) => ({ pool: w.pool, slots: w.slots ?? 1, node: cluster.has(w.pool) ? CLUSTER_NODE : node }));
    steps.sort((a, b) => {
      const ca = a.node === CLUSTER_NODE ? 1 : 0;
      const cb = b.node === CLUSTER_NODE ? 1 : 0;
      if (ca !== cb) return ca - cb;
      return a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : 0;
    });
    const until = opts.wait !== undefined && opts.wait > 0 ? now() + opts.wait : undefined;
    const held: Lease[] = [];
    const fail = async (s: { pool: string; slots: number; node: string }, err: unknown): Promise<never> => {
      await releaseAll(held, 5000).catch(() => {});
      const msg = `${s.slots} slot(s) of pool ${s.pool} on node ${s.node}: ${(err as Error).message}`;
      if (err instanceof LeaseError) throw LeaseError.from({ code: err.code, message: msg, retry_after_ms: err.retryAfterMs });
      if (err instanceof Error) {
        err.message = msg;
        throw err;
      }
      throw new Error(msg);
    };
    for (const s of steps) {
      const po: AcquireOptions = { ...opts, node: s.node, slots: s.slots, onQueued: undefined };
      if (opts.requestId !== undefined) po.requestId = `${opts.requestId}-${s.pool}`;
      if (until !== undefined) {
        const left = until - now();
        if (left <= 0) return fail(s, new WaitExpiredError(`the set's wait of ${opts.wait}ms ran out`));
        po.wait = left;
      }
      if (opts.onQueued !== undefined) {
        const holding = held.map((l) => `${l.pool} on node ${l.node}`);
        const cb = opts.onQueued;
        po.onQueued = (position) => cb({ pool: s.pool, node: s.node, slots: s.slots, position, holding });
      }
      try {
        held.push(await this.acquire(s.pool, po));
      } catch (err) {
        return fail(s, err);
      }
    }
    return new LeaseSet(held);
  }

  /**
   * Which of wants are cluster pools, by asking the cluster pools' manager.
   * While none answers (no cluster pools, or a takeover), every pool the
   * node has is the node's; for the others it asks again for up to
   * noManagerWaitMs, then leaves them to the node (which refuses them).
   */
  private async clusterPools(node: string, wants: Want[], signal?: AbortSignal): Promise<Set<string>> {
    const out = new Set<string>();
    if (node === CLUSTER_NODE) {
      for (const w of wants) out.add(w.pool);
      return out;
    }
    const giveUp = now() + this.noManagerWaitMs;
    for (;;) {
      try {
        for (const p of await this.stats(undefined, { node: CLUSTER_NODE })) out.add(p.name);
        return out;
      } catch (err) {
        if (!(err instanceof UnavailableError)) throw new Error(`asking which pools are the cluster's: ${(err as Error).message}`, { cause: err });
      }
      if (signal?.aborted === true) throw abortReason(signal);
      try {
        const ps = await this.stats(undefined, { node });
        if (wants.every((w) => ps.some((p) => p.name === w.pool))) return out;
      } catch {
        // asked again below
      }
      if (now() > giveUp) return out;
      await waitFirst([abortSource(signal, "aborted")], 250, "timer");
    }
  }

  /** The node's pools (the client's node, or opts.node). */
  stats(pool?: undefined, opts?: { node?: string }): Promise<PoolStats[]>;
  /** One pool's figures; UnknownPoolError if the node has no such pool. */
  stats(pool: string, opts?: { node?: string }): Promise<PoolStats>;
  async stats(pool?: string, opts: { node?: string } = {}): Promise<PoolStats[] | PoolStats> {
    const node = opts.node ?? this.node;
    const r = await this.request(statsSubject(this.prefix, node), {});
    const pools = r.pools ?? [];
    if (pool === undefined) return pools;
    const p = pools.find((x) => x.name === pool);
    if (p === undefined) throw new UnknownPoolError(`node ${node} has no pool ${JSON.stringify(pool)}`);
    return p;
  }

  /** Changes a node's pools at runtime (an operator's action: the embedded server allows it to the manager role only). */
  async resize(req: ResizeRequest, opts: { node?: string } = {}): Promise<PoolStats[]> {
    const r = await this.request(resizeSubject(this.prefix, opts.node ?? this.node), req);
    return r.pools ?? [];
  }

  /**
   * Lease events as they happen (core NATS, at most once), for monitoring:
   * every node's and pool's unless narrowed. Ends when signal aborts, the
   * loop breaks, or the client closes.
   */
  events(opts: EventsOptions = {}): AsyncIterableIterator<LeaseEvent> {
    if (this.closed) throw new ClientClosedError();
    const sub = this.nc.subscribe(eventFilter(this.prefix, opts.node, opts.pool, opts.kind));
    const stop = opts.signal === undefined ? () => {} : abortSource(opts.signal, undefined)(() => sub.unsubscribe());
    this.eventSubs.set(sub, stop);
    const subs = this.eventSubs;
    async function* iterate(): AsyncGenerator<LeaseEvent> {
      try {
        for await (const m of sub) {
          // A message holds the events of its subject since the one before
          // it, oldest first (a single object from an older manager).
          let body: LeaseEvent | LeaseEvent[];
          try {
            body = m.json<LeaseEvent | LeaseEvent[]>();
          } catch (err) {
            if (err instanceof SyntaxError) continue; // not an event
            throw err;
          }
          yield* Array.isArray(body) ? body : [body];
        }
      } finally {
        stop();
        sub.unsubscribe();
        subs.delete(sub);
      }
    }
    return iterate();
  }

  /**
   * Closes the client: withdraws the acquires in flight, releases every
   * lease it holds (their done resolves), stops every timer and
   * subscription it started, and closes the connection if connect() made
   * it.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.closed = true;
    const pending = [...this.acquiring];
    for (const a of pending) a.abort.abort();
    await Promise.all(pending.map((a) => a.done));
    await releaseAll([...this.leases], 5000).catch(() => {});
    for (const l of [...this.leases]) l.end(new LeaseLostError(l.id, new ClientClosedError()));
    this.live.close();
    for (const s of this.stopSubs.values()) s.unsubscribe();
    this.stopSubs.clear();
    for (const s of this.stopAskSubs.values()) s.unsubscribe();
    this.stopAskSubs.clear();
    this.statusIter?.stop();
    for (const [s, stop] of this.eventSubs) {
      stop();
      s.unsubscribe();
    }
    this.eventSubs.clear();
    this.sub.unsubscribe();
    if (this.ownsConnection && !this.nc.isClosed()) await this.nc.close();
  }
}

function checkWants(wants: Want[], requestId: string | undefined): void {
  if (wants.length === 0) throw new BadRequestError("no pools to acquire");
  if (wants.length > MAX_SET_POOLS) throw new BadRequestError(`${wants.length} pools in one acquire, at most ${MAX_SET_POOLS}`);
  const seen = new Set<string>();
  for (const w of wants) {
    const p = tokenProblem(w.pool);
    if (p !== undefined) throw new BadRequestError(`pool ${JSON.stringify(w.pool)}: ${p}`);
    if (seen.has(w.pool)) throw new BadRequestError(`pool ${w.pool} named twice`);
    seen.add(w.pool);
    const slots = w.slots ?? 1;
    if (!Number.isSafeInteger(slots) || slots < 1) throw new InvalidSlotsError(`${slots} slot(s) of pool ${w.pool}: must be at least 1`);
    if (requestId !== undefined) {
      const ip = requestIdProblem(`${requestId}-${w.pool}`);
      if (ip !== undefined) throw new BadRequestError(`request id ${JSON.stringify(requestId)} with pool ${w.pool}: ${ip}`);
    }
  }
}

/** The group options' problem, or undefined. */
function groupProblem(group: string | undefined, onGroup: string | undefined): string | undefined {
  if (group !== undefined && new TextEncoder().encode(group).length > MAX_GROUP_LEN) return `group is longer than ${MAX_GROUP_LEN} bytes`;
  if (onGroup !== undefined && onGroup !== "cancel_in_progress" && onGroup !== "cancel_pending") {
    return `onGroup must be "cancel_in_progress" or "cancel_pending", got ${JSON.stringify(onGroup)}`;
  }
  if (onGroup !== undefined && (group === undefined || group === "")) return `onGroup ${JSON.stringify(onGroup)} needs a group`;
  return undefined;
}
