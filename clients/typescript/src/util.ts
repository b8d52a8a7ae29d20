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

/** A timer that can be cancelled. */
export function sleep(ms: number): { promise: Promise<"timer">; cancel(): void } {
  let t: NodeJS.Timeout | undefined;
  const promise = new Promise<"timer">((r) => {
    t = setTimeout(() => r("timer"), Math.max(0, ms));
  });
  return { promise, cancel: () => clearTimeout(t) };
}

/**
 * Something a wait can listen to: subscribe with a callback, get back the
 * function that unsubscribes. A source may call back at once (it already
 * fired).
 */
export type Source<E> = (fire: (e: E) => void) => () => void;

/**
 * Waits for the first of sources, or ms (then resolves with onTimer).
 * Every listener and the timer are removed once it resolves, so a loop
 * that waits again and again leaves nothing behind (unlike Promise.race
 * over long-lived promises, which keeps a reaction per call).
 */
export function waitFirst<E>(sources: Source<E>[], ms: number, onTimer: E): Promise<E> {
  return new Promise<E>((resolve) => {
    let done = false;
    const offs: (() => void)[] = [];
    let t: NodeJS.Timeout | undefined;
    const fire = (e: E) => {
      if (done) return;
      done = true;
      if (t !== undefined) clearTimeout(t);
      for (const off of offs) off();
      resolve(e);
    };
    for (const src of sources) {
      const off = src(fire);
      if (done) {
        off();
        return;
      }
      offs.push(off);
    }
    if (ms !== Infinity) t = setTimeout(() => fire(onTimer), Math.max(0, ms));
  });
}

/** A one-way latch: once set, every listener present or future fires. */
export class Latch {
  private set_ = false;
  private readonly ls = new Set<() => void>();
  get isSet(): boolean {
    return this.set_;
  }
  set(): void {
    if (this.set_) return;
    this.set_ = true;
    for (const f of [...this.ls]) f();
    this.ls.clear();
  }
  source<E>(e: E): Source<E> {
    return (fire) => {
      if (this.set_) {
        fire(e);
        return () => {};
      }
      const f = () => fire(e);
      this.ls.add(f);
      return () => this.ls.delete(f);
    };
  }
}

/** Fires every listener present when emit is called. */
export class Notifier {
  private readonly ls = new Set<() => void>();
  emit(): void {
    for (const f of [...this.ls]) f();
  }
  source<E>(e: E): Source<E> {
    return (fire) => {
      const f = () => fire(e);
      this.ls.add(f);
      return () => this.ls.delete(f);
    };
  }
}

/** A source that fires when signal aborts (never without one). */
export function abortSource<E>(signal: AbortSignal | undefined, e: E): Source<E> {
  return (fire) => {
    if (signal === undefined) return () => {};
    if (signal.aborted) {
      fire(e);
      return () => {};
    }
    const f = () => fire(e);
    signal.addEventListener("abort", f, { once: true });
    return () => signal.removeEventListener("abort", f);
  };
}

/** A FIFO of messages for one reader; beyond max waiting items a message is dropped (a later poll repeats an answer). */
export class Queue<T> {
  private items: T[] = [];
  private readonly arrived = new Notifier();
  private readonly max: number;

  constructor(max = 4) {
    this.max = max;
  }

  push(v: T): void {
    if (this.items.length < this.max) this.items.push(v);
    this.arrived.emit();
  }

  /** The oldest item, if any. */
  take(): T | undefined {
    return this.items.shift();
  }

  /** A source that fires when an item is there. */
  source<E>(e: E): Source<E> {
    const arrived = this.arrived.source(e);
    return (fire) => {
      if (this.items.length > 0) {
        fire(e);
        return () => {};
      }
      return arrived(fire);
    };
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
