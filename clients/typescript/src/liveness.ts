// The holder's side of fast release: the same rules as the Go client's
// lease/liveness.go (docs/guarantees.md, section 2.1; docs/protocol.md,
// section 5.3.1).
//
// A lease granted with a disconnect grace G is bound to the connection its
// request came on. The manager frees it G after that connection's server
// confirmed a close made at the holder's end, unless a renewal moved the
// lease to another connection first. So the holder keeps two clocks per
// connection, both from the send time of the last PING the server answered
// on it (the server answered it before it saw any close):
//
//   - dropped: once this client is no longer connected on the lease's
//     connection, the lease is lost at that PING + 3/4 G, unless a renewal
//     sent on the new connection moved it first. A drop by a server that
//     its stopping manager named in server_stopping does not count, nor does
//     any drop when serverOnlyDrops is set (loopback to leasemgr's embedded
//     server, and a program that closes nothing itself while it holds
//     leases: connect() in the default layout, as `executor` does).
//   - silent: while the connection stays open but unanswered, the lease is
//     lost at that PING + min(30 s, maxPingOut x pingInterval).
//
// A lease the manager unbound from its connection (a renewal with
// lame_duck, after its server said it is in lame duck mode: lease.ts,
// lease/lameduck.go) has neither clock until a renewal binds it again:
// the TTL's deadline alone.
//
// While it holds such leases, the client pings every G/8 (at most every
// 250 ms, at least every 10 ms).

import type { NatsConnection } from "@nats-io/transport-node";
import { now } from "./util.js";

/** A NATS connection as a server names it: its id and the client id it gave the connection. */
export interface Conn {
  server: string;
  id: number;
}

export function sameConn(a: Conn | undefined, b: Conn | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.server === b.server && a.id === b.id;
}

function key(c: Conn): string {
  return `${c.server}/${c.id}`;
}

/** How long after the last answered PING a lease with grace g stays held once its connection dropped. */
export function liveDeadline(g: number): number {
  return g - g / 4;
}

/** The silent clock's cap: far beyond a restart or a stall, far within a TCP stack's give-up. */
export const MAX_SILENCE_MS = 30_000;
/** How many connections (and stopping servers, and lame ducks' connections) are remembered. */
const MAX_LIVE_CONNS = 4;

// nats.js's internals this reads: whether the protocol is connected right
// now, and the INFO of the connection it is on. The public `info` alone
// stays set while the client reconnects.
interface ProtocolLike {
  connected?: boolean;
  info?: { server_id?: string; client_id?: number };
}
interface ConnLike {
  protocol?: ProtocolLike;
  options?: { pingInterval?: number; maxPingOut?: number; inboxPrefix?: string };
}

/** The connection nc is on now, or undefined while it is not connected. */
export function identity(nc: NatsConnection): Conn | undefined {
  if (nc.isClosed()) return undefined;
  const p = (nc as unknown as ConnLike).protocol;
  const info = p?.info;
  if (p === undefined || p.connected !== true || info === undefined) return undefined;
  if (typeof info.server_id !== "string" || info.server_id === "" || typeof info.client_id !== "number" || info.client_id < 1) {
    return undefined;
  }
  return { server: info.server_id, id: info.client_id };
}

/** The silent clock's limit for nc: 30 s, or less if nc's own client would give up on a silent connection sooner. */
export function silenceLimit(nc: NatsConnection): number {
  const o = (nc as unknown as ConnLike).options ?? {};
  const interval = o.pingInterval ?? 2 * 60_000;
  const maxOut = o.maxPingOut ?? 2;
  let d = MAX_SILENCE_MS;
  if (interval > 0 && maxOut > 0) d = Math.min(d, interval * maxOut);
  return d;
}

export class Liveness {
  readonly silence: number;
  /** Every drop of the connection is its server's doing (serverOnlyDrops): the dropped clock never runs. */
  readonly serverDrops: boolean;
  private users = 0;
  private interval = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly last = new Map<string, number>();
  private readonly stopping = new Map<string, number>();
  // The connections whose server said it is in lame duck mode
  // (lease/lameduck.go), with when it was said.
  private readonly lameDucks = new Map<string, number>();
  private closed = false;

  constructor(
    private readonly nc: NatsConnection,
    serverDrops: boolean,
  ) {
    this.silence = silenceLimit(nc);
    this.serverDrops = serverDrops;
  }

  identity(): Conn | undefined {
    return identity(this.nc);
  }

  /**
   * When a lease with grace g bound to c must be given up by c's clocks.
   * since, if later than c's last answered PING, dates c instead: the send
   * time of a renewal that may have bound the lease to c (lease.ts, claim;
   * lease/lameduck.go).
   */
  deadline(c: Conn, g: number, since = -Infinity): number {
    const last = Math.max(this.last.get(key(c)) ?? -Infinity, since);
    let d = last + this.silence;
    if (this.dropped(c)) d = Math.min(d, last + liveDeadline(g));
    return d;
  }

  /** Whether a lease bound to c is on the dropped clock. */
  dropped(c: Conn | undefined): boolean {
    if (c === undefined || this.serverDrops) return false;
    if (c !== undefined && this.stopping.has(c.server)) return false;
    return !sameConn(this.identity(), c);
  }

  /** Notes a manager's word that server stops with it (server_stopping). */
  serverStopping(server: string | undefined): void {
    if (server === undefined || server === "") return;
    remember(this.stopping, server);
  }

  /** Notes that c's server said it is in lame duck mode (lease/lameduck.go). */
  lameDuck(c: Conn): void {
    remember(this.lameDucks, key(c));
  }

  /** Whether c's server said it is in lame duck mode. */
  isLameDuck(c: Conn | undefined): boolean {
    return c !== undefined && this.lameDucks.has(key(c));
  }

  /** Registers a lease with grace g, starting the pings. */
  join(g: number): void {
    if (this.closed) return;
    const every = Math.min(Math.max(g / 8, 10), 250);
    this.users++;
    if (this.timer !== undefined && every >= this.interval) return;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.interval = every;
    this.timer = setInterval(() => {
      // A slow answer still counts (by its send time), up to when it could
      // no longer help a lease whose connection drops.
      void this.ping(6 * every);
    }, every);
  }

  /** Unregisters a lease; the pings stop with the last one. */
  leave(): void {
    if (this.users > 0) this.users--;
    if (this.users === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Stops the pings for good. */
  close(): void {
    this.closed = true;
    this.users = 0;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Sends a PING and, if the server answers within timeout on the same connection, records its send time. */
  async ping(timeout: number): Promise<void> {
    const c = this.identity();
    if (c === undefined) return;
    const sent = now();
    let t: NodeJS.Timeout | undefined;
    const answered = await Promise.race([
      this.nc.flush().then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => {
        t = setTimeout(() => r(false), timeout);
      }),
    ]);
    clearTimeout(t);
    if (!answered || !sameConn(this.identity(), c)) return;
    this.record(c, sent);
  }

  /** Notes that the server answered a PING (or took a request) sent on c at sent. */
  record(c: Conn, sent: number): void {
    const k = key(c);
    if (sent > (this.last.get(k) ?? -Infinity)) {
      this.last.delete(k);
      this.last.set(k, sent);
    }
    prune(this.last);
  }
}

/** Notes k in m with the time now, and prunes it. */
function remember(m: Map<string, number>, k: string): void {
  m.set(k, now());
  prune(m);
}

/** Drops the oldest entries of m beyond MAX_LIVE_CONNS. */
function prune(m: Map<string, number>): void {
  while (m.size > MAX_LIVE_CONNS) {
    let oldest: string | undefined;
    let at = Infinity;
    for (const [k, t] of m) {
      if (t < at) {
        oldest = k;
        at = t;
      }
    }
    if (oldest === undefined) return;
    m.delete(oldest);
  }
}
