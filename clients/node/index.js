// Leader election through a zkgate gateway, with the client-side watchdog the API asks for.
//
// A Campaign is one open `zkgate.v1.Election/Campaign` stream: one candidate in one election,
// holding one ZooKeeper znode at the gateway for as long as the stream is open. It decides when
// this process must stop acting as leader:
//
// * the stream ends, for any reason (resigned, session lost, gateway draining, connection lost);
// * the gateway sends `suspended` while we lead (it lost its ZooKeeper connection, so leadership
//   is uncertain and a successor may be elected after `stop_within`);
// * nothing at all arrives for `silence_limit` after `elected` (the gateway sends a heartbeat at
//   least every `silence_limit / 3`, so silence means a frozen or unreachable gateway, which may
//   already have lost the znode).
//
// In each case the campaign's `signal` is aborted and the stream is cancelled, which releases the
// znode so that the next candidate can be elected: like Curator's LeaderSelector (and the Python
// helper in clients/python), the helper gives leadership up rather than waiting for a suspension
// to resolve, and never considers itself leader again afterwards. Campaign again to rejoin.
//
// The protos are loaded at run time from the repository's proto/ directory (no generated code).

import { EventEmitter } from 'node:events';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const { status: Status } = grpc;

/** Where the `zkgate/v1/*.proto` files live: `ZKGATE_PROTO_DIR`, else the repository's proto/. */
export const DEFAULT_PROTO_DIR =
  process.env.ZKGATE_PROTO_DIR ||
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'proto');

const LOADER_OPTIONS = {
  keepCase: false, // camelCase field names: fencingToken, silenceLimit, stopWithin
  longs: String, // uint64 fencing tokens and Duration seconds as decimal strings, no precision loss
  enums: String,
  bytes: Buffer,
  defaults: false, // an unset message field stays undefined (ObserveResponse.leader when vacant)
  oneofs: true, // `event` / `request` name the member that is set
};

const packages = new Map();

/** The loaded `zkgate.v1` package (grpc-js service constructors), cached per proto directory. */
export function loadPackage(protoDir = DEFAULT_PROTO_DIR) {
  let pkg = packages.get(protoDir);
  if (!pkg) {
    const definition = protoLoader.loadSync(['zkgate/v1/election.proto', 'zkgate/v1/lock.proto'], {
      ...LOADER_OPTIONS,
      includeDirs: [protoDir],
    });
    pkg = grpc.loadPackageDefinition(definition).zkgate.v1;
    packages.set(protoDir, pkg);
  }
  return pkg;
}

/** A `google.protobuf.Duration` ({seconds, nanos}) in milliseconds; undefined if unset. */
export function durationMs(d) {
  if (d == null) return undefined;
  return Number(d.seconds ?? 0) * 1000 + Number(d.nanos ?? 0) / 1e6;
}

function timestampDate(t) {
  if (t == null) return undefined;
  return new Date(Number(t.seconds ?? 0) * 1000 + Math.floor(Number(t.nanos ?? 0) / 1e6));
}

/** A `bytes` field from a Buffer, a Uint8Array (or other view), an ArrayBuffer or a string (UTF-8). */
function toBytes(value) {
  if (value == null) return Buffer.alloc(0);
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  if (Buffer.isBuffer(value)) return value;
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  throw new TypeError('value must be a Buffer, Uint8Array, ArrayBuffer or string');
}

/**
 * A `zkgate.v1.Leader` as a plain object: `{election, candidate, value (Buffer),
 * fencingToken (BigInt), since (Date)}`.
 */
function toLeader(l) {
  if (l == null) return null;
  return {
    election: l.election ?? '',
    candidate: l.candidate ?? '',
    value: l.value ?? Buffer.alloc(0),
    fencingToken: BigInt(l.fencingToken ?? 0),
    since: timestampDate(l.since),
  };
}

function statusName(code) {
  return Object.keys(Status).find((k) => Status[k] === code) ?? String(code);
}

/** Runs an application callback; an exception it throws is re-thrown on its own (an uncaught
 *  exception, as from any throwing listener) instead of interrupting the helper's bookkeeping. */
function userCode(fn) {
  try {
    fn();
  } catch (e) {
    process.nextTick(() => {
      throw e;
    });
  }
}

/** This campaign is not (or no longer) the leader; `reason` says why. */
export class LeadershipLost extends Error {
  constructor(reason) {
    super(reason);
    this.name = 'LeadershipLost';
    this.reason = reason;
  }
}

/** A wait (`waitQueued`, `waitElected`) ran out of time; the campaign goes on. */
export class CampaignTimeout extends Error {
  constructor(message) {
    super(message);
    this.name = 'TimeoutError';
  }
}

/** An unbounded queue feeding one async iterator; `end(error?)` finishes it (throwing `error`
 *  after the items already queued). `return()` (leaving a for-await loop) calls `onReturn`. */
class AsyncQueue {
  constructor(onReturn) {
    this.items = [];
    this.waiters = [];
    this.closed = false;
    this.onReturn = onReturn;
  }

  push(value) {
    this._put({ value, done: false });
  }

  end(error = null) {
    if (this.closed) return;
    this._put(error ? { error } : { value: undefined, done: true });
    this.closed = true;
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  _put(item) {
    if (this.closed) return;
    const w = this.waiters.shift();
    if (w) w(item);
    else this.items.push(item);
  }

  next() {
    const item = this.items.shift() ?? (this.closed ? { value: undefined, done: true } : null);
    if (item) return settle(item);
    return new Promise((resolve) => this.waiters.push(resolve)).then(settle);
  }

  return() {
    const wasOpen = !this.closed;
    this.items = [];
    this.end();
    if (wasOpen) this.onReturn?.();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator]() {
    return this;
  }
}

function settle(item) {
  return item.error ? Promise.reject(item.error) : Promise.resolve(item);
}

/**
 * One candidacy in `election`: joins on construction (use `Client.campaign`), leaves on
 * `resign()`/`cancel()`/`close()`.
 *
 * State (read it any time): `lease` (the capability for Resign/Proclaim from anywhere: secret, do
 * not log), `position`, `leader` (the Leader once elected, updated by proclaims), `fencingToken`
 * (BigInt), `silenceLimitMs`, `queued`, `elected`, `isLeader`, `lost`, `lostReason`, `endCode`
 * and `endDetails` (the stream's final gRPC status once it ended).
 *
 * `signal` is an AbortSignal aborted (reason: a LeadershipLost) as soon as the campaign is over or
 * its leadership can no longer be trusted: pass it to leader-only work.
 *
 * Events (EventEmitter): `queued` {lease, position}, `elected` {leader, fencingToken,
 * silenceLimitMs}, `suspended` {stopWithinMs}, `resumed` {}, `proclaimed` {leader},
 * `heartbeat` {}, `lost` {reason, wasLeader, requested}, `end` {code, details}.
 * The same events, each as `{type, ...}`, come out of `for await (const ev of campaign)`: `lost`
 * once, and `end` last, after which the iteration finishes. An iterator sees the events from its
 * creation on (iterate right after `campaign()` to see them all).
 * Messages that arrive after leadership was declared lost are ignored.
 *
 * `onLost(reason)` (an option of `campaign`) is called when leadership ends other than by this
 * object's own `resign()`/`cancel()`/`close()`.
 */
export class Campaign extends EventEmitter {
  constructor(stub, election, candidate, value, { onLost } = {}) {
    super();
    this.election = election;
    this.candidate = candidate;
    this.lease = null;
    this.position = null;
    this.leader = null;
    this.silenceLimitMs = null;
    this.queued = false;
    this.elected = false;
    this.lost = false;
    this.lostReason = null;
    this.endCode = null;
    this.endDetails = null;
    this._stub = stub;
    this._onLost = onLost;
    this._closing = false;
    this._done = false;
    this._status = null;
    this._readEnded = false;
    this._watchdog = null;
    this._iterators = new Set();
    this._abort = new AbortController();
    this._doneWaiters = [];
    this._stateWatchers = new Set();

    this._call = stub.Campaign();
    this._call.on('data', (response) => this._handle(response));
    this._call.on('error', () => {}); // the status event below carries the same information
    this._call.on('end', () => {
      this._readEnded = true;
      this._maybeFinish();
    });
    this._call.on('status', (status) => {
      this._status = status;
      // 'end' follows once every message received before the status has been handled; should it
      // not come, finish anyway.
      setTimeout(() => {
        this._readEnded = true;
        this._maybeFinish();
      }, 1000).unref();
      this._maybeFinish();
    });
    // Never half-close on our own: a half-closed candidate stays, but keeping the request side
    // open lets resign() still reach the gateway.
    this._call.write({ join: { election, candidate, value: toBytes(value) } });
  }

  /** Aborted as soon as this campaign must not (or no longer) act as leader. */
  get signal() {
    return this._abort.signal;
  }

  /** Elected, and nothing since says otherwise. */
  get isLeader() {
    return this.elected && !this.lost;
  }

  /** This leader's fencing token (a BigInt): pass it to services that fence writes. */
  get fencingToken() {
    return this.leader ? this.leader.fencingToken : null;
  }

  /** Whether the stream has ended. */
  get done() {
    return this._done;
  }

  /** Throws LeadershipLost unless this campaign currently leads. */
  check() {
    if (!this.isLeader) throw new LeadershipLost(this.lostReason ?? 'not elected (yet)');
  }

  /** Resolves with the position once queued; rejects with LeadershipLost if the stream ended
   *  first (e.g. a refused join), with a TimeoutError after `timeoutMs`. */
  async waitQueued({ timeoutMs } = {}) {
    await this._waitFor(() => this.queued, timeoutMs, 'queued', true);
    return this.position;
  }

  /** Resolves with the Leader once this campaign leads; rejects with LeadershipLost if it ended
   *  first, with a TimeoutError after `timeoutMs` (the campaign goes on: close() to give up). */
  async waitElected({ timeoutMs } = {}) {
    await this._waitFor(() => this.elected, timeoutMs, 'elected', false);
    return this.leader;
  }

  /** Resolves once the stream has ended. */
  waitDone() {
    if (this._done) return Promise.resolve();
    return new Promise((resolve) => this._doneWaiters.push(resolve));
  }

  _waitFor(pred, timeoutMs, what, okAfterLoss) {
    return new Promise((resolve, reject) => {
      let timer = null;
      const check = () => {
        if (pred() && (okAfterLoss || !this.lost)) return settle(resolve);
        if (this.lost) return settle(() => reject(new LeadershipLost(this.lostReason ?? 'campaign ended')));
        return false;
      };
      const settle = (fn) => {
        this._stateWatchers.delete(check);
        if (timer) clearTimeout(timer);
        fn();
        return true;
      };
      if (check()) return;
      this._stateWatchers.add(check);
      if (timeoutMs != null) {
        timer = setTimeout(
          () => settle(() => reject(new CampaignTimeout(`not ${what} within ${timeoutMs} ms`))),
          timeoutMs,
        );
      }
    });
  }

  /**
   * Replaces the leader's value with the unary Proclaim by lease, so that a refusal
   * (FAILED_PRECONDITION when not leading) does not end the campaign. Resolves with the Leader.
   */
  async proclaim(value, { timeoutMs = 10000 } = {}) {
    if (this.lease == null) await this.waitQueued({ timeoutMs });
    const response = await unary(this._stub, 'Proclaim', { lease: this.lease, value: toBytes(value) }, timeoutMs);
    return toLeader(response.leader);
  }

  /**
   * Leaves the election in-stream and waits until the gateway has deleted the znode (the stream
   * then ends OK). Falls back to cancelling the stream after `timeoutMs`.
   */
  async resign({ timeoutMs = 5000 } = {}) {
    this._closing = true;
    if (this._done) return;
    this._call.write({ resign: {} });
    if (!(await this._doneWithin(timeoutMs))) {
      this.cancel();
      await this._doneWithin(timeoutMs);
    }
  }

  /** Drops the stream at once; the gateway deletes the znode within milliseconds. */
  cancel() {
    this._closing = true;
    this._call.cancel();
  }

  /** Resigns if still campaigning, then closes the request side. */
  async close() {
    try {
      await this.resign();
    } finally {
      if (!this._call.writableEnded) this._call.end();
    }
  }

  [Symbol.asyncIterator]() {
    const q = new AsyncQueue(() => this._iterators.delete(q));
    if (this._done) q.end();
    else this._iterators.add(q);
    return q;
  }

  // ------------------------------------------------------------------------------ internals

  _doneWithin(ms) {
    if (this._done) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this._doneWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  _emitEvent(type, fields) {
    const ev = { type, ...fields };
    for (const q of this._iterators) q.push(ev);
    userCode(() => this.emit(type, fields));
  }

  _handle(response) {
    if (this.lost || this._done) return; // too late: leadership was already given up
    this._heard();
    switch (response.event) {
      case 'queued':
        this.lease = response.queued.lease;
        this.position = Number(response.queued.position ?? 0);
        this.queued = true;
        this._emitEvent('queued', { lease: this.lease, position: this.position });
        break;
      case 'elected': {
        const e = response.elected;
        this.leader = toLeader(e.leader);
        this.silenceLimitMs = durationMs(e.silenceLimit) ?? null;
        this.elected = true;
        this._armWatchdog();
        this._emitEvent('elected', {
          leader: this.leader,
          fencingToken: this.leader.fencingToken,
          silenceLimitMs: this.silenceLimitMs,
        });
        break;
      }
      case 'suspended': {
        const stopWithinMs = durationMs(response.suspended.stopWithin) ?? 0;
        const announce = () => this._emitEvent('suspended', { stopWithinMs });
        if (this.isLeader) {
          this._lose(
            'suspended: the gateway lost its ZooKeeper connection ' +
              `(a successor may be elected after ${(stopWithinMs / 1000).toFixed(3)} s)`,
            { cancel: true, announce },
          );
        } else {
          announce();
        }
        break;
      }
      case 'resumed':
        this._emitEvent('resumed', {});
        break;
      case 'proclaimed':
        this.leader = toLeader(response.proclaimed.leader);
        this._emitEvent('proclaimed', { leader: this.leader });
        break;
      case 'heartbeat':
        this._emitEvent('heartbeat', {});
        break;
      default:
        break; // an event this helper does not know: it still counts as hearing from the gateway
    }
    this._notify();
  }

  _notify() {
    for (const check of [...this._stateWatchers]) check();
  }

  /** Anything at all from the gateway restarts the silence clock. */
  _heard() {
    if (this._watchdog) this._watchdog.refresh();
  }

  _armWatchdog() {
    if (this._watchdog || !(this.silenceLimitMs > 0)) return;
    const limit = this.silenceLimitMs;
    this._watchdog = setTimeout(() => {
      this._watchdog = null;
      if (!this.isLeader) return;
      this._lose(
        `no message from the gateway for the silence limit (${(limit / 1000).toFixed(3)} s): ` +
          'it may be frozen or cut off',
        { cancel: true },
      );
    }, limit);
  }

  _disarmWatchdog() {
    if (this._watchdog) clearTimeout(this._watchdog);
    this._watchdog = null;
  }

  /** Leadership is over or untrustworthy: record it and cancel the stream if asked (giving the
   *  znode up) before any application code runs; then `announce()` the event that caused it,
   *  and the loss itself. */
  _lose(reason, { cancel = false, announce } = {}) {
    if (this.lost) return;
    this._disarmWatchdog();
    const wasLeader = this.elected;
    const requested = this._closing;
    this.lost = true;
    this.lostReason = reason;
    if (cancel) this._call.cancel();
    this._abort.abort(new LeadershipLost(reason)); // EventTarget: listener errors do not reach us
    this._notify();
    announce?.();
    this._emitEvent('lost', { reason, wasLeader, requested });
    if (wasLeader && !requested && this._onLost) userCode(() => this._onLost(reason));
  }

  _maybeFinish() {
    if (this._done || !this._status || !this._readEnded) return;
    const { code, details } = this._status;
    this.endCode = code;
    this.endDetails = details ?? '';
    this._lose(code === Status.OK ? 'resigned' : `stream ended ${statusName(code)}: ${this.endDetails}`);
    this._done = true;
    if (!this._call.writableEnded) this._call.end();
    this._emitEvent('end', { code, details: this.endDetails });
    for (const q of this._iterators) q.end();
    this._iterators.clear();
    for (const w of this._doneWaiters.splice(0)) w();
    this._notify();
  }
}

// `await using c = client.campaign(...)` where the runtime has explicit resource management.
if (Symbol.asyncDispose) {
  Campaign.prototype[Symbol.asyncDispose] = function dispose() {
    return this.close();
  };
}

function unary(stub, method, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const options = timeoutMs != null ? { deadline: new Date(Date.now() + timeoutMs) } : {};
    stub[method](request, options, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

/**
 * A connection to a gateway: `new Client('127.0.0.1:50051')`, or with TLS
 * `new Client(addr, {credentials: grpc.credentials.createSsl(...)})`. `close()` when done.
 */
export class Client {
  constructor(target, { credentials, channelOptions, protoDir } = {}) {
    const pkg = loadPackage(protoDir);
    /** The grpc-js `zkgate.v1.Election` client, for the RPCs this helper does not wrap. */
    this.stub = new pkg.Election(target, credentials ?? grpc.credentials.createInsecure(), channelOptions);
  }

  /** Joins `election` as `candidate` with `value` (Buffer or string); returns the Campaign. */
  campaign(election, candidate, value = Buffer.alloc(0), { onLost } = {}) {
    return new Campaign(this.stub, election, candidate, value, { onLost });
  }

  /**
   * Campaigns and resolves with the Campaign once elected. Rejects with LeadershipLost or a
   * TimeoutError (after closing the campaign) if it is never elected. `close()` it when done.
   */
  async elect(election, candidate, value, { timeoutMs, onLost } = {}) {
    const c = this.campaign(election, candidate, value, { onLost });
    try {
      await c.waitElected({ timeoutMs });
      return c;
    } catch (e) {
      await c.close();
      throw e;
    }
  }

  /** The election's current leader, or null when nobody leads. */
  async leader(election, { timeoutMs = 10000 } = {}) {
    try {
      return toLeader((await unary(this.stub, 'Leader', { election }, timeoutMs)).leader);
    } catch (e) {
      if (e.code === Status.NOT_FOUND) return null;
      throw e;
    }
  }

  /** Is `fencingToken` the current leader's? Resolves with {current, leader}. */
  async validate(election, fencingToken, { timeoutMs = 10000 } = {}) {
    const r = await unary(this.stub, 'Validate', { election, fencingToken: String(fencingToken) }, timeoutMs);
    return { current: Boolean(r.current), leader: toLeader(r.leader) };
  }

  /** Resigns the candidacy named by `lease`, from any gateway. */
  async resign(lease, { timeoutMs = 10000 } = {}) {
    await unary(this.stub, 'Resign', { lease }, timeoutMs);
  }

  /**
   * The election's leader (null while vacant) as an async iterator: the current state first,
   * then one value per change. Leaving the loop (break, return, throw) cancels the stream; a
   * stream that ends with an error status (e.g. ABORTED when the gateway's session ends) throws
   * that error: observe again. `signal` (an AbortSignal) also ends it.
   */
  observe(election, { signal } = {}) {
    const call = this.stub.Observe({ election });
    const q = new AsyncQueue(() => call.cancel());
    let failure = null;
    const finish = () => q.end(failure);
    call.on('data', (r) => q.push(toLeader(r.leader)));
    call.on('error', () => {}); // the status event carries the same information
    call.on('status', (s) => {
      if (s.code !== Status.OK) {
        failure = new Error(`Observe ended ${statusName(s.code)}: ${s.details}`);
        failure.code = s.code;
        failure.details = s.details;
      }
      setTimeout(finish, 1000).unref(); // in case 'end' never comes
    });
    call.on('end', finish); // after every message received before the status
    if (signal) {
      if (signal.aborted) q.return();
      else signal.addEventListener('abort', () => q.return(), { once: true });
    }
    return q;
  }

  /** Closes the channel: new calls fail. Close (or cancel) open campaigns and observers first. */
  close() {
    this.stub.close();
  }
}

/** Shorthand for `new Client(target, options)`. */
export function connect(target, options) {
  return new Client(target, options);
}

export { grpc, Status };
