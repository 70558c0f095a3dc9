// The fleet rules (clients/CONFORMANCE.md): endpoint lists and ZKGATE_ENDPOINT, the backoff, a
// dead endpoint skipped, paging, and auto-requeue across a drained gateway (ZKGATE_FLEET: two
// gateways on one ZooKeeper; ZKGATE_PID2: the second one, which the last test SIGTERMs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Backoff, Client, Loss, Status, parseEndpoints, resolveToken } from '../index.js';
import { ADDR, NEEDS_ADDR, STEP, electionName, sleep, within } from './helpers.js';

const FLEET = process.env.ZKGATE_FLEET ? process.env.ZKGATE_FLEET.split(',') : null;
const PID2 = process.env.ZKGATE_PID2 ? Number(process.env.ZKGATE_PID2) : 0;

test('endpoints come from code or ZKGATE_ENDPOINT', () => {
  const saved = process.env.ZKGATE_ENDPOINT;
  try {
    process.env.ZKGATE_ENDPOINT = 'http://a:1, https://b:2,c:3';
    assert.deepEqual(parseEndpoints(), [
      { address: 'a:1', tls: false },
      { address: 'b:2', tls: true },
      { address: 'c:3', tls: false },
    ]);
    assert.deepEqual(parseEndpoints(['x:9']), [{ address: 'x:9', tls: false }]);
    delete process.env.ZKGATE_ENDPOINT;
    assert.deepEqual(parseEndpoints(), [{ address: '127.0.0.1:50051', tls: false }]);
    assert.throws(() => parseEndpoints('grpc://a:1'), TypeError);
    assert.throws(() => parseEndpoints('no-port'), TypeError);
  } finally {
    if (saved === undefined) delete process.env.ZKGATE_ENDPOINT;
    else process.env.ZKGATE_ENDPOINT = saved;
  }
});

test('the token comes from code, a file or ZKGATE_TOKEN', () => {
  const saved = process.env.ZKGATE_TOKEN;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zkgate-token-'));
  const file = path.join(dir, 'token');
  const empty = path.join(dir, 'empty');
  writeFileSync(file, 'from-file\n');
  writeFileSync(empty, '\n');
  try {
    process.env.ZKGATE_TOKEN = ' from-env\n';
    assert.equal(resolveToken('from-code', file), 'from-code');
    assert.equal(resolveToken(undefined, file), 'from-file');
    assert.equal(resolveToken(), 'from-env');
    assert.throws(() => resolveToken(undefined, empty), TypeError);
    delete process.env.ZKGATE_TOKEN;
    assert.equal(resolveToken(), null);
  } finally {
    if (saved === undefined) delete process.env.ZKGATE_TOKEN;
    else process.env.ZKGATE_TOKEN = saved;
  }
});

test('the backoff is full jitter, doubling from 50 ms up to 2 s', () => {
  const b = new Backoff();
  for (let n = 0; n < 12; n++) {
    const w = b.next();
    assert.ok(w >= 0 && w <= Math.min(2000, 50 * 2 ** n), `${w} at try ${n}`);
  }
  const waits = Array.from({ length: 200 }, () => b.next());
  assert.ok(Math.max(...waits) <= 2000 && Math.max(...waits) > 1000);
  b.reset();
  assert.ok(b.next() <= 50);
});

test('a dead first endpoint is skipped, for streams and unary calls', { skip: NEEDS_ADDR, timeout: 60000 }, async () => {
  const fleet = new Client(['127.0.0.1:1', ADDR]);
  const election = electionName();
  try {
    const lead = await fleet.elect(election, 'a', 'v', { timeoutMs: STEP });
    assert.equal(lead.endpoint, `http://${ADDR}`);
    assert.equal(fleet.current, 1, 'the fleet remembers where it got through');
    fleet.current = 0;
    assert.equal((await fleet.leader(election)).candidate, 'a');
    await lead.close();
  } finally {
    fleet.close();
  }
});

test('holders and candidates follow next_page_token', { skip: NEEDS_ADDR, timeout: 60000 }, async () => {
  const gw = new Client(ADDR);
  const name = `${electionName()}-page`;
  const election = electionName();
  const open = [];
  try {
    for (let i = 0; i < 3; i++) {
      const h = gw.acquire(name, { owner: `r${i}`, mode: 'read' });
      open.push(h);
      await h.waitAcquired({ timeoutMs: STEP });
    }
    for (let i = 0; i < 3; i++) {
      const c = gw.campaign(election, `c${i}`);
      open.push(c);
      await c.waitQueued({ timeoutMs: STEP });
    }
    const h = await gw.holders(name, { pageSize: 1 });
    assert.deepEqual(h.holders.map((x) => x.owner).sort(), ['r0', 'r1', 'r2']);
    assert.equal(h.total, 3);
    const c = await gw.candidates(election, { pageSize: 1 });
    assert.deepEqual(c.candidates.map((x) => x.candidate), ['c0', 'c1', 'c2']);
    assert.equal(c.total, 3);
  } finally {
    for (const x of open) await x.close();
    gw.close();
  }
});

test('a standby holds again after a release by lease elsewhere; runWhileLeader returns work\'s result', { skip: NEEDS_ADDR, timeout: 60000 }, async () => {
  const gw = new Client(ADDR);
  const name = `${electionName()}-standby`;
  const granted = [];
  const lost = [];
  const sb = gw.standbyLock(name, { owner: 's' }, {
    onGranted: (h) => granted.push(h.fencingToken),
    onLost: (reason) => lost.push(reason),
  });
  try {
    const first = await within(STEP, sb.waitGranted(), 'the first grant');
    assert.ok(sb.holding);
    await gw.releaseLock(first.lease); // from "elsewhere": the hold ends OK, reason `ended`
    const deadline = performance.now() + STEP;
    while (granted.length < 2) {
      assert.ok(performance.now() < deadline, `granted ${granted}, lost ${lost}`);
      await sleep(10);
    }
    assert.deepEqual(lost, [Loss.ENDED]);
    assert.ok(granted[1] > granted[0]);
  } finally {
    await sb.close();
  }
  assert.equal((await gw.holders(name)).holders.length, 0, 'close() released it');
  const result = await gw.runWhileLeader(electionName(), 'w', 'w', async (c) => ['worked', c.isLeader]);
  assert.deepEqual(result, ['worked', true]);
  gw.close();
});

test(
  'a standby requeues on the next gateway when one drains; observe follows (drains g2: runs last)',
  { skip: FLEET && PID2 ? false : 'needs ZKGATE_FLEET and ZKGATE_PID2', timeout: 60000 },
  async () => {
    const [g1, g2] = FLEET;
    const client = new Client([g2, g1]);
    const election = electionName();
    const events = [];
    const opts = (who) => ({
      onGranted: (s) => events.push([who, 'granted', s.fencingToken, s.endpoint]),
      onLost: (reason, s) => events.push([who, 'lost', reason, s.endpoint]),
    });
    const x = client.standbyCampaign(election, 'x', 'x', opts('x'));
    let y = null;
    let seen = null;
    try {
      await within(STEP, x.waitGranted(), 'x elected');
      seen = client.observe(election);
      assert.equal(events[0][3], g2);
      y = client.standbyCampaign(election, 'y', 'y', opts('y'));
      const deadline = performance.now() + STEP;
      while ((await client.candidates(election)).total < 2) {
        assert.ok(performance.now() < deadline);
        await sleep(20);
      }
      const first = (await seen.next()).value;
      assert.equal(first.candidate, 'x');

      process.kill(PID2, 'SIGTERM');
      const grants = () => events.filter((e) => e[1] === 'granted');
      while (grants().length < 2) {
        assert.ok(performance.now() < deadline + STEP, JSON.stringify(events, (_, v) => (typeof v === 'bigint' ? String(v) : v)));
        await sleep(10);
      }
      // A drain revokes the hold with `suspended` first (G3c).
      assert.ok(events.some((e) => e[0] === 'x' && e[1] === 'lost' && e[2] === Loss.SUSPENDED && e[3] === g2));
      const second = grants()[1];
      assert.equal(second[3], g1, 'requeued through g1');
      assert.ok(second[2] > events[0][2], 'a later grant has a larger token');
      const tokens = [first.fencingToken];
      for (;;) {
        const { value } = await within(STEP, seen.next(), 'observe to follow');
        if (value) {
          tokens.push(value.fencingToken);
          if (value.fencingToken === second[2]) break;
        }
      }
      assert.deepEqual([...tokens].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)), tokens, 'never back in tokens');
    } finally {
      await seen?.return();
      await x.close();
      await y?.close();
      client.close();
    }
  },
);

const TLS_ADDR = process.env.ZKGATE_TLS_ADDR || '';
const TLS_DIR = process.env.ZKGATE_TLS_DIR || '';

test(
  'mutual TLS with a server-name override (ZKGATE_TLS_ADDR: client certificates required)',
  { skip: TLS_ADDR && TLS_DIR ? false : 'needs ZKGATE_TLS_ADDR and ZKGATE_TLS_DIR', timeout: 60000 },
  async () => {
    const port = TLS_ADDR.split(':').pop();
    const pem = (f) => readFileSync(path.join(TLS_DIR, f));
    // 127.0.0.2 refuses (failover); the certificate names 127.0.0.1 and localhost, and the
    // override makes the client verify "localhost".
    const fleet = new Client(`https://127.0.0.2:${port},https://127.0.0.1:${port}`, {
      tls: { ca: pem('ca.pem'), cert: pem('client.pem'), key: pem('client.key'), serverName: 'localhost' },
    });
    const election = electionName();
    try {
      const lead = await fleet.elect(election, 't', 't', { timeoutMs: STEP });
      assert.equal((await fleet.leader(election)).candidate, 't');
      assert.equal(lead.endpoint, `https://127.0.0.1:${port}`);
      await lead.close();
    } finally {
      fleet.close();
    }
    const noCert = new Client(`https://127.0.0.1:${port}`, { tls: { ca: pem('ca.pem') } });
    try {
      await assert.rejects(noCert.leader(election), (e) => e.code !== undefined && e.code !== Status.NOT_FOUND);
    } finally {
      noCert.close();
    }
    assert.throws(() => new Client(`https://127.0.0.1:${port}`, { tls: { cert: pem('client.pem') } }), TypeError);
  },
);
