// A read of server state that many triggers (stream events, a poll, an
// answer) ask for: one runs at a time, and asks made while it runs fold into
// one more read after it.

export interface Coalesced {
  /** From now on `read()` runs `readOnce`; a read started before a later
   * `start` or `stop` sees `isLive()` false and must not apply what it got. */
  start(readOnce: (isLive: () => boolean) => Promise<void>, onError: (error: unknown) => void): void;
  /** Reads now, or once more after the read in progress. */
  read(): void;
  stop(): void;
}

export function coalesced(): Coalesced {
  let generation = 0;
  let current: { readOnce: (isLive: () => boolean) => Promise<void>; onError: (error: unknown) => void } | null =
    null;
  let running = false;
  let again = false;

  async function loop(): Promise<void> {
    running = true;
    try {
      do {
        again = false;
        const mine = generation;
        const job = current;
        if (!job) return;
        const isLive = () => mine === generation;
        try {
          await job.readOnce(isLive);
        } catch (error) {
          if (isLive()) job.onError(error);
        }
      } while (again && current);
    } finally {
      running = false;
    }
  }

  return {
    start(readOnce, onError) {
      generation++;
      current = { readOnce, onError };
      if (running) again = true;
      else void loop();
    },
    read() {
      if (!current) return;
      if (running) again = true;
      else void loop();
    },
    stop() {
      generation++;
      current = null;
    },
  };
}
