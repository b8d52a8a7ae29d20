// The wire protocol's shapes and names (docs/protocol.md), as the Go
// package lease defines them (lease/protocol.go, manager/records.go).

/** The subject prefix when none is configured (LEASE_SUBJECT_PREFIX's default). */
export const DEFAULT_PREFIX = "lease";
/** The node id of the cluster pools (CLUSTER_POOLS). */
export const CLUSTER_NODE = "cluster";
/** Most pools one acquireAll takes (Go: lease.MaxSetPools). */
export const MAX_SET_POOLS = 8;

export const MAX_REQUEST_ID_LEN = 128;
export const MAX_HOLDER_LEN = 256;
export const MAX_SECRET_LEN = 128;
export const MAX_TENANT_LEN = 128;
/** A concurrency group's bound (Go: lease.MaxGroupLen). */
export const MAX_GROUP_LEN = 128;
/** wait_ms's bound: 30 days. */
export const MAX_WAIT_MS = 30 * 24 * 60 * 60 * 1000;
/** poll_ms's bound: 24 hours. */
export const MAX_POLL_MS = 24 * 60 * 60 * 1000;
/** Bound of an estimate and an actual of units (2^40; Go: lease.MaxUnits). */
export const MAX_UNITS = 2 ** 40;
const MAX_TOKEN_LEN = 64;

/** The lease record (docs/protocol.md, section 3), as granted and renewed. */
export interface LeaseRecord {
  id: string;
  node: string;
  pool: string;
  slots: number;
  holder: string;
  /** The fencing token: only grows, per pool and across restarts. */
  token: number;
  ttl_ms: number;
  granted_at: string;
  /** The manager's estimate; holders must not use it (use Lease.expiresAt). */
  expires_at: string;
  term?: number;
  manager?: string;
  secret?: string;
  tenant?: string;
  /** The acquire's fairness key, if it gave one. */
  key?: string;
  priority?: number;
  /** The acquire's estimate, reserved from a budget pool while the lease lives. */
  units?: number;
  conn_server?: string;
  conn_id?: number;
  disconnect_grace_ms?: number;
  /** The acquire's concurrency group, and a digest of the credential that acquired it. */
  group?: string;
  group_owner?: string;
}

/** A renewal's word that a newer request of the lease's group asked its holder to stop. */
export interface StopNotice {
  code: string;
  group: string;
  /** The request id of the newer request. */
  by: string;
  message: string;
}

/** One tenant's figures in a pool (stats `tenants`). */
export interface TenantStats {
  tenant: string;
  weight?: number;
  in_use: number;
  queued: number;
  queued_slots: number;
}

/** A pool's figures (docs/protocol.md, section 2.5). */
export interface PoolStats {
  name: string;
  capacity: number;
  in_use: number;
  available: number;
  queued: number;
  queued_slots: number;
  policy?: string;
  max_queue?: number;
  /** "drop_oldest" when a full queue drops its oldest waiter; absent: refuse. */
  on_full?: string;
  /** true for a pool without a queue (POOL_MAX_QUEUE=<pool>=0). */
  fail_fast?: boolean;
  tenant_cap?: number;
  /** A fair pool's POOL_KEY_LIMITS: most slots in flight per fairness key. */
  key_cap?: number;
  tenants?: TenantStats[];
  rate?: string;
  burst?: number;
  tokens?: number;
  /** A usage budget (POOL_BUDGETS), e.g. "100000/m", and its figures (docs/protocol.md, section 7.2). */
  budget?: string;
  budget_limit?: number;
  budget_window_ms?: number;
  /** Units settled in the window now. */
  budget_used?: number;
  /** The estimates of the leases held now. */
  budget_reserved?: number;
  /** true for a pool in shadow mode (POOL_SHADOW): its limits are counted,
   * not enforced, and in_use may exceed capacity (docs/protocol.md, 7.2). */
  shadow?: boolean;
  weights?: Record<string, number>;
  default_weight?: number;
  /** A fair pool's scheduler (docs/protocol.md, section 2.5). */
  scheduler?: SchedulerStats;
  /** How the pool's requests and leases ended, carried across restarts
   * (docs/protocol.md, section 2.5); absent from older managers. */
  counts?: PoolCounts;
  /** What the pool's limits would have done with the requests it granted
   * in shadow mode, by reason then action, e.g. {capacity: {queued: 2}}. */
  shadow_counts?: Record<string, Record<string, number>>;
}

/** What a fair pool's deficit round robin holds now. */
export interface SchedulerStats {
  strategy: string;
  quantum: number;
  starvation_age_ms?: number;
  selected: number;
  deferred: number;
  starvation_promotions: number;
  keys: KeyStats[];
  more_keys?: number;
}

/** One share of a fair pool: a tenant's requests with one fairness key ("" without one). */
export interface KeyStats {
  tenant: string;
  key: string;
  weight: number;
  deficit: number;
  in_use: number;
  queued: number;
  queued_slots: number;
  ready: number;
  capped?: boolean;
  oldest_ready_age_ms?: number;
  selected: number;
  deferred: number;
}

/** A pool's counts (stats `counts`): each event counted in one field. */
export interface PoolCounts {
  granted: number;
  completed: number;
  failed: number;
  rejected: number;
  dropped: number;
  cancelled: number;
}

/** A renewal (docs/protocol.md, section 2.2; Go: lease.RenewRequest). */
export interface RenewRequest {
  lease_id: string;
  token: number;
  secret?: string;
  /** The connection the renewal goes on: a lease with fast release moves to it. */
  conn_server?: string;
  conn_id?: number;
  /**
   * The server of conn_server/conn_id said it is in lame duck mode and will
   * close the connection itself: a lease bound to that connection is
   * unbound from it (a close of it frees nothing), and stays so until a
   * renewal on another connection binds it there (lease.ts;
   * lease/lameduck.go).
   */
  lame_duck?: boolean;
}

/** The one reply shape (docs/protocol.md, section 2.7). */
export interface Reply {
  status: string;
  lease?: LeaseRecord;
  position?: number;
  node?: string;
  pools?: PoolStats[];
  error?: { code: string; message: string; retry_after_ms?: number };
  existing?: boolean;
  served_by?: string;
  warnings?: string[];
  server_stopping?: string;
  stop?: StopNotice;
}

/** The kinds of lease events (docs/protocol.md, section 6). */
export type EventKind =
  | "requested"
  | "queued"
  | "granted"
  | "released"
  | "expired"
  | "cancelled"
  | "rejected"
  | "resized"
  | "stopping"
  | "stop_requested"
  | "superseded";

/** A lease event (docs/protocol.md, section 6); never carries a secret. */
export interface LeaseEvent {
  kind: EventKind;
  time: string;
  node: string;
  pool: string;
  request_id?: string;
  lease_id?: string;
  holder?: string;
  slots?: number;
  tenant?: string;
  /** The request's or lease's fairness key, when it has one. */
  key?: string;
  /** The concurrency group of a stop_requested or superseded event (and of others, when the request has one). */
  group?: string;
  token?: number;
  position?: number;
  wait_ms?: number;
  /** granted: the estimate the grant reserved from its pool's budget. */
  units?: number;
  /** released, expired, cancelled of a budget pool's lease: the units settled. */
  settled?: number;
  code?: string;
  message?: string;
  /** On a shadow pool's "granted": the limit that would have held the
   * request back, and what the pool would have done (docs/protocol.md, 7.2). */
  shadow?: string;
  shadow_action?: string;
  stats: Omit<PoolStats, "name" | "tenants">;
}

/** A runtime change of a node's pools (docs/protocol.md, section 8). */
export interface ResizeRequest {
  set?: Record<string, number>;
  rates?: Record<string, { rate?: string; burst?: number }>;
  remove?: string[];
  reset?: boolean;
  force?: boolean;
}

export function subject(prefix: string, node: string, pool: string, verb: "acquire" | "renew" | "release" | "cancel"): string {
  return `${prefix}.${node}.${pool}.${verb}`;
}

export function statsSubject(prefix: string, node: string): string {
  return `${prefix}.${node}.stats`;
}

export function resizeSubject(prefix: string, node: string): string {
  return `${prefix}.${node}.resize`;
}

/** The subscription subject for events, "*" for any node, pool or kind left out. */
export function eventFilter(prefix: string, node?: string, pool?: string, kind?: string): string {
  const star = (s?: string) => (s === undefined || s === "" ? "*" : s);
  return `${prefix}.events.${star(node)}.${star(pool)}.${star(kind)}`;
}

/** A node, pool or prefix token: 1 to 64 of [A-Za-z0-9_-]. Returns the problem, or undefined. */
export function tokenProblem(s: string): string | undefined {
  if (s === "") return "must not be empty";
  if (s.length > MAX_TOKEN_LEN) return `must be at most ${MAX_TOKEN_LEN} characters, got ${s.length}`;
  if (!/^[A-Za-z0-9_-]+$/.test(s)) return "must contain only letters, digits, '-' and '_'";
  return undefined;
}

/** A subject prefix: dot-separated tokens. */
export function prefixProblem(p: string): string | undefined {
  const toks = p.split(".");
  for (let i = 0; i < toks.length; i++) {
    const problem = tokenProblem(toks[i]!);
    if (problem !== undefined) return `token ${i + 1} ${JSON.stringify(toks[i])}: ${problem}`;
  }
  return undefined;
}

/** A request id: 1 to 128 of [A-Za-z0-9_=-] (it becomes a KV key token). */
export function requestIdProblem(s: string): string | undefined {
  if (s === "") return "request_id is required";
  if (s.length > MAX_REQUEST_ID_LEN) return `request_id is longer than ${MAX_REQUEST_ID_LEN} characters`;
  if (!/^[A-Za-z0-9_=-]+$/.test(s)) return `request_id ${JSON.stringify(s)}: must contain only letters, digits, '-', '_' and '='`;
  return undefined;
}

/** Go's config.SanitizeNodeID: the default NODE_ID from a host name. */
export function sanitizeNodeId(hostname: string): string {
  let s = "";
  for (const ch of hostname) {
    s += ch.length === 1 && /[A-Za-z0-9_-]/.test(ch) ? ch : "-";
  }
  if (s.length > MAX_TOKEN_LEN) s = s.slice(0, MAX_TOKEN_LEN);
  return s === "" ? "node" : s;
}
