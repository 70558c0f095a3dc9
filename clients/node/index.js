// Leader election and locks through a zkgate gateway, with the client-side watchdog the API asks
// for (a LockHold follows the same rules as the Campaign described here).
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
 * What a Campaign and a LockHold share: one holder stream (`queued` first, then a grant —
 * `elected` / `acquired` — carrying `silence_limit`, then `suspended`/`resumed`/`heartbeat`
 * until the end), read with the watchdog, and given up (stream cancelled, `signal` aborted) as
 * soon as the hold can no longer be trusted. Subclasses say what the grant carries
 * (`_onMessage`) and which message gives the hold up (`_leaveMessage`).
 */
export class HolderStream extends EventEmitter {
  constructor(call, firstRequest, { onLost, lostError, okReason }) {
    super();
    this.lease = null;
    this.position = null;
    this.silenceLimitMs = null;
    this.queued = false;
    this.lost = false;
    this.lostReason = null;
    this.endCode = null;
    this.endDetails = null;
    this._granted = false;
    this._lostError = lostError;
    this._okReason = okReason;
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

    this._call = call;
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
    // Never half-close on our own: a half-closed holder stays, but keeping the request side
    // open lets resign/release still reach the gateway.
    this._call.write(firstRequest);
  }

  /** Aborted as soon as this hold must not (or no longer) be acted on. */
  get signal() {
    return this._abort.signal;
  }

  /** Granted, and nothing since says otherwise. */
  get isHolding() {
    return this._granted && !this.lost;
  }

  /** Whether the stream has ended. */
  get done() {
    return this._done;
  }

  /** Throws the subclass's loss error unless the hold is current. */
  check() {
    if (!this.isHolding) throw new this._lostError(this.lostReason ?? 'not granted (yet)');
  }

  /** Resolves with the position once queued; rejects with the loss error if the stream ended
   *  first (e.g. a refused request), with a TimeoutError after `timeoutMs`. */
  async waitQueued({ timeoutMs } = {}) {
    await this._waitFor(() => this.queued, timeoutMs, 'queued', true);
    return this.position;
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
        if (this.lost) return settle(() => reject(new this._lostError(this.lostReason ?? 'stream ended')));
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

  /** Gives the hold up in-stream and waits until the gateway deleted the znode (the stream then
   *  ends OK). Falls back to cancelling the stream after `timeoutMs`. */
  async _leave(timeoutMs) {
    this._closing = true;
    if (this._done) return;
    this._call.write(this._leaveMessage());
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

  /** Gives the hold up if still open, then closes the request side. */
  async close() {
    try {
      await this._leave(5000);
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
    if (this.lost || this._done) return; // too late: the hold was already given up
    this._heard();
    switch (response.event) {
      case 'queued':
        this.lease = response.queued.lease;
        this.position = Number(response.queued.position ?? 0);
        this.queued = true;
        this._emitEvent('queued', { lease: this.lease, position: this.position });
        break;
      case 'suspended': {
        const stopWithinMs = durationMs(response.suspended.stopWithin) ?? 0;
        const announce = () => this._emitEvent('suspended', { stopWithinMs });
        if (this.isHolding) {
          this._lose(
            'suspended: the gateway lost its ZooKeeper connection ' +
              `(someone else may be granted it after ${(stopWithinMs / 1000).toFixed(3)} s)`,
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
      case 'heartbeat':
        this._emitEvent('heartbeat', {});
        break;
      default: {
        // The subclass's messages; an event nobody knows still counts as hearing from the gateway.
        const grant = this._onMessage(response.event, response);
        if (grant) {
          this.silenceLimitMs = durationMs(grant.silenceLimit) ?? null;
          this._granted = true;
          this._armWatchdog();
          this._emitEvent(response.event, { ...grant.fields, silenceLimitMs: this.silenceLimitMs });
        }
        break;
      }
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
      if (!this.isHolding) return;
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

  /** The hold is over or untrustworthy: record it and cancel the stream if asked (giving the
   *  znode up) before any application code runs; then `announce()` the event that caused it,
   *  and the loss itself. */
  _lose(reason, { cancel = false, announce } = {}) {
    if (this.lost) return;
    this._disarmWatchdog();
    const wasHolding = this._granted;
    const requested = this._closing;
    this.lost = true;
    this.lostReason = reason;
    if (cancel) this._call.cancel();
    this._abort.abort(new this._lostError(reason)); // EventTarget: listener errors do not reach us
    this._notify();
    announce?.();
    this._emitEvent('lost', { reason, wasLeader: wasHolding, wasHolding, requested });
    if (wasHolding && !requested && this._onLost) userCode(() => this._onLost(reason));
  }

  _maybeFinish() {
    if (this._done || !this._status || !this._readEnded) return;
    const { code, details } = this._status;
    this.endCode = code;
    this.endDetails = details ?? '';
    this._lose(code === Status.OK ? this._okReason : `stream ended ${statusName(code)}: ${this.endDetails}`);
    this._done = true;
    if (!this._call.writableEnded) this._call.end();
    this._emitEvent('end', { code, details: this.endDetails });
    for (const q of this._iterators) q.end();
    this._iterators.clear();
    for (const w of this._doneWaiters.splice(0)) w();
    this._notify();
    this._finished?.();
  }
}

// `await using h = client.campaign(...)` where the runtime has explicit resource management.
if (Symbol.asyncDispose) {
  HolderStream.prototype[Symbol.asyncDispose] = function dispose() {
    return this.close();
  };
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
export class Campaign extends HolderStream {
  constructor(stub, election, candidate, value, { onLost } = {}) {
    super(stub.Campaign(), { join: { election, candidate, value: toBytes(value) } }, {
      onLost,
      lostError: LeadershipLost,
      okReason: 'resigned',
    });
    this.election = election;
    this.candidate = candidate;
    this.leader = null;
    this._stub = stub;
  }

  /** Whether `elected` arrived (see `isLeader` for "and still leads"). */
  get elected() {
    return this._granted;
  }

  /** Elected, and nothing since says otherwise. */
  get isLeader() {
    return this.isHolding;
  }

  /** This leader's fencing token (a BigInt): pass it to services that fence writes. */
  get fencingToken() {
    return this.leader ? this.leader.fencingToken : null;
  }

  /** Resolves with the Leader once this campaign leads; rejects with LeadershipLost if it ended
   *  first, with a TimeoutError after `timeoutMs` (the campaign goes on: close() to give up). */
  async waitElected({ timeoutMs } = {}) {
    await this._waitFor(() => this.elected, timeoutMs, 'elected', false);
    return this.leader;
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
    await this._leave(timeoutMs);
  }

  _leaveMessage() {
    return { resign: {} };
  }

  _onMessage(kind, response) {
    if (kind === 'elected') {
      const e = response.elected;
      this.leader = toLeader(e.leader);
      return { silenceLimit: e.silenceLimit, fields: { leader: this.leader, fencingToken: this.leader.fencingToken } };
    }
    if (kind === 'proclaimed') {
      this.leader = toLeader(response.proclaimed.leader);
      this._emitEvent('proclaimed', { leader: this.leader });
    }
    return null;
  }
}

/** This lock request does not (or no longer) hold the lock; `reason` says why. */
export class LockLost extends Error {
  constructor(reason) {
    super(reason);
    this.name = 'LockLost';
    this.reason = reason;
  }
}

/** `waitTimeoutMs` ran out (0: the lock was taken): the gateway withdrew the request. */
export class NotAcquired extends LockLost {
  constructor(reason) {
    super(reason);
    this.name = 'NotAcquired';
  }
}

function durationOf(ms) {
  if (ms == null) return undefined;
  const whole = Math.floor(ms / 1000);
  return { seconds: String(whole), nanos: Math.round((ms - whole * 1000) * 1e6) };
}

const LOCK_MODES = { write: 'LOCK_MODE_WRITE', read: 'LOCK_MODE_READ' };

/**
 * One request for `permits` of lock `name` (1: a mutex; N: a semaphore), made with
 * `Client.acquire`; released by `release()`/`cancel()`/`close()`. The same loss rules as a
 * Campaign: `signal` is aborted (reason: a LockLost) on stream end, on `suspended` while held,
 * and after `silence_limit` without a message while held; the stream is then cancelled so the
 * next waiter gets the lock. With `ttlMs`, `keep_alive` is sent every `ttlMs / 3`.
 *
 * State: `lease` (secret), `position`, `fencingToken` (BigInt, once acquired), `acquired`,
 * `isHeld`, `silenceLimitMs`, `lost`, `lostReason`, `endCode`, `endDetails`. Events as for a
 * Campaign, with `acquired` {fencingToken, silenceLimitMs} in place of `elected`.
 */
export class LockHold extends HolderStream {
  constructor(stub, name, { owner, permits = 1, mode = 'write', waitTimeoutMs, ttlMs, onLost } = {}) {
    if (!(mode in LOCK_MODES)) throw new TypeError(`mode must be 'write' or 'read', not ${mode}`);
    super(
      stub.Acquire(),
      {
        acquire: {
          name,
          owner: owner ?? '',
          permits,
          mode: LOCK_MODES[mode],
          waitTimeout: durationOf(waitTimeoutMs),
          ttl: durationOf(ttlMs),
        },
      },
      { onLost, lostError: LockLost, okReason: 'released' },
    );
    this.name = name;
    this.fencingToken = null;
    if (ttlMs != null) {
      const timer = setInterval(() => {
        if (!this._done && !this._call.writableEnded) this._call.write({ keepAlive: {} });
      }, ttlMs / 3);
      this._finished = () => clearInterval(timer);
    }
  }

  /** Whether `acquired` arrived (see `isHeld` for "and still held"). */
  get acquired() {
    return this._granted;
  }

  /** Acquired, and nothing since says otherwise. */
  get isHeld() {
    return this.isHolding;
  }

  /** Resolves with the fencing token once held. Rejects with NotAcquired when `waitTimeoutMs` ran
   *  out, LockLost if the stream ended otherwise, a TimeoutError after `timeoutMs`. */
  async waitAcquired({ timeoutMs } = {}) {
    try {
      await this._waitFor(() => this.acquired, timeoutMs, 'acquired', false);
    } catch (e) {
      if (e instanceof LockLost && this.endCode === Status.DEADLINE_EXCEEDED) throw new NotAcquired(e.reason);
      throw e;
    }
    return this.fencingToken;
  }

  /** Releases (or withdraws) in-stream and waits until the gateway deleted the znode (the stream
   *  then ends OK). Falls back to cancelling the stream after `timeoutMs`. */
  async release({ timeoutMs = 5000 } = {}) {
    await this._leave(timeoutMs);
  }

  _leaveMessage() {
    return { release: {} };
  }

  _onMessage(kind, response) {
    if (kind !== 'acquired') return null;
    this.fencingToken = BigInt(response.acquired.fencingToken ?? 0);
    return { silenceLimit: response.acquired.silenceLimit, fields: { fencingToken: this.fencingToken } };
  }
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
    /** The grpc-js `zkgate.v1.Lock` client (same channel options). */
    this.lockStub = new pkg.Lock(target, credentials ?? grpc.credentials.createInsecure(), channelOptions);
  }

  /**
   * Asks for `permits` (default 1) of lock `name` as `owner`; returns the LockHold at once.
   * Options: `mode` ('write' | 'read'), `waitTimeoutMs` (0: try once; unset: wait), `ttlMs`
   * (keep-alives are then sent by the helper), `onLost`.
   */
  acquire(name, options = {}) {
    return new LockHold(this.lockStub, name, options);
  }

  /** Acquires and resolves with the LockHold once held; on failure closes it and rejects
   *  (NotAcquired for a try-lock on a taken lock). `release()` it when done. */
  async lock(name, { timeoutMs, ...options } = {}) {
    const h = this.acquire(name, options);
    try {
      await h.waitAcquired({ timeoutMs });
      return h;
    } catch (e) {
      await h.close();
      throw e;
    }
  }

  /** The lock's holders ({owner, fencingToken (BigInt), since, mode}; no leases) and waiters. */
  async holders(name, { timeoutMs = 10000 } = {}) {
    const r = await unary(this.lockStub, 'Holders', { name }, timeoutMs);
    return {
      holders: (r.holders ?? []).map((h) => ({
        owner: h.owner ?? '',
        fencingToken: BigInt(h.fencingToken ?? 0),
        since: timestampDate(h.since),
        mode: h.mode ?? 'LOCK_MODE_WRITE',
      })),
      waiting: Number(r.waiting ?? 0),
    };
  }

  /** Releases the hold (or withdraws the request) named by `lease`, from any gateway. */
  async releaseLock(lease, { timeoutMs = 10000 } = {}) {
    await unary(this.lockStub, 'Release', { lease }, timeoutMs);
  }

  /** Is `fencingToken` a current holder's of lock `name`? */
  async validateLock(name, fencingToken, { timeoutMs = 10000 } = {}) {
    const r = await unary(this.lockStub, 'Validate', { name, fencingToken: String(fencingToken) }, timeoutMs);
    return Boolean(r.current);
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
    this.lockStub.close();
  }
}

/** Shorthand for `new Client(target, options)`. */
export function connect(target, options) {
  return new Client(target, options);
}

export { grpc, Status };
