// The helper's loss rules against a scripted in-process gateway (no ZooKeeper needed): silence
// past silence_limit after `elected`, `suspended` while leading, and a gateway that only goes
// silent before any election (no watchdog yet); with a gateway that answers pings, the lease
// anchored on the helper's own clock (PingLease: the pings' schedule, the deadline from the send
// of the answered ping, a grant whose lease ran out on its way). Each scripted stream records
// whether the client cancelled it. The scripted gateway runs in this process, so its
// `performance.now()` is the helper's clock (`HolderStream.clock`).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';

import { Client, HolderStream, PingLease, Status, grpc, loadPackage } from '../index.js';
import { aborted, sleep, within } from './helpers.js';

const ms = (n) => ({ seconds: String(Math.floor(n / 1000)), nanos: (n % 1000) * 1e6 });
const LEADER = { election: 'e', candidate: 'c', value: Buffer.from('v'), fencingToken: '42' };

/** election (or lock) name → function(call, firstRequest) scripting the Campaign (Acquire)
 *  stream. */
const scripts = new Map();
/** election (or lock) name → {cancelled: Promise} for the call that served it. */
const served = new Map();
let server;
let gw;

/** Serves a holder stream: its first request names the script. */
function holderStream(nameOf) {
  return (call) => {
    call.once('data', (req) => {
      const name = nameOf(req);
      const cancelled = new Promise((resolve) => call.on('cancelled', resolve));
      served.set(name, { cancelled });
      scripts.get(name)(call, req);
    });
    call.on('error', () => {});
  };
}

before(async () => {
  const pkg = loadPackage();
  server = new grpc.Server();
  server.addService(pkg.Election.service, { Campaign: holderStream((req) => req.join.election) });
  server.addService(pkg.Lock.service, { Acquire: holderStream((req) => req.acquire.name) });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  gw = new Client(`127.0.0.1:${port}`);
});

after(() => {
  gw?.close();
  server?.forceShutdown();
});

function script(election, fn) {
  scripts.set(election, fn);
  return election;
}

/** The pings a scripted stream reads after its first request: [{seq, at}] (`at`: when read). */
function pingsOf(call, onPing) {
  const pings = [];
  call.on('data', (req) => {
    if (!req.ping) return;
    const p = { seq: Number(req.ping.seq), at: performance.now() };
    pings.push(p);
    onPing?.(p);
  });
  return pings;
}

/** Resolves with the next `type` event of `stream` that satisfies `pred`. */
function nextEvent(stream, type, pred = () => true) {
  return new Promise((resolve) => {
    const on = (ev) => {
      if (!pred(ev)) return;
      stream.off(type, on);
      resolve(ev);
    };
    stream.on(type, on);
  });
}

test('silence after elected: loss after silence_limit, heartbeats postpone it, stream cancelled', async () => {
  // A gateway that does not answer pings (`queued.answers_pings` unset): the join still says
  // ping 1, but the helper sends no pings and every message heard restarts the watchdog.
  const LIMIT = 400;
  let joinPingSeq;
  let pings;
  const election = script('silence', async (call, join) => {
    joinPingSeq = join.join.pingSeq;
    pings = pingsOf(call);
    call.write({ queued: { lease: 'L', position: 0 } });
    call.write({ elected: { leader: LEADER, silenceLimit: ms(LIMIT) } });
    for (let i = 0; i < 3; i++) {
      await sleep(LIMIT / 2);
      call.write({ heartbeat: {} });
    }
    // then nothing at all
  });
  const lost = [];
  const c = gw.campaign(election, 'c', '', { onLost: (r) => lost.push(r) });
  let lastHeard = 0;
  let heartbeats = 0;
  for (const type of ['elected', 'heartbeat']) {
    c.on(type, () => {
      lastHeard = performance.now();
      if (type === 'heartbeat') heartbeats += 1;
    });
  }
  await c.waitElected({ timeoutMs: 5000 });
  assert.equal(c.silenceLimitMs, LIMIT);
  assert.equal(c.fencingToken, 42n);
  await aborted(c.signal, 5000);
  const silent = performance.now() - lastHeard;
  // Three heartbeats at LIMIT/2 kept it alive; then LIMIT of silence after the last one.
  assert.equal(heartbeats, 3, 'heartbeats postpone the watchdog');
  assert.ok(silent >= LIMIT - 5 && silent <= LIMIT + 1000, `lost ${silent} ms after the last message`);
  assert.match(c.lostReason, /silence limit \(0\.400 s\)/);
  assert.deepEqual(lost, [c.lostReason]);
  await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
  await within(5000, c.waitDone(), 'the stream to end');
  assert.equal(c.endCode, Status.CANCELLED);
  assert.ok(!c.isLeader);
  assert.equal(joinPingSeq, '1', 'the join is ping 1');
  assert.deepEqual(pings, [], 'no pings to a gateway that does not answer them');
  await c.close();
});

test('a heartbeat heard after the deadline does not revive the hold: silence came first', async () => {
  // A process frozen past its deadline finds, when it runs again, both its timer due and
  // messages that waited in its socket meanwhile; the event loop may read them first. Here the
  // clock jumps an hour past the deadline before the heartbeat is read, as it does for a
  // process frozen that long; the watchdog's own timer (a minute) has not fired.
  let sendHeartbeat;
  const heartbeat = new Promise((resolve) => (sendHeartbeat = resolve));
  const election = script('late', async (call) => {
    call.write({ queued: { lease: 'L', position: 0 } });
    call.write({ elected: { leader: LEADER, silenceLimit: ms(60_000) } });
    await heartbeat;
    call.write({ heartbeat: {} });
  });
  const real = HolderStream.clock;
  const c = gw.campaign(election, 'c', '');
  try {
    await c.waitElected({ timeoutMs: 5000 });
    assert.ok(c.isLeader);
    HolderStream.clock = () => real() + 3_600_000;
    // Asked now, before the watchdog or the heartbeat has run: not leader any more.
    assert.ok(!c.isLeader);
    sendHeartbeat();
    await aborted(c.signal, 5000);
    assert.equal(c.loss, 'silence');
    assert.match(c.lostReason, /silence limit \(60\.000 s\)/);
    assert.ok(!c.isLeader);
    await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
  } finally {
    HolderStream.clock = real;
    await c.close();
  }
});

test('suspended while leading: loss at once, stream cancelled, later events ignored', async () => {
  const election = script('suspend', (call) => {
    call.write({ queued: { lease: 'L', position: 0 } });
    call.write({ elected: { leader: LEADER, silenceLimit: ms(5000) } });
    setTimeout(() => {
      call.write({ suspended: { stopWithin: ms(2500) } });
      call.write({ resumed: {} }); // may or may not arrive before the cancel: must not matter
    }, 100);
  });
  const lost = [];
  const c = gw.campaign(election, 'c', '', { onLost: (r) => lost.push(r) });
  const types = [];
  const iteration = (async () => {
    for await (const ev of c) types.push(ev.type);
  })();
  await c.waitElected({ timeoutMs: 5000 });
  await aborted(c.signal, 5000);
  assert.match(c.lostReason, /^suspended: .*after 2\.500 s/);
  assert.deepEqual(lost, [c.lostReason]);
  await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
  await within(5000, iteration, 'the iteration to end');
  assert.deepEqual(types, ['queued', 'elected', 'suspended', 'lost', 'end']);
  assert.ok(!c.isLeader);
  await c.close();
});

test('suspended while queued and no resumed: the grant is lost as it is granted', async () => {
  const election = script('suspend-queued', (call) => {
    call.write({ queued: { lease: 'L', position: 1 } });
    call.write({ suspended: { stopWithin: ms(2500) } });
    call.write({ elected: { leader: LEADER, silenceLimit: ms(5000) } });
  });
  const lost = [];
  const c = gw.campaign(election, 'c', '', { onLost: (r) => lost.push(r) });
  const types = [];
  const iteration = (async () => {
    for await (const ev of c) types.push(ev.type);
  })();
  await aborted(c.signal, 5000);
  assert.equal(c.loss, 'suspended');
  assert.equal(c.fencingToken, 42n);
  assert.deepEqual(lost, [c.lostReason]);
  assert.ok(!c.isLeader);
  await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
  await within(5000, iteration, 'the iteration to end');
  assert.deepEqual(types, ['queued', 'suspended', 'elected', 'lost', 'end']);
  await c.close();
});

test('a queued candidate has no watchdog; elected after a silent wait', async () => {
  const election = script('queued', async (call) => {
    call.write({ queued: { lease: 'L', position: 3 } });
    await sleep(600);
    call.write({ elected: { leader: LEADER, silenceLimit: ms(600) } });
    const beat = setInterval(() => call.write({ heartbeat: {} }), 100);
    call.on('data', (req) => {
      if (req.resign) {
        clearInterval(beat);
        call.end();
      }
    });
    call.on('cancelled', () => clearInterval(beat));
  });
  const c = gw.campaign(election, 'c');
  assert.equal(await c.waitQueued({ timeoutMs: 5000 }), 3);
  assert.equal(c.lease, 'L');
  await c.waitElected({ timeoutMs: 5000 });
  await sleep(1200); // two silence limits, with a heartbeat every 100 ms
  assert.ok(c.isLeader, c.lostReason ?? 'still leader');
  await c.resign();
  assert.equal(c.endCode, Status.OK);
  assert.equal(c.lostReason, 'resigned');
});

test('an unreachable gateway ends the campaign', async () => {
  const dead = new Client('127.0.0.1:1');
  try {
    const c = dead.campaign('x', 'c');
    await assert.rejects(c.waitElected({ timeoutMs: 10000 }), { name: 'LeadershipLost' });
    assert.equal(c.endCode, Status.UNAVAILABLE);
  } finally {
    dead.close();
  }
});

// ------------------------------------------------ the lease on the holder's own clock (pings)

test('PingLease: the deadline runs from the send of the newest answered ping', () => {
  const T0 = 10_000;
  const LIMIT = 1000;
  // [pings sent at these offsets, the grant's ping_seq, answers in order, deadline offset]
  const table = [
    [[], 1, [], 1000, 'granted at once on the join'],
    [[300, 600], 3, [], 1600, "a waiter's newest ping"],
    [[300, 600], 2, [3], 1600, 'granted on 2, then 3 answered'],
    [[300], 2, [2, 2], 1300, 'a replayed answer moves nothing'],
    [[300, 600], 3, [2], 1600, 'an older answer moves nothing back'],
    [[300], 2, [0, 9], 1300, 'unsolicited or unknown: nothing'],
    [[300], 0, [], null, 'a grant naming no ping anchors nothing'],
    [[300], 9, [], null, 'a grant naming an unknown ping anchors nothing'],
  ];
  for (const [pings, grant, answers, want, what] of table) {
    const l = new PingLease(T0);
    pings.forEach((at, i) => assert.equal(l.ping(T0 + at), i + 2, what));
    let until = l.granted(LIMIT, grant);
    for (const a of answers) until = l.answered(a);
    assert.equal(until, want == null ? null : T0 + want, what);
  }
  assert.equal(new PingLease(T0).granted(undefined, 1), null, 'a grant without a silence limit anchors nothing');
});

test('PingLease: only the 64 newest pings are remembered', () => {
  const l = new PingLease(0);
  for (let i = 0; i < 74; i++) l.ping(i);
  assert.equal(l._sent.length, 64);
  assert.equal(l.granted(1000, 1), null, "the join's ping is forgotten");
  assert.equal(l.answered(75), 73 + 1000, 'the newest is remembered');
  assert.equal(l._sent.length, 0, 'answered and older ones dropped');
});

test('pings: the join is ping 1, a waiter pings every third of queued.silence_limit, a leader at once and every quarter', async () => {
  let joinPingSeq;
  let joinAt;
  let grantedAt = null;
  let pings;
  const election = script('ping-schedule', async (call, join) => {
    joinAt = performance.now();
    joinPingSeq = join.join.pingSeq;
    // Answers every ping read after the grant at once.
    pings = pingsOf(call, (p) => grantedAt != null && call.write({ heartbeat: { seq: String(p.seq) } }));
    call.on('data', (req) => req.resign && call.end());
    call.write({ queued: { lease: 'L', position: 1, answersPings: true, silenceLimit: ms(600) } });
    await sleep(700);
    grantedAt = performance.now();
    call.write({ elected: { leader: LEADER, silenceLimit: ms(800), pingSeq: String(pings.at(-1).seq) } });
  });
  const c = gw.campaign(election, 'c');
  await c.waitElected({ timeoutMs: 5000 });
  // Longer than the limit: only the answers keep it.
  await sleep(1200);
  assert.ok(c.isLeader, c.lostReason ?? 'still leader');
  const deadline = c._silenceDeadline;
  assert.ok(
    pings.some((p) => p.at - 150 <= deadline - 800 && deadline - 800 <= p.at),
    `the deadline (${deadline}) is a ping's send + 800 ms: ${JSON.stringify(pings)}`,
  );
  await c.resign();
  assert.equal(c.endCode, Status.OK);

  assert.equal(joinPingSeq, '1', 'the join is ping 1');
  const waiting = pings.filter((p) => p.at < grantedAt);
  const holding = pings.filter((p) => p.at >= grantedAt);
  assert.deepEqual(
    waiting.map((p) => p.seq),
    [2, 3, 4],
    `a waiter pings every 200 ms: ${JSON.stringify(waiting.map((p) => p.at - joinAt))}`,
  );
  waiting.forEach((p, i) => {
    const after = p.at - joinAt;
    assert.ok(after >= 200 * (i + 1) - 20 && after <= 200 * (i + 1) + 150, `ping ${p.seq} at ${after} ms`);
  });
  assert.equal(holding[0].seq, 5, 'pinged at the grant');
  assert.ok(holding[0].at - grantedAt <= 150, `pinged ${holding[0].at - grantedAt} ms after the grant`);
  assert.ok(holding.length >= 5, `a leader pings every 200 ms: ${holding.length} pings in 1.2 s`);
  holding.forEach((p, i) => {
    assert.equal(p.seq, 5 + i);
    if (i === 0) return;
    const gap = p.at - holding[i - 1].at;
    assert.ok(gap >= 150 && gap <= 350, `ping ${p.seq} ${gap} ms after the one before`);
  });
});

test('pings: the deadline is the send of the answered ping + the limit; a late answer gives only that, other messages nothing', async () => {
  const LIMIT = 1500;
  let joinAt;
  let ping3 = null;
  let answered3At = null;
  const election = script('ping-anchor', async (call) => {
    joinAt = performance.now();
    pingsOf(call, (p) => {
      if (p.seq !== 3) return;
      ping3 = p;
      // The answer to ping 3 (sent a quarter of the limit after the grant) arrives 600 ms late;
      // then a replay of an older answer and one to a ping never sent.
      setTimeout(() => {
        answered3At = performance.now();
        call.write({ heartbeat: { seq: '3' } });
        setTimeout(() => {
          call.write({ heartbeat: { seq: '2' } });
          call.write({ heartbeat: { seq: '99' } });
        }, 50);
      }, 600);
    });
    // A waiter's pings would come every 10 s: none here.
    call.write({ queued: { lease: 'L', position: 0, answersPings: true, silenceLimit: ms(30_000) } });
    await sleep(200);
    // Granted on the join (ping 1, sent 200 ms ago).
    call.write({ elected: { leader: LEADER, silenceLimit: ms(LIMIT), pingSeq: '1' } });
    await sleep(100);
    // Unsolicited heartbeats and other messages move nothing.
    call.write({ heartbeat: {} });
    call.write({ proclaimed: { leader: { ...LEADER, value: Buffer.from('w') } } });
  });
  const c = gw.campaign(election, 'c');
  const proclaimed = nextEvent(c, 'proclaimed');
  const answer3 = nextEvent(c, 'heartbeat', (ev) => ev.seq === 3);
  const unknown = nextEvent(c, 'heartbeat', (ev) => ev.seq === 99);
  await c.waitElected({ timeoutMs: 5000 });
  const d0 = c._silenceDeadline;
  assert.ok(d0 <= joinAt + LIMIT, `anchored on the join's send (${d0 - joinAt} ms after the join was read)`);
  assert.ok(d0 >= joinAt + LIMIT - 100, `${d0 - joinAt}`);

  await within(5000, proclaimed, 'proclaimed');
  assert.equal(c._silenceDeadline, d0, 'heartbeat{seq: 0} and proclaimed move nothing');
  assert.ok(c.isLeader);

  await within(5000, answer3, 'the answer to ping 3');
  const d1 = c._silenceDeadline;
  assert.ok(
    d1 - LIMIT <= ping3.at && d1 - LIMIT >= ping3.at - 150,
    `the deadline runs from ping 3's send (${ping3.at - (d1 - LIMIT)} ms before it was read), not from its answer`,
  );
  await within(5000, unknown, 'the older and unknown answers');
  assert.equal(c._silenceDeadline, d1, 'an older or unknown answer moves nothing');

  await aborted(c.signal, 5000);
  const lostAt = performance.now();
  assert.equal(c.loss, 'silence');
  assert.match(c.lostReason, /no ping answered .*silence limit \(1\.500 s\)/);
  assert.ok(lostAt >= d1 - 5 && lostAt <= d1 + 300, `lost ${lostAt - d1} ms after the deadline`);
  assert.ok(
    lostAt < answered3At + LIMIT - 300,
    `lost ${lostAt - answered3At} ms after the last answer was sent: not counted from hearing it`,
  );
  await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
  await c.close();
});

test('pings: a grant whose lease ran out on its way, or that names no ping this stream sent, is recorded and lost at once', async () => {
  // A silence limit of a minute: "at once" is not the watchdog's timer. The late grant: the clock
  // jumps an hour between the join and the grant (a link slower than the lease allows).
  const real = HolderStream.clock;
  for (const [pingSeq, late, what] of [
    ['1', true, 'late'],
    [undefined, false, 'no ping'],
    ['9', false, 'unknown ping'],
  ]) {
    let pings;
    let grant;
    const granted = new Promise((resolve) => (grant = resolve));
    const election = script(`ping-expired-${late}-${pingSeq}`, async (call) => {
      pings = pingsOf(call);
      call.write({ queued: { lease: 'L', position: 1, answersPings: true, silenceLimit: ms(60_000) } });
      await granted;
      call.write({ elected: { leader: LEADER, silenceLimit: ms(60_000), pingSeq } });
    });
    const lost = [];
    const c = gw.campaign(election, 'c', '', { onLost: (r) => lost.push(r) });
    const types = [];
    const iteration = (async () => {
      for await (const ev of c) types.push(ev.type);
    })();
    let lostAt;
    try {
      await c.waitQueued({ timeoutMs: 5000 });
      if (late) HolderStream.clock = () => real() + 3_600_000;
      grant();
      await aborted(c.signal, 5000);
      lostAt = real();
    } finally {
      HolderStream.clock = real;
    }
    assert.equal(c.loss, 'silence', what);
    assert.match(c.lostReason, late ? /grant arrived after its lease ran out/ : /nothing anchors the lease/, what);
    assert.ok(c.elected, `${what}: the grant is recorded`);
    assert.equal(c.fencingToken, 42n, what);
    assert.ok(!c.isLeader, what);
    assert.deepEqual(lost, [c.lostReason], what);
    await within(5000, served.get(election).cancelled, `${what}: the server to see the cancellation`);
    await within(5000, iteration, `${what}: the iteration to end`);
    assert.deepEqual(types, ['queued', 'elected', 'lost', 'end'], what);
    assert.deepEqual(pings, [], `${what}: never held, never pinged as a holder`);
    assert.ok(lostAt != null, what);
    await c.close();
  }
});

test('pings: a lock acquired after its lease ran out on its way is lost at once', async () => {
  let acquirePingSeq;
  const name = script('ping-expired-lock', async (call, acquire) => {
    acquirePingSeq = acquire.acquire.pingSeq;
    call.write({ queued: { lease: 'L', position: 1, answersPings: true, silenceLimit: ms(10_000) } });
    await sleep(600);
    call.write({ acquired: { fencingToken: '7', silenceLimit: ms(500), pingSeq: '1' } });
  });
  const h = gw.acquire(name);
  await assert.rejects(h.waitAcquired({ timeoutMs: 5000 }), { name: 'LockLost' });
  assert.equal(h.loss, 'silence');
  assert.ok(h.acquired && !h.isHeld);
  assert.equal(h.fencingToken, 7n);
  assert.match(h.lostReason, /grant arrived after its lease ran out/);
  assert.equal(acquirePingSeq, '1', 'the acquire is ping 1');
  await within(5000, served.get(name).cancelled, 'the server to see the cancellation');
  await h.close();
});

test('pings: an answer heard after the anchored deadline does not revive the hold', async () => {
  let answer;
  const answered = new Promise((resolve) => (answer = resolve));
  const election = script('ping-late', async (call) => {
    const pings = pingsOf(call);
    call.write({ queued: { lease: 'L', position: 0, answersPings: true, silenceLimit: ms(60_000) } });
    call.write({ elected: { leader: LEADER, silenceLimit: ms(60_000), pingSeq: '1' } });
    await answered;
    call.write({ heartbeat: { seq: String(pings.at(-1).seq) } });
  });
  const real = HolderStream.clock;
  const c = gw.campaign(election, 'c', '');
  const types = [];
  const iteration = (async () => {
    for await (const ev of c) types.push(ev.type);
  })();
  try {
    await c.waitElected({ timeoutMs: 5000 });
    await sleep(100); // the ping sent at the grant reaches the gateway
    assert.ok(c.isLeader);
    HolderStream.clock = () => real() + 3_600_000;
    assert.ok(!c.isLeader);
    answer();
    await aborted(c.signal, 5000);
    assert.equal(c.loss, 'silence');
    assert.ok(!c.isLeader);
    await within(5000, served.get(election).cancelled, 'the server to see the cancellation');
    await within(5000, iteration, 'the iteration to end');
    // The answer read late is the silence loss, not a renewal: it is not even delivered.
    assert.deepEqual(types, ['queued', 'elected', 'lost', 'end']);
  } finally {
    HolderStream.clock = real;
    await c.close();
  }
});
