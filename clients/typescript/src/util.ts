// Small helpers: a monotonic clock, timers that are always cleared, and a
// queue of messages one waiter reads.

import { performance } from "node:perf_hooks";

/** Monotonic milliseconds: every deadline is measured on this clock. */
export function now(): number {
  return performance.now();
}

/** A monotonic time as a wall-clock Date. */
export function toDate(mono: number): Date {
  return new Date(Date.now() + (mono - now()));
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(v: T): void;
  settled(): boolean;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let done = false;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return {
    promise,
    resolve(v: T) {
      if (!done) {
        done = true;
        resolve(v);
      }
    },
    settled: () => done,
  };
}

/**
 * Waits for the first of several sources. Each call of wait() arms a timer
 * for the earliest of the given delays and clears it when it returns, so no
 * timer outlives the wait.
 */
export function sleep(ms: number): { promise: Promise<"timer">; cancel(): void } {
  let t: NodeJS.Timeout | undefined;
  const promise = new Promise<"timer">((r) => {
    t = setTimeout(() => r("timer"), Math.max(0, ms));
  });
  return { promise, cancel: () => clearTimeout(t) };
}

/** Races promises with a timer; the timer is cleared whatever wins. */
export async function raceTimer<T>(ps: Promise<T>[], ms: number): Promise<T | "timer"> {
  const s = sleep(ms);
  try {
    return await Promise.race([...ps, s.promise]);
  } finally {
    s.cancel();
  }
}

/** An unbounded FIFO of items read by one waiter at a time, bounded by the caller's backlog rule. */
export class Queue<T> {
  private items: T[] = [];
  private waiter: ((v: T) => void) | undefined;
  private readonly max: number;

  constructor(max = 4) {
    this.max = max;
  }

  /** Adds v; beyond max waiting items it is dropped (a later poll repeats an answer). */
  push(v: T): void {
    if (this.waiter !== undefined) {
      const w = this.waiter;
      this.waiter = undefined;
      w(v);
      return;
    }
    if (this.items.length < this.max) this.items.push(v);
  }

  /** The next item, when there is one. */
  next(): Promise<T> {
    const v = this.items.shift();
    if (v !== undefined) return Promise.resolve(v);
    return new Promise<T>((r) => {
      this.waiter = r;
    });
  }
}

/** The signal's reason as an Error. */
export function abortReason(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r;
  const e = new Error(r === undefined ? "aborted" : String(r));
  e.name = "AbortError";
  return e;
}

/** A promise that resolves when signal aborts (never, without one), and a function to drop the listener. */
export function onAbort(signal: AbortSignal | undefined): { promise: Promise<"aborted">; off(): void } {
  if (signal === undefined) return { promise: new Promise(() => {}), off: () => {} };
  if (signal.aborted) return { promise: Promise.resolve("aborted"), off: () => {} };
  let listener: () => void = () => {};
  const promise = new Promise<"aborted">((r) => {
    listener = () => r("aborted");
    signal.addEventListener("abort", listener, { once: true });
  });
  return { promise, off: () => signal.removeEventListener("abort", listener) };
}
