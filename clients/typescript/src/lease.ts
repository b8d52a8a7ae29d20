// A held lease, renewing itself until released or lost: the Go client's
// lease/lease.go and lease/renew.go.
//
// A NATS server in lame duck mode (a rolling restart) tells its clients so
// (nats.js: the status "ldm"), then, a grace period later, closes their
// connections one at a time. Such a close is the server's doing and frees
// nothing, but a holder cannot tell it from a reset on its path, which
// would: so a lease with fast release would be lost unless it moved to a
// new connection within 3/4 of the grace of the close. Told by its server
// (Client notes the connection as a lame duck's, liveness.ts), the holder
// renews each lease bound to the connection at once, saying so
// (lame_duck), and the manager unbinds the lease from that connection: no
// close of it frees the lease any more, so the holder stops counting the
// connection's clocks once the renewal's answer says it is unbound, and
// the lease rides the close on its TTL alone. The next renewal on another
// connection binds it there again. Until that answer comes, nothing
// changes. From the moment an unbound lease's renewal goes out on a
// connection, the holder counts that connection as the lease's, dated from
// the send: the manager may bind the lease to it on receipt, and a close
// can only come after that (lease/lameduck.go).

import type { LeaseRecord, RenewRequest, Reply } from "./protocol.js";
import { MAX_UNITS, subject } from "./protocol.js";
import type { Conn, Liveness } from "./liveness.js";
import { sameConn } from "./liveness.js";
import {
  BadRequestError,
  ConnectionDroppedError,
  ConnectionSilentError,
  DeadlinePassedError,
  LeaseError,
  LeaseLostError,
  LeaseNotFoundError,
  TokenMismatchError,
  UnavailableError,
  UnknownPoolError,
  SupersededError,
} from "./errors.js";
import { deferred, Latch, now, Queue, sleep, toDate, waitFirst, type Deferred, type Source } from "./util.js";
import type { Msg } from "@nats-io/transport-node";

/** @internal checks an estimate (lo 1) or an actual (lo 0) of units (docs/protocol.md, section 7.2). */
export function checkUnits(units: number, lo: number): number {
  if (!Number.isSafeInteger(units) || units < lo || units > MAX_UNITS) {
    throw new BadRequestError(`units must be an integer from ${lo} to ${MAX_UNITS}, got ${units}`);
  }
  return units;
}

/** What a Lease needs of the Client that made it. */
export interface LeaseHost {
  readonly prefix: string;
  readonly live: Liveness;
  inboxReply(id: string): string;
  registerFresh(q: Queue<Msg>): string;
  unregister(id: string): void;
  publish(subject: string, reply: string, body: string): void;
  wakeSource<E>(e: E): Source<E>;
  request(subject: string, body: unknown, timeoutMs: number): Promise<Reply>;
  leaseEnded(l: Lease): void;
}

/** How much earlier than the manager a holder gives its lease up: TTL/10. */
export function margin(ttl: number): number {
  return ttl / 10;
}

/** How long a renewal waits for an answer before it sends the same request again: min(TTL/10, 500 ms). */
export function renewRetry(ttl: number): number {
  return Math.min(ttl / 10, 500);
}

export function recordConn(r: { conn_server?: string; conn_id?: number }): Conn | undefined {
  if (r.conn_server === undefined || r.conn_server === "" || r.conn_id === undefined || r.conn_id < 1) return undefined;
  return { server: r.conn_server, id: r.conn_id };
}

function isNoResponders(m: Msg): boolean {
  return m.data.length === 0 && m.headers?.code === 503;
}

function connKey(c: Conn): string {
  return `${c.server}/${c.id}`;
}

/**
 * A held grant of slots. It renews itself every TTL/3 until release(), or
 * until it is lost; `done` resolves then. Its deadline (expiresAt) starts
 * when the request that preceded the record's write was sent, so it always
 * runs out before the manager's record does: when `done` resolves with a
 * loss, the manager has not yet handed the slots to anyone else. Work
 * guarded by the lease must stop then (within lossGraceMs), and whatever
 * it writes to should check `token`, which only grows.
 */
export class Lease {
  /** The lease record as granted, secret included: keep it to yourself. */
  readonly record: LeaseRecord;
  /**
   * Resolves when the lease ends: with the LeaseLostError saying why when
   * it is lost (refused on renewal, its connection gone, no renewal in
   * time), with null once released.
   */
  readonly done: Promise<LeaseLostError | null>;
  /** Aborted when the lease ends (lost or released), with the same reason: pass it to the work. */
  readonly signal: AbortSignal;
  /**
   * Aborted, with a SupersededError naming the group and the newer
   * request, when a newer request of the lease's concurrency group asked
   * the holder to stop (onGroup "cancel_in_progress"): stop the work, then
   * release. Heard at once (a stop_requested event makes the lease renew),
   * or else at the next renewal (every TTL/3).
   */
  readonly stopSignal: AbortSignal;

  /** @internal the disconnect grace of a lease with fast release (0 without). */
  readonly grace: number;
  /** @internal the connection the lease is bound to; undefined once unbound (lame duck: see the top). */
  bound: Conn | undefined;
  /**
   * @internal dates bound when a renewal claimed it (claim): its send
   * time, which counts like an answered PING on it (-Infinity: none).
   */
  boundSince = -Infinity;
  /** @internal the TTL deadline (monotonic ms). */
  ttlDeadline = 0;

  private readonly host: LeaseHost;
  private readonly ended: Deferred<LeaseLostError | null>;
  private readonly abort = new AbortController();
  private readonly stopAsk = new AbortController();
  private readonly stopL = new Latch();
  private readonly hbDone = deferred<void>();
  private heartbeatStarted = false;
  private endReason: LeaseLostError | null | undefined;
  /** @internal the actual units releaseUsage settles; undefined: the estimate. */
  usage: number | undefined;

  /** @internal */
  constructor(host: LeaseHost, rec: LeaseRecord) {
    this.host = host;
    this.record = rec;
    this.ended = deferred();
    this.done = this.ended.promise;
    this.signal = this.abort.signal;
    this.stopSignal = this.stopAsk.signal;
    this.grace = rec.disconnect_grace_ms !== undefined && rec.disconnect_grace_ms > 0 ? rec.disconnect_grace_ms : 0;
  }

  /** The lease id (the acquire's request id). */
  get id(): string {
    return this.record.id;
  }
  /** The fencing token: pass it to whatever the work writes to, which should refuse lower ones. */
  get token(): number {
    return this.record.token;
  }
  /** The node whose pool granted the lease. */
  get node(): string {
    return this.record.node;
  }
  get pool(): string {
    return this.record.pool;
  }
  get slots(): number {
    return this.record.slots;
  }
  /** The lease's TTL in ms; a renewal goes out every TTL/3. */
  get ttlMs(): number {
    return this.record.ttl_ms;
  }
  /**
   * The holder's deadline: when the lease counts as lost unless a renewal
   * succeeds first. Renewals move it later; with fast release it moves
   * earlier when the lease's connection drops. Never the record's
   * expires_at, which holders must not use.
   */
  get expiresAt(): Date {
    return toDate(this.deadlineAt());
  }
  /**
   * How long work may take to stop once `done` resolved with a loss: half
   * the margin before the manager can give the slots to anyone else.
   */
  get lossGraceMs(): number {
    const m = margin(this.ttlMs) / 2;
    return this.grace > 0 ? Math.min(m, this.grace / 8) : m;
  }
  /** The disconnect grace of a lease with fast release, 0 without. */
  get fastReleaseMs(): number {
    return this.grace;
  }
  /** Whether the lease has ended (lost or released). */
  get isEnded(): boolean {
    return this.endReason !== undefined;
  }

  /** @internal the deadline on the monotonic clock. */
  deadlineAt(): number {
    let d = this.ttlDeadline;
    if (this.grace > 0 && this.bound !== undefined) d = Math.min(d, this.host.live.deadline(this.bound, this.grace, this.boundSince));
    return d;
  }

  /**
   * Gives the slots back and stops the renewals. Releasing a lease that was
   * lost rejects with its LeaseLostError; releasing twice is a no-op.
   */
  async release(timeoutMs = 5000): Promise<void> {
    this.stopHeartbeat();
    await this.hbDone.promise;
    if (this.endReason === null) return;
    if (this.endReason !== undefined) {
      // Lost: still ask the manager to drop the record in case it lives,
      // but briefly: the manager is likely unreachable.
      await this.sendRelease(Math.min(timeoutMs, 1000)).catch(() => {});
      throw this.endReason;
    }
    try {
      await this.sendRelease(timeoutMs);
    } catch (err) {
      if (err instanceof LeaseNotFoundError) {
        this.end(new LeaseLostError(this.id, err));
        throw this.endReason;
      }
      throw err;
    }
    this.end(null);
  }

  /**
   * release() that settles units, what the work actually used, in the
   * pool's budget instead of the estimate (AcquireOptions.units): less is
   * free again at once, more is debited. release() alone settles the
   * estimate, as does a lease that ends otherwise.
   */
  async releaseUsage(units: number, timeoutMs = 5000): Promise<void> {
    this.usage = checkUnits(units, 0);
    return this.release(timeoutMs);
  }

  /** The estimate the lease reserved (AcquireOptions.units), 0 if none. */
  get units(): number {
    return this.record.units ?? 0;
  }

  private sendRelease(timeoutMs: number): Promise<Reply> {
    const r = this.record;
    const body: Record<string, unknown> = { lease_id: r.id, token: r.token, secret: r.secret };
    if (this.usage !== undefined) body.units = this.usage;
    return this.host.request(subject(this.host.prefix, r.node, r.pool, "release"), body, timeoutMs);
  }

  /** @internal ends the lease, once. */
  end(reason: LeaseLostError | null): void {
    if (this.endReason !== undefined) return;
    this.endReason = reason;
    this.stopHeartbeat();
    this.abort.abort(reason ?? new Error(`lease ${this.id} released`));
    this.ended.resolve(reason);
    this.host.leaseEnded(this);
  }

  private get stopped(): boolean {
    return this.stopL.isSet;
  }

  private stopHeartbeat(): void {
    this.stopL.set();
    if (!this.heartbeatStarted) this.hbDone.resolve();
  }

  /**
   * @internal
   * Starts the pings of a lease with fast release and has the server answer
   * one on the lease's connection before the holder relies on it. A lease
   * bound to a connection that was replaced meanwhile is moved first.
   * Returns false if that could not be done.
   */
  async bindLive(): Promise<boolean> {
    const live = this.host.live;
    // A renewal before (confirm) may have claimed a connection: the
    // grant's record names the lease's.
    this.bound = recordConn(this.record);
    this.boundSince = -Infinity;
    live.join(this.grace);
    const ttl = this.ttlMs;
    for (let i = 0; i < 3; i++) {
      if (sameConn(this.bound, live.identity())) await live.ping(this.grace / 2);
      if (now() < this.deadlineAt()) return true;
      try {
        const { first, rec } = await this.move();
        this.ttlDeadline = first + ttl - margin(ttl);
        const c = rec !== undefined ? recordConn(rec) : undefined;
        if (c !== undefined) this.bound = c;
      } catch {
        break;
      }
    }
    live.leave();
    return false;
  }

  /** @internal starts the heartbeat. */
  startHeartbeat(): void {
    this.heartbeatStarted = true;
    void this.heartbeat().finally(() => {
      if (this.grace > 0) this.host.live.leave();
      this.hbDone.resolve();
    });
  }

  /**
   * Renews every TTL/3, counted from the send time the deadline is measured
   * from, until released, refused, or the deadline passes. It also renews
   * at once when woken (a reconnect, the manager's stop notice) and, with
   * fast release, when it finds the connection changed, so the lease moves
   * to the new one.
   */
  private async heartbeat(): Promise<void> {
    const ttl = this.ttlMs;
    const interval = ttl / 3;
    const retry = Math.min(interval, 250);
    let nextAt = this.ttlDeadline - (ttl - margin(ttl)) + interval;
    const movedEvery = this.grace > 0 ? this.grace / 8 : 0;
    let movedAt = movedEvery > 0 ? now() + movedEvery : Infinity;
    if (this.grace > 0 && this.host.live.isLameDuck(this.bound)) {
      nextAt = now(); // granted on a lame duck's connection: unbind it now (lease/lameduck.go)
    }
    for (;;) {
      if (this.stopped) return;
      const at = Math.min(nextAt, this.deadlineAt(), movedAt);
      const r = await waitFirst<"stop" | "woken" | "timer">([this.stopL.source("stop"), this.host.wakeSource("woken")], at - now(), "timer");
      if (r === "stop" || this.stopped) return;
      let renewNow = r === "woken";
      const t = now();
      if (t >= this.deadlineAt()) {
        this.end(new LeaseLostError(this.id, this.lossCause()));
        return;
      }
      if (t >= movedAt) {
        movedAt = t + movedEvery;
        if (this.mustMove()) renewNow = true;
      }
      if (t >= nextAt) renewNow = true;
      if (!renewNow) continue;
      try {
        const { first, rec } = await this.renew(this.deadlineAt(), this.stopL);
        this.ttlDeadline = first + ttl - margin(ttl);
        if (rec !== undefined) await this.bindTo(recordConn(rec));
        // A renewal that waited long for its answer dates from its first
        // attempt: the next one is due that much sooner. One that left the
        // lease bound to a lame duck's connection (it raced the notice) is
        // followed at once (lease/lameduck.go).
        nextAt = first + interval;
        if (this.grace > 0 && this.host.live.isLameDuck(this.bound)) nextAt = now() + retry;
      } catch (err) {
        if (this.stopped) return;
        if (err instanceof LeaseNotFoundError || err instanceof TokenMismatchError || err instanceof UnknownPoolError || err instanceof SupersededError) {
          this.end(new LeaseLostError(this.id, err));
          return;
        }
        nextAt = now() + retry;
      }
    }
  }

  /**
   * Notes that the manager bound the lease to c (a renewal's answer). If
   * that moved it, the server first answers a PING on c: only that dates
   * the new connection.
   */
  private async bindTo(c: Conn | undefined): Promise<void> {
    if (this.grace <= 0 || c === undefined || sameConn(this.bound, c)) return;
    await this.host.live.ping(this.grace - this.grace / 4);
    this.bound = c;
    this.boundSince = -Infinity;
  }

  /**
   * Counts c as the lease's connection from at, the send time of a renewal
   * on it that may bind the lease there: if the lease is unbound, or always
   * (force: the manager unbound it, and may have bound it to c since).
   * lease/lameduck.go.
   */
  private claim(c: Conn | undefined, at: number, force: boolean): void {
    if (this.grace <= 0 || c === undefined || (this.bound !== undefined && !force) || sameConn(this.bound, c)) return;
    this.bound = c;
    this.boundSince = at;
  }

  /** Notes that the manager has unbound the lease (a renewal on a connection whose server is in lame duck mode): no close frees it now. */
  private unbind(): void {
    this.bound = undefined;
    this.boundSince = -Infinity;
  }

  /**
   * Whether the lease with fast release is to move to the connection its
   * client is on now: it is bound to another, or unbound while the client
   * is no longer on the lame duck's connection.
   */
  private mustMove(): boolean {
    const id = this.host.live.identity();
    if (id === undefined) return false;
    return !sameConn(id, this.bound) && (this.bound !== undefined || !this.host.live.isLameDuck(id));
  }

  private lossCause(): Error {
    if (this.grace > 0 && this.deadlineAt() < this.ttlDeadline) {
      if (this.host.live.dropped(this.bound)) {
        return new ConnectionDroppedError(
          `not within ${this.grace - this.grace / 4}ms of the last answer on it (its slots go to others ${this.grace}ms after a close by the holder's end)`,
        );
      }
      return new ConnectionSilentError(`none for ${this.host.live.silence}ms`);
    }
    return new DeadlinePassedError();
  }

  /**
   * @internal
   * Renews a granted lease before its holder relies on it, and returns the
   * send time of the renewal that succeeded. An unavailable answer (a
   * manager stopping for a restart, a store failing over) is asked again,
   * as the heartbeat does, until `until` (monotonic): the grant is stored,
   * and the manager that serves the node next restores it. Any other
   * refusal ends it at once.
   */
  async confirm(until: number): Promise<number> {
    const stop = new Latch();
    for (;;) {
      try {
        return (await this.renew(until, stop, false)).first;
      } catch (err) {
        if (!(err instanceof UnavailableError) || now() >= until) throw err;
      }
      await this.pause(until);
    }
  }

  /**
   * Renews a lease with fast release from the client's connection, which
   * binds it there, before its holder relies on it (bindLive). An attempt
   * not answered within the grace ends it: the connection is in doubt. An
   * answer "unavailable" is asked again, as confirm does, until the lease's
   * deadline.
   */
  private async move(): Promise<{ first: number; rec?: LeaseRecord }> {
    for (;;) {
      const until = Math.min(now() + this.grace, this.ttlDeadline);
      try {
        return await this.renew(until, this.stopL, false);
      } catch (err) {
        if (!(err instanceof UnavailableError) || now() >= until) throw err;
      }
      await this.pause(this.ttlDeadline);
    }
  }

  /** Waits before a renewal answered "unavailable" is asked again, as the heartbeat does: min(TTL/3, 250 ms), and not past until. */
  private async pause(until: number): Promise<void> {
    const wait = Math.min(until - now(), this.record.ttl_ms / 3, 250);
    if (wait > 0) await sleep(wait).promise;
  }

  /**
   * @internal
   * Asks the manager to renew the lease, re-sending the same request every
   * renewRetry(TTL) while no attempt has been answered, until `until`
   * (monotonic) or stop. Every attempt carries one reply subject, so the
   * answer to any attempt counts. Returns the send time of the first
   * attempt, from which the new deadline is measured (the manager wrote the
   * record after it received some attempt, so after the first was sent),
   * and the record the manager answered with.
   *
   * relied says the holder relies on the lease (the heartbeat): with fast
   * release, a renewal still unanswered when the lease's deadline passes
   * then ends, so that the heartbeat sees the loss. Before the holder relies
   * on it (confirm, bindLive's move), that deadline may be the old
   * connection's, already past, and does not cut the renewal short.
   */
  async renew(until: number, stop: Latch, relied = true): Promise<{ first: number; rec?: LeaseRecord }> {
    const host = this.host;
    const live = host.live;
    const r = this.record;
    const first = now();
    // Every attempt names the connection it goes on: a lease with fast
    // release moves to it.
    let sentOn: Conn | undefined;
    // plain is the last connection an attempt without lame_duck went on
    // (plainAt: its first send there), unless a lame_duck attempt followed
    // on the same connection: if the manager answers unbound, it may have
    // bound the lease to plain since (lease/lameduck.go).
    let plain: Conn | undefined;
    let plainAt = -Infinity;
    let sentLameDuck = false; // the last attempt said lame_duck
    // When the first attempt went out on each connection: an answer
    // "bound" to one proves its server took an attempt on it, so it was
    // open after then.
    const firstOn = new Map<string, number>();
    const body = (): string => {
      sentOn = live.identity();
      if (sentOn !== undefined && !firstOn.has(connKey(sentOn))) firstOn.set(connKey(sentOn), now());
      // On a connection whose server is in lame duck mode, the renewal
      // asks to unbind the lease; on any other, an unbound lease counts
      // the connection as its own from now (lease/lameduck.go).
      const lameDuck = this.grace > 0 && live.isLameDuck(sentOn);
      sentLameDuck = lameDuck;
      if (lameDuck && sameConn(plain, sentOn)) {
        plain = undefined; // the same connection: this attempt comes after it
      } else if (!lameDuck && sentOn !== undefined) {
        if (!sameConn(plain, sentOn)) {
          plain = sentOn;
          plainAt = now();
        }
        this.claim(sentOn, plainAt, false);
      }
      const b: RenewRequest = { lease_id: r.id, token: r.token };
      if (r.secret !== undefined && r.secret !== "") b.secret = r.secret;
      if (sentOn !== undefined) {
        b.conn_server = sentOn.server;
        b.conn_id = sentOn.id;
      }
      if (lameDuck) b.lame_duck = true;
      return JSON.stringify(b);
    };
    const q = new Queue<Msg>();
    const id = host.registerFresh(q);
    try {
      const subj = subject(host.prefix, r.node, r.pool, "renew");
      const reply = host.inboxReply(id);
      const send = () => {
        try {
          host.publish(subj, reply, body());
        } catch (err) {
          throw new UnavailableError(`renewal not sent: ${(err as Error).message}`);
        }
      };
      send();
      const retryEvery = renewRetry(this.ttlMs);
      let resendAt = now() + retryEvery;
      const movedEvery = this.grace > 0 ? this.grace / 8 : 0;
      let movedAt = movedEvery > 0 ? now() + movedEvery : Infinity;
      let soonAt = Infinity;
      for (;;) {
        const at = Math.min(resendAt, movedAt, soonAt, until);
        const ev = await waitFirst<"stop" | "woken" | "msg" | "timer">(
          [stop.source("stop"), q.source("msg"), host.wakeSource("woken")],
          at - now(),
          "timer",
        );
        if (ev === "stop") throw new UnavailableError("renewal stopped");
        const m = ev === "msg" ? q.take() : undefined;
        if (m !== undefined) {
          if (isNoResponders(m)) {
            // Nobody serves the node at this moment: the next attempt may
            // reach it. A lease that must move to a new connection within
            // its grace asks again soon.
            if (this.grace > 0 && live.dropped(this.bound)) soonAt = now() + this.grace / 8;
            continue;
          }
          let rep: Reply;
          try {
            rep = JSON.parse(new TextDecoder().decode(m.data)) as Reply;
          } catch (err) {
            throw LeaseError.from({ code: "internal", message: `malformed reply from the lease manager: ${(err as Error).message}` });
          }
          if (rep.status === "error") throw LeaseError.from(rep.error);
          live.serverStopping(rep.server_stopping);
          if (rep.status === "bound") {
            if (rep.lease !== undefined) {
              const c = recordConn(rep.lease);
              if (c !== undefined) {
                const at = firstOn.get(connKey(c));
                if (at !== undefined) live.record(c, at);
              }
              await this.bindTo(c);
            }
            continue; // the renewal's own answer follows
          }
          if (rep.stop !== undefined && !this.stopAsk.signal.aborted) this.stopAsk.abort(new SupersededError(rep.stop.message));
          if (rep.lease !== undefined && this.grace > 0 && recordConn(rep.lease) === undefined) {
            // Unbound on a lame_duck attempt.
            if (plain !== undefined) this.claim(plain, plainAt, true);
            else this.unbind();
          }
          return { first, rec: rep.lease };
        }
        const t = now();
        if (t >= until) throw new UnavailableError("renewal not answered before its deadline");
        let resend = false;
        if (ev === "woken") {
          // Reconnected: an attempt sent before may be lost. Or the server
          // said it is in lame duck mode: ask again, so.
          const id = live.identity();
          resend = id !== undefined && (!sameConn(id, sentOn) || (!sentLameDuck && this.grace > 0 && live.isLameDuck(id)));
        }
        if (t >= movedAt) {
          movedAt = t + movedEvery;
          // The lease's deadline moves earlier when its connection drops:
          // the heartbeat must see it pass, not wait here.
          if (relied && t >= this.deadlineAt()) throw new UnavailableError("renewal not answered before the lease's deadline");
          const id = live.identity();
          if (id !== undefined && !sameConn(id, sentOn)) resend = true;
        }
        if (t >= soonAt) {
          soonAt = Infinity;
          resend = true;
        }
        if (t >= resendAt) {
          resendAt = t + retryEvery;
          resend = true;
        }
        if (resend) send();
      }
    } finally {
      host.unregister(id);
    }
  }
}

/**
 * Several leases held together (Client.acquireAll): all of them or none.
 * The set ends when any of its leases ends; work guarded by it must stop
 * then.
 */
export class LeaseSet {
  /** The leases, in the order they were acquired. */
  readonly leases: readonly Lease[];
  /** Resolves when the first lease ends: with its LeaseLostError if it was lost, null if released. */
  readonly done: Promise<LeaseLostError | null>;
  /** Aborted when any lease ends. */
  readonly signal: AbortSignal;
  private releasing: Promise<void> | undefined;

  /** @internal */
  constructor(leases: Lease[]) {
    this.leases = leases;
    this.done = Promise.race(leases.map((l) => l.done));
    this.signal = AbortSignal.any(leases.map((l) => l.signal));
  }

  /** The earliest of the leases' deadlines. */
  get expiresAt(): Date {
    return new Date(Math.min(...this.leases.map((l) => l.expiresAt.getTime())));
  }

  /** The smallest of the leases' loss graces. */
  get lossGraceMs(): number {
    return Math.min(...this.leases.map((l) => l.lossGraceMs));
  }

  /**
   * Gives every lease back, the last acquired first. Rejects with the first
   * error of a lease that was still held (a lost lease's loss is in done,
   * not here). Calling it again returns the first call's result.
   */
  /** release() settling units in the budget of every pool of the set (Lease.releaseUsage). */
  releaseUsage(units: number, timeoutMs = 5000): Promise<void> {
    const n = checkUnits(units, 0);
    for (const l of this.leases) l.usage = n;
    return this.release(timeoutMs);
  }

  release(timeoutMs = 5000): Promise<void> {
    this.releasing ??= releaseAll(this.leases, timeoutMs);
    return this.releasing;
  }
}

/** Releases leases, the last first; rejects with the first error of a lease that was still held. */
export async function releaseAll(leases: readonly Lease[], timeoutMs: number): Promise<void> {
  let first: Error | undefined;
  for (let i = leases.length - 1; i >= 0; i--) {
    const l = leases[i]!;
    const held = !l.isEnded;
    try {
      await l.release(timeoutMs);
    } catch (err) {
      if (held && !(err instanceof LeaseLostError) && first === undefined) {
        first = new Error(`releasing lease ${l.id} of pool ${l.pool} on node ${l.node}: ${(err as Error).message}`, { cause: err });
      }
    }
  }
  if (first !== undefined) throw first;
}
