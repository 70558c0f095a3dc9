// The Node lock helper against a real gateway (ZKGATE_ADDR): mutex hand-over in fencing order, a
// semaphore, try-lock, ttl with automatic keep-alive, release by lease, and the watchdog on a
// frozen gateway (ZKGATE_PID). Runs after election.test.js, never beside it (both freeze the
// gateway): tests/node_client.rs passes --test-concurrency=1.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';

import { Client, LockLost, NotAcquired, Status } from '../index.js';
import { ADDR, NEEDS_ADDR, PID, STEP, aborted, electionName, sleep, within } from './helpers.js';

const gw = ADDR ? new Client(ADDR) : null;
after(() => gw?.close());

const opts = { skip: NEEDS_ADDR, timeout: 60000 };
const lockName = () => `${electionName()}-lock`;

test('a mutex is handed over in queue order with increasing fencing tokens', opts, async () => {
  const name = lockName();
  const a = gw.acquire(name, { owner: 'a' });
  const others = [];
  try {
    const tokenA = await a.waitAcquired({ timeoutMs: STEP });
    assert.equal(typeof tokenA, 'bigint');
    assert.ok(a.isHeld && a.silenceLimitMs > 0);
    const b = gw.acquire(name, { owner: 'b' });
    others.push(b);
    assert.equal(await b.waitQueued({ timeoutMs: STEP }), 1);
    const c = gw.acquire(name, { owner: 'c' });
    others.push(c);
    assert.equal(await c.waitQueued({ timeoutMs: STEP }), 2);
    await sleep(200);
    assert.ok(!b.acquired && !c.acquired, 'one holder at a time');
    assert.ok(await gw.validateLock(name, tokenA));

    await a.release();
    assert.equal(a.lostReason, 'released');
    assert.equal(a.endCode, Status.OK);
    const tokenB = await b.waitAcquired({ timeoutMs: STEP });
    assert.ok(tokenB > tokenA);
    assert.ok(!(await gw.validateLock(name, tokenA)), "a released: its token is stale");
    b.cancel(); // as if b's process died: stream loss is release
    const tokenC = await c.waitAcquired({ timeoutMs: STEP });
    assert.ok(tokenC > tokenB);
  } finally {
    for (const h of [a, ...others]) await h.close();
  }
  assert.deepEqual((await gw.holders(name)).holders, []);
});

test('a 2-permit semaphore admits two and queues the third', opts, async () => {
  const name = lockName();
  const held = [gw.acquire(name, { owner: 's0', permits: 2 }), gw.acquire(name, { owner: 's1', permits: 2 })];
  let third = null;
  try {
    for (const h of held) await h.waitAcquired({ timeoutMs: STEP });
    third = gw.acquire(name, { owner: 's2', permits: 2 });
    assert.equal(await third.waitQueued({ timeoutMs: STEP }), 2);
    await sleep(200);
    assert.ok(!third.acquired, 'only two permits');
    const h = await gw.holders(name);
    assert.deepEqual(h.holders.map((x) => x.owner).sort(), ['s0', 's1']);
    assert.equal(h.waiting, 1);
    await held[0].release();
    await third.waitAcquired({ timeoutMs: STEP });
  } finally {
    for (const x of [...held, third]) await x?.close();
  }
});

test('a try-lock on a held lock fails with NotAcquired and leaves no waiter', opts, async () => {
  const name = lockName();
  const holder = await gw.lock(name, { owner: 'holder', timeoutMs: STEP });
  try {
    await assert.rejects(gw.lock(name, { owner: 'trier', waitTimeoutMs: 0, timeoutMs: STEP }), (e) => e instanceof NotAcquired);
    const h = await gw.holders(name);
    assert.deepEqual(h.holders.map((x) => x.owner), ['holder']);
    assert.equal(h.waiting, 0);
    holder.check();
  } finally {
    await holder.close();
  }
  assert.throws(() => holder.check(), LockLost);
});

test('a ttl hold survives on the automatic keep-alive', opts, async () => {
  const name = lockName();
  const held = await gw.lock(name, { owner: 'ttl', ttlMs: 600, timeoutMs: STEP });
  try {
    await sleep(2000); // more than three ttls: only the helper's keep_alive keeps it
    held.check();
    assert.deepEqual((await gw.holders(name)).holders.map((x) => x.owner), ['ttl']);
  } finally {
    await held.close();
  }
});

test('release by lease from elsewhere ends the hold and calls onLost', opts, async () => {
  const name = lockName();
  const lost = [];
  const held = await gw.lock(name, { owner: 'a', timeoutMs: STEP, onLost: (r) => lost.push(r) });
  try {
    await gw.releaseLock(held.lease);
    await within(STEP, held.waitDone(), 'the stream to end');
    assert.equal(held.endCode, Status.OK);
    assert.deepEqual(lost, ['released']);
    assert.ok(held.signal.aborted && held.signal.reason instanceof LockLost);
  } finally {
    await held.close();
  }
});

test(
  'the watchdog declares the lock lost when the gateway freezes',
  { skip: NEEDS_ADDR || (PID ? false : 'needs ZKGATE_PID: the gateway process to freeze'), timeout: 60000 },
  async (t) => {
    const name = lockName();
    const lost = [];
    const held = await gw.lock(name, { owner: 'a', timeoutMs: STEP, onLost: (r) => lost.push(r) });
    const limit = held.silenceLimitMs;
    let waited;
    try {
      process.kill(PID, 'SIGSTOP');
      try {
        const started = performance.now();
        await aborted(held.signal, limit * 3);
        waited = performance.now() - started;
      } finally {
        process.kill(PID, 'SIGCONT');
      }
      t.diagnostic(`loss declared ${waited.toFixed(0)} ms after SIGSTOP (silence limit ${limit} ms)`);
      assert.ok(!held.isHeld);
      assert.match(held.lostReason, /silence limit/);
      assert.deepEqual(lost, [held.lostReason]);
      assert.ok(waited >= limit / 3 && waited <= limit + 2000, `waited ${waited} ms, limit ${limit} ms`);
      await within(STEP, held.waitDone(), 'the stream to end after the watchdog');
      assert.equal(held.endCode, Status.CANCELLED);
    } finally {
      await held.close();
    }
    // Given up: once the gateway runs again, another request gets the lock (retry UNAVAILABLE
    // while the thawed gateway gets its ZooKeeper session back).
    const deadline = performance.now() + STEP;
    for (;;) {
      const next = gw.acquire(name, { owner: 'b' });
      try {
        await next.waitAcquired({ timeoutMs: STEP });
        break;
      } catch (e) {
        if (next.endCode !== Status.UNAVAILABLE || performance.now() > deadline) throw e;
        await sleep(200);
      } finally {
        await next.close();
      }
    }
  },
);
