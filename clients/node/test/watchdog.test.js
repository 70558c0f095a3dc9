// The helper's loss rules against a scripted in-process gateway (no ZooKeeper needed): silence
// past silence_limit after `elected`, `suspended` while leading, and a gateway that only goes
// silent before any election (no watchdog yet). Each scripted stream records whether the client
// cancelled it.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';

import { Client, HolderStream, Status, grpc, loadPackage } from '../index.js';
import { aborted, sleep, within } from './helpers.js';

const ms = (n) => ({ seconds: String(Math.floor(n / 1000)), nanos: (n % 1000) * 1e6 });
const LEADER = { election: 'e', candidate: 'c', value: Buffer.from('v'), fencingToken: '42' };

/** election name → function(call) scripting the Campaign stream. */
const scripts = new Map();
/** election name → {cancelled: Promise} for the call that served it. */
const served = new Map();
let server;
let gw;

before(async () => {
  const pkg = loadPackage();
  server = new grpc.Server();
  server.addService(pkg.Election.service, {
    Campaign(call) {
      call.once('data', (req) => {
        const election = req.join.election;
        const cancelled = new Promise((resolve) => call.on('cancelled', resolve));
        served.set(election, { cancelled });
        scripts.get(election)(call);
      });
      call.on('error', () => {});
    },
  });
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

test('silence after elected: loss after silence_limit, heartbeats postpone it, stream cancelled', async () => {
  const LIMIT = 400;
  const election = script('silence', async (call) => {
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
