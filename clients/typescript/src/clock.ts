/**
 * Clock tells the time and waits. The client waits only through its Clock,
 * so that tests cross the 30 s retry window without sleeping.
 */
export interface Clock {
  /** now returns the current time. */
  now(): Date;
  /**
   * sleep waits for ms milliseconds, or until signal aborts, when it
   * rejects with the signal's reason.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** systemClock is the wall clock. */
export const systemClock: Clock = {
  now: () => new Date(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      if (ms <= 0) {
        resolve();
        return;
      }
      const onAbort = () => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};
