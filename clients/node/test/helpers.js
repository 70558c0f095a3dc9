// Shared by the *.test.js files (not a test file itself: `npm test` runs test/*.test.js).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

/** The gateway under test (tests/node_client.rs starts `zkgate dev` and sets it; by hand:
 *  scripts/dev.sh, then ZKGATE_ADDR=127.0.0.1:50051). */
export const ADDR = process.env.ZKGATE_ADDR || '';
/** The gateway's pid, for the frozen-gateway test (SIGSTOP/SIGCONT). */
export const PID = process.env.ZKGATE_PID ? Number(process.env.ZKGATE_PID) : 0;
export const NEEDS_ADDR = ADDR ? false : 'set ZKGATE_ADDR to a running gateway (e.g. scripts/dev.sh)';

/** Upper bound for one step of a test, in ms. */
export const STEP = 10000;

export function electionName() {
  return `js-${randomBytes(6).toString('hex')}`;
}

/** Resolves when `signal` is aborted, rejects after `ms`. */
export function aborted(signal, ms) {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`signal not aborted within ${ms} ms`)), ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** Rejects if `promise` does not settle within `ms`. */
export function within(ms, promise, what = 'operation') {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

export { sleep };
