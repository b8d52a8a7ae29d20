// Type-checked, never run: what a TypeScript program writes against the
// package's declarations (npm run typecheck), the README's example first.
import { connect, Client, LeaseError, LeaseLostError, QueueFullError, type Lease, type LeaseEvent, type PoolStats } from "../dist/esm/index.js";

export async function readmeExample(): Promise<void> {
  const client = await connect();
  await client.withLease("gpu", { slots: 1 }, async (lease) => {
    await doWork(lease.token, lease.signal);
  });
  await client.close();
}

declare function doWork(token: number, signal: AbortSignal): Promise<void>;

export async function everything(nc: Client["nc"]): Promise<void> {
  const client = new Client(nc, { node: "n1", prefix: "lease" });
  const lease: Lease = await client.acquire("gpu", { slots: 2, node: "n1", wait: 1000, priority: 1, tenant: "t", requestId: "r-1" });
  const token: number = lease.token;
  const node: string = lease.node;
  const at: Date = lease.expiresAt;
  const reason: LeaseLostError | null = await lease.done;
  void [token, node, at, reason?.cause];
  await lease.release();
  const set = await client.acquireAll([{ pool: "gpu", slots: 1 }, { pool: "api" }], { wait: 5000 });
  for (const l of set.leases) void l.id;
  await set.release();
  const pools: PoolStats[] = await client.stats();
  const one: PoolStats = await client.stats("gpu");
  void [pools, one];
  for await (const ev of client.events({ node: "n1", pool: "gpu" })) {
    const e: LeaseEvent = ev;
    void e.kind;
  }
  try {
    await client.acquire("gpu", { noWait: true });
  } catch (err) {
    if (err instanceof QueueFullError) void err.retryAfterMs;
    if (err instanceof LeaseError) void [err.code, err.retryAfterMs];
  }
}
