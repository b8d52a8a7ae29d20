// @slotlease/client: slot leases from slotlease's lease managers over NATS,
// with the Go client's safety rules (docs/protocol.md, docs/guarantees.md).

export { Client } from "./client.js";
export type { AcquireAllOptions, AcquireOptions, ClientOptions, EventsOptions, Queued, Role, Want } from "./client.js";
export { connect, resolveConfig, authDirUnder, userConfigDir, roleInboxPrefix, checkPrivate } from "./connect.js";
export type { ConnectOptions, ResolvedConfig } from "./connect.js";
export { Lease, LeaseSet } from "./lease.js";
export * from "./errors.js";
export { CLUSTER_NODE, DEFAULT_PREFIX, MAX_SET_POOLS, eventFilter, sanitizeNodeId } from "./protocol.js";
export type { EventKind, KeyStats, LeaseEvent, LeaseRecord, PoolCounts, PoolStats, Reply, ResizeRequest, SchedulerStats, StopNotice, TenantStats } from "./protocol.js";
