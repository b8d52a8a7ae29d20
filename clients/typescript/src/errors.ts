// Errors: one class per wire error code (docs/protocol.md, section 4), all
// subclasses of LeaseError, so callers can branch with instanceof or on
// .code, as Go callers do with errors.Is(err, lease.ErrQueueFull).

/** The wire error codes a lease manager sends (docs/protocol.md, section 4). */
export type ErrorCode =
  | "bad_request"
  | "unknown_pool"
  | "invalid_slots"
  | "exceeds_capacity"
  | "wait_expired"
  | "queue_full"
  | "would_wait"
  | "dropped"
  | "cancelled"
  | "superseded"
  | "holder_disconnected"
  | "lease_not_found"
  | "token_mismatch"
  | "conflict"
  | "too_many_attempts"
  | "pool_busy"
  | "unavailable"
  | "internal";

/** A refusal by the lease manager (or by this client, for a request it would refuse), with its wire code. */
export class LeaseError extends Error {
  readonly code: ErrorCode;
  /**
   * A hint of when to try again, in milliseconds: on queue_full, on
   * would_wait from a pool with a start rate (the earliest the rate lets the
   * request in), and on too_many_attempts (when the connection's window of
   * wrong secrets ends). Undefined otherwise.
   */
  readonly retryAfterMs: number | undefined;

  constructor(code: ErrorCode, message: string, retryAfterMs?: number, options?: { cause?: unknown }) {
    super(message === "" ? `lease: ${code}` : `lease: ${code}: ${message}`, options);
    this.name = new.target.name;
    this.code = code;
    this.retryAfterMs = retryAfterMs !== undefined && retryAfterMs > 0 ? retryAfterMs : undefined;
  }

  /**
   * The error a reply's `error` object stands for, as the subclass of its
   * code; an unknown or missing code is an InternalError.
   */
  static from(e: { code?: string; message?: string; retry_after_ms?: number } | undefined): LeaseError {
    const code = e?.code ?? "";
    const ctor = byCode[code as ErrorCode];
    if (ctor === undefined) {
      return new InternalError(`reply with unknown error code ${JSON.stringify(code)}: ${e?.message ?? ""}`);
    }
    return new ctor(e?.message ?? "", e?.retry_after_ms);
  }
}

/** The constructor of a LeaseError subclass. */
export type Ctor = new (message: string, retryAfterMs?: number, options?: { cause?: unknown }) => LeaseError;

function sub(code: ErrorCode): Ctor {
  return class extends LeaseError {
    constructor(message: string, retryAfterMs?: number, options?: { cause?: unknown }) {
      super(code, message, retryAfterMs, options);
    }
  };
}

/** Malformed request: fix it, do not retry it unchanged. */
export class BadRequestError extends sub("bad_request") {}
/** The node has no such pool; on a renewal, the lease is lost. */
export class UnknownPoolError extends sub("unknown_pool") {}
/** slots < 1. */
export class InvalidSlotsError extends sub("invalid_slots") {}
/** More slots than the pool could ever grant at once (capacity, tenant cap or burst). */
export class ExceedsCapacityError extends sub("exceeds_capacity") {}
/** The request's wait ran out while it was queued. */
export class WaitExpiredError extends sub("wait_expired") {}
/** The queue is at its limit: retry after retryAfterMs. */
export class QueueFullError extends sub("queue_full") {}
/** A noWait acquire that could not be granted at once (retryAfterMs from a rated pool). */
export class WouldWaitError extends sub("would_wait") {}
/** The request waited in a full drop_oldest queue, and a newer request took its place. */
export class DroppedError extends sub("dropped") {}
/** A cancel (from elsewhere, with this request's holder and secret) withdrew the queued request. */
export class CancelledError extends sub("cancelled") {}
/**
 * A newer request of the request's concurrency group (the group option)
 * replaced it while it waited; on a renewal, the lease was asked to stop
 * long ago and was not released: it is lost.
 */
export class SupersededError extends sub("superseded") {}
/** Fast release: the requester's connection closed while the request was queued. */
export class HolderDisconnectedError extends sub("holder_disconnected") {}
/** No live lease with that id: on a renewal, the lease is lost. */
export class LeaseNotFoundError extends sub("lease_not_found") {}
/** The lease has another token or secret: it is not (or no longer) yours. */
export class TokenMismatchError extends sub("token_mismatch") {}
/** The request id belongs to another holder, secret or slot count. */
export class ConflictError extends sub("conflict") {}
/**
 * This connection presented too many wrong secrets lately (16 within a
 * minute): requests naming a lease or request are refused unchecked until
 * retryAfterMs. A renewal refused so is retried until the deadline.
 */
export class TooManyAttemptsError extends sub("too_many_attempts") {}
/** A resize would remove a pool that has holders or waiters. */
export class PoolBusyError extends sub("pool_busy") {}
/** The manager could not answer now (failing over, storing failed, none serving): retry. */
export class UnavailableError extends sub("unavailable") {}
/** A bug in the manager or a malformed reply: report it. */
export class InternalError extends sub("internal") {}

const byCode: Record<ErrorCode, Ctor> = {
  bad_request: BadRequestError,
  unknown_pool: UnknownPoolError,
  invalid_slots: InvalidSlotsError,
  exceeds_capacity: ExceedsCapacityError,
  wait_expired: WaitExpiredError,
  queue_full: QueueFullError,
  would_wait: WouldWaitError,
  dropped: DroppedError,
  cancelled: CancelledError,
  superseded: SupersededError,
  holder_disconnected: HolderDisconnectedError,
  lease_not_found: LeaseNotFoundError,
  token_mismatch: TokenMismatchError,
  conflict: ConflictError,
  too_many_attempts: TooManyAttemptsError,
  pool_busy: PoolBusyError,
  unavailable: UnavailableError,
  internal: InternalError,
};

/** Every wire error code, in the order of docs/protocol.md, section 4. */
export const errorCodes: readonly ErrorCode[] = Object.keys(byCode) as ErrorCode[];

/**
 * The reason a lease ended without its holder releasing it: what
 * `lease.done` resolves with. Its cause says why: a LeaseNotFoundError,
 * TokenMismatchError or UnknownPoolError from a renewal, a
 * ConnectionDroppedError or ConnectionSilentError (fast release), or a
 * DeadlinePassedError (no renewal succeeded in time).
 */
export class LeaseLostError extends Error {
  readonly code = "lease_lost";
  readonly leaseId: string;
  constructor(leaseId: string, cause: Error) {
    super(`lease ${leaseId} lost: ${cause.message}`, { cause });
    this.name = "LeaseLostError";
    this.leaseId = leaseId;
  }
}

/** The lease's connection dropped and the lease could not move to a new one in time (fast release). */
export class ConnectionDroppedError extends Error {
  constructor(message: string) {
    super(`the lease's connection dropped and the lease could not move to a new one in time (fast release): ${message}`);
    this.name = "ConnectionDroppedError";
  }
}

/** The server answered nothing on the lease's connection for far longer than a restart or a stall lasts (fast release). */
export class ConnectionSilentError extends Error {
  constructor(message: string) {
    super(`the server did not answer on the lease's connection (fast release): ${message}`);
    this.name = "ConnectionSilentError";
  }
}

/** No renewal succeeded before the holder's deadline (the manager unreachable, or failing, for most of a TTL). */
export class DeadlinePassedError extends Error {
  constructor(message = "no renewal succeeded before the deadline") {
    super(message);
    this.name = "DeadlinePassedError";
  }
}

/** The client was closed while the lease was held (the lease was released first). */
export class ClientClosedError extends Error {
  constructor(message = "the client was closed") {
    super(message);
    this.name = "ClientClosedError";
  }
}
