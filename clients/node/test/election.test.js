// The Node helper against a real gateway (ZKGATE_ADDR): ordering, failover on cancel, in-stream
// resign, proclaim, a refused join, Leader and Observe, the event iterator, and the watchdog on a
// frozen gateway (ZKGATE_PID). The tests in this file run one after another: the frozen-gateway
// test stops the gateway every other test uses.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';

import { Client, LeadershipLost, Status } from '../index.js';
import { ADDR, NEEDS_ADDR, PID, STEP, aborted, electionName, sleep, within } from './helpers.js';

const gw = ADDR ? new Client(ADDR) : null;
after(() => gw?.close());

const opts = { skip: NEEDS_ADDR, timeout: 60000 };

test('first candidate is elected, second queued; cancelling the first elects the second', opts, async () => {
  const election = electionName();
  const lost = [];
  const a = gw.campaign(election, 'a', 'va', { onLost: (r) => lost.push(r) });
  let b = null;
  try {
    assert.equal(await a.waitQueued({ timeoutMs: STEP }), 0);
    const leaderA = await a.waitElected({ timeoutMs: STEP });
    assert.equal(leaderA.candidate, 'a');
    assert.equal(leaderA.value.toString(), 'va');
    assert.equal(typeof leaderA.fencingToken, 'bigint');
    assert.ok(a.isLeader && a.silenceLimitMs > 0, `silence limit ${a.silenceLimitMs}`);
    assert.ok(a.lease && !a.signal.aborted);

    b = gw.campaign(election, 'b', Buffer.from('vb'));
    assert.equal(await b.waitQueued({ timeoutMs: STEP }), 1);
    await sleep(200);
    assert.ok(!b.elected, 'only the head of the queue is elected');
    assert.equal((await gw.leader(election)).candidate, 'a');

    a.cancel(); // as if the process died: stream loss is release
    const leaderB = await b.waitElected({ timeoutMs: STEP });
    assert.equal(leaderB.candidate, 'b');
    assert.ok(leaderB.fencingToken > leaderA.fencingToken, `${leaderB.fencingToken} > ${leaderA.fencingToken}`);
    await within(STEP, a.waitDone(), 'the cancelled stream to end');
    assert.ok(a.lost && a.signal.aborted && !a.isLeader);
    assert.equal(a.endCode, Status.CANCELLED);
    assert.deepEqual(lost, [], 'onLost is not called for our own cancel');
    assert.throws(() => a.check(), LeadershipLost);
  } finally {
    await a.close();
    await b?.close();
  }
  assert.equal(await gw.leader(election), null);
});

test('resign in-stream ends the stream OK and the next candidate is elected', opts, async () => {
  const election = electionName();
  const a = gw.campaign(election, 'a');
  let b = null;
  try {
    const leaderA = await a.waitElected({ timeoutMs: STEP });
    b = gw.campaign(election, 'b'); // only now: two joins in flight may be queued in either order
    assert.equal(await b.waitQueued({ timeoutMs: STEP }), 1);
    await within(STEP, a.resign(), 'resign');
    assert.ok(a.done && a.lost && a.signal.aborted);
    assert.equal(a.lostReason, 'resigned');
    assert.equal(a.endCode, Status.OK);
    assert.ok(a.signal.reason instanceof LeadershipLost);
    const leaderB = await b.waitElected({ timeoutMs: STEP });
    assert.equal(leaderB.candidate, 'b');
    assert.ok(leaderB.fencingToken > leaderA.fencingToken);
    assert.ok(b.isLeader && b.silenceLimitMs > 0);
  } finally {
    await a.close();
    await b?.close();
  }
  assert.equal(b.endCode, Status.OK, 'close() resigns');
  assert.equal(await gw.leader(election), null);
});

test('elect() and proclaim(): the new value reaches Leader and the stream', opts, async () => {
  const election = electionName();
  const lead = await gw.elect(election, 'solo', 'v1', { timeoutMs: STEP });
  try {
    lead.check();
    assert.ok(lead.fencingToken > 0n);
    const proclaimed = new Promise((resolve) => lead.once('proclaimed', resolve));
    const updated = await lead.proclaim('v2');
    assert.equal(updated.value.toString(), 'v2');
    assert.equal(updated.fencingToken, lead.fencingToken);
    assert.equal((await gw.leader(election)).value.toString(), 'v2');
    const ev = await within(STEP, proclaimed, 'the proclaimed event');
    assert.equal(ev.leader.value.toString(), 'v2');
    assert.equal(lead.leader.value.toString(), 'v2');
    const valid = await gw.validate(election, lead.fencingToken);
    assert.ok(valid.current);
    assert.equal((await gw.validate(election, lead.fencingToken - 1n)).current, false);
  } finally {
    await lead.close();
  }
  assert.ok(lead.lost);
  assert.throws(() => lead.check(), LeadershipLost);
  assert.equal(await gw.leader(election), null);
});

test('proclaim by a waiting candidate is refused and keeps the campaign', opts, async () => {
  const election = electionName();
  const a = await gw.elect(election, 'a', '', { timeoutMs: STEP });
  const b = gw.campaign(election, 'b');
  try {
    await b.waitQueued({ timeoutMs: STEP });
    await assert.rejects(b.proclaim('nope'), (e) => e.code === Status.FAILED_PRECONDITION);
    assert.ok(!b.lost);
  } finally {
    await a.close();
    await b.close();
  }
});

test('a refused join ends the campaign', opts, async () => {
  const c = gw.campaign('bad name!', 'x');
  await assert.rejects(c.waitElected({ timeoutMs: STEP }), (e) => e instanceof LeadershipLost && /election/.test(e.reason));
  assert.equal(c.endCode, Status.INVALID_ARGUMENT);
  await c.close();
});

test('Leader and Observe show the current leader, vacancies included', opts, async () => {
  const election = electionName();
  // Asked before anyone campaigns: asked after, `a` may already have won (a race this test lost).
  assert.equal(await gw.leader(election), null, 'NOT_FOUND reads as null');
  const seen = gw.observe(election);
  const a = gw.campaign(election, 'a', 'va');
  let b = null;
  const next = async () => {
    const r = await within(STEP, seen.next(), 'an Observe message');
    assert.ok(!r.done, 'Observe ended early');
    return r.value;
  };
  try {
    // The first message is the state when Observe started: vacant, unless `a` already won.
    let first = await next();
    await a.waitElected({ timeoutMs: STEP });
    if (first === null) first = await next();
    assert.equal(first.candidate, 'a');
    assert.equal(first.value.toString(), 'va');
    const viaLeader = await gw.leader(election);
    assert.equal(viaLeader.candidate, 'a');
    assert.equal(viaLeader.fencingToken, a.fencingToken);
    assert.ok(viaLeader.since instanceof Date && viaLeader.since.getTime() > 0);

    b = gw.campaign(election, 'b', 'vb');
    assert.equal(await b.waitQueued({ timeoutMs: STEP }), 1);
    await a.resign();
    await b.waitElected({ timeoutMs: STEP });
    let nxt = await next();
    if (nxt === null) nxt = await next(); // the vacancy between two leaders may be reported
    assert.equal(nxt.candidate, 'b');
    assert.ok(nxt.fencingToken > first.fencingToken);
    assert.equal((await gw.leader(election)).candidate, 'b');

    await b.resign();
    assert.equal(await next(), null, 'a vacancy is reported');
  } finally {
    await a.close();
    await b?.close();
    await seen.return();
  }
  assert.deepEqual(await seen.next(), { value: undefined, done: true });
});

test('unread observers cost the leadership on their client nothing, and read late give the newest', opts, async () => {
  // Each observer's 'data' events keep flowing whether or not it is read, and a waiting state
  // is replaced by a newer one (states, not a log): 200 unread observers and 120 proclaims are
  // ≈ 24,000 messages, of which each observer keeps one. (The Rust client's h2 ended its whole
  // connection once ≈ 13,000 small messages waited unread: clients/CONFORMANCE.md.)
  const election = electionName();
  const a = gw.campaign(election, 'a', 'v');
  const observers = [];
  try {
    await a.waitElected({ timeoutMs: STEP });
    for (let i = 0; i < 200; i++) {
      const seen = gw.observe(election);
      const r = await within(STEP, seen.next(), 'the first Observe message');
      assert.equal(r.value.candidate, 'a');
      observers.push(seen);
    }
    for (let i = 0; i < 120; i++) await a.proclaim(`v${i}`, { timeoutMs: STEP });
    assert.ok(a.isLeader && !a.signal.aborted, 'the leadership survived');
    for (const seen of observers) {
      let before = 0;
      for (;;) {
        const r = await within(STEP, seen.next(), 'the newest value');
        assert.ok(!r.done, 'Observe ended early');
        if (r.value.value.toString() === 'v119') break;
        before += 1;
      }
      // At most what was still on its way when the last proclaim returned, not the backlog.
      assert.ok(before <= 8, `${before} older states before the newest`);
    }
    assert.ok(a.isLeader);
  } finally {
    for (const seen of observers) await seen.return();
    await a.close();
  }
});

test('for await over a campaign yields its events and ends with the stream', opts, async () => {
  const election = electionName();
  const c = gw.campaign(election, 'iter');
  const types = [];
  let answered;
  const run = (async () => {
    for await (const ev of c) {
      types.push(ev.type);
      if (ev.type === 'elected') {
        assert.ok(ev.silenceLimitMs > 0 && ev.fencingToken > 0n);
      }
      if (ev.type === 'heartbeat' && answered === undefined) {
        // A leader pings at once when elected, then every limit / 4; the gateway answers each.
        answered = ev.seq;
        c.resign();
      }
    }
  })();
  await within(STEP * 2, run, 'the iteration');
  assert.deepEqual(types.slice(0, 2), ['queued', 'elected']);
  assert.ok(types.includes('heartbeat'));
  assert.ok(answered > 1, `the gateway answers the helper's pings (heartbeat seq ${answered})`);
  assert.deepEqual(types.slice(-2), ['lost', 'end']);
  assert.equal(c.endCode, Status.OK);
  // An iterator made after the end finishes at once.
  for await (const ev of c) assert.fail(`unexpected ${ev.type}`);
  await c.close();
});

test(
  'the watchdog declares leadership lost when the gateway freezes',
  { skip: NEEDS_ADDR || (PID ? false : 'needs ZKGATE_PID: the gateway process to freeze'), timeout: 60000 },
  async (t) => {
    const election = electionName();
    const lost = [];
    const lead = await gw.elect(election, 'a', '', { timeoutMs: STEP, onLost: (r) => lost.push(r) });
    const limit = lead.silenceLimitMs;
    let waited;
    try {
      process.kill(PID, 'SIGSTOP');
      try {
        const started = performance.now();
        await aborted(lead.signal, limit * 3);
        waited = performance.now() - started;
      } finally {
        process.kill(PID, 'SIGCONT');
      }
      t.diagnostic(`loss declared ${waited.toFixed(0)} ms after SIGSTOP (silence limit ${limit} ms)`);
      assert.ok(!lead.isLeader);
      assert.match(lead.lostReason, /silence limit/);
      assert.deepEqual(lost, [lead.lostReason]);
      // Heartbeats come every limit/3, so loss is declared within (limit/3, limit] + scheduling.
      assert.ok(waited >= limit / 3 && waited <= limit + 2000, `waited ${waited} ms, limit ${limit} ms`);
      // The helper cancelled its stream, and nothing the thawed gateway might still send makes it
      // leader again.
      await within(STEP, lead.waitDone(), 'the stream to end after the watchdog');
      assert.equal(lead.endCode, Status.CANCELLED);
      await sleep(limit);
      assert.ok(lead.lost && !lead.isLeader && lead.signal.aborted);
      assert.throws(() => lead.check(), LeadershipLost);
    } finally {
      await lead.close();
    }
    // The helper gave its candidacy up: once the gateway runs again, another is elected. (The
    // freeze may have cost the gateway its ZooKeeper connection for a moment: retry UNAVAILABLE.)
    const deadline = performance.now() + STEP;
    for (;;) {
      const follower = gw.campaign(election, 'b');
      try {
        assert.equal((await follower.waitElected({ timeoutMs: STEP })).candidate, 'b');
        break;
      } catch (e) {
        if (follower.endCode !== Status.UNAVAILABLE || performance.now() > deadline) throw e;
        await sleep(200);
      } finally {
        await follower.close();
      }
    }
  },
);

test('observeMany follows every election under a prefix, later ones included', opts, async () => {
  const prefix = `${electionName()}.`;
  const a = gw.campaign(`${prefix}one`, 'a', 'va');
  await a.waitElected({ timeoutMs: STEP });
  const seen = gw.observeMany(prefix, [`${prefix}named`]);
  const next = async () => {
    const r = await within(STEP, seen.next(), 'an ObserveMany message');
    assert.ok(!r.done, 'ObserveMany ended early');
    return r.value;
  };
  let b = null;
  try {
    const snapshot = new Map();
    for (;;) {
      const m = await next();
      if (m.snapshotComplete) break;
      snapshot.set(m.election, m.leader);
    }
    assert.equal(snapshot.get(`${prefix}one`).candidate, 'a');
    assert.equal(snapshot.get(`${prefix}named`), null, 'a named election that does not exist is vacant');
    b = gw.campaign(`${prefix}two`, 'b', '');
    await b.waitElected({ timeoutMs: STEP });
    let m = await next();
    // A new election may first show as vacant: listed before its leader is confirmed.
    while (m.election === `${prefix}two` && m.leader === null) m = await next();
    assert.equal(m.election, `${prefix}two`);
    assert.equal(m.leader.candidate, 'b');
    await a.resign();
    m = await next();
    assert.deepEqual([m.election, m.leader], [`${prefix}one`, null], 'a vacancy is reported');
  } finally {
    await seen.return();
    await a.close();
    await b?.close();
  }
});
