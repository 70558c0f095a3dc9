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
// * the lease runs out (`silence`). With a gateway that answers pings (`queued.answers_pings`)
//   the lease is anchored on this process's clock: the join is ping 1, the helper sends numbered
//   pings (waiters every third of `queued.silence_limit`, a leader at once when elected and then
//   every quarter of its `silence_limit`), and the deadline is the moment it *sent* the newest
//   ping the gateway answered (or the grant named) + `silence_limit` — a late answer cannot
//   stretch it (PingLease). With an older gateway: nothing at all arrives for `silence_limit`
//   after `elected` (it sends a heartbeat at least every `silence_limit / 3`, so silence means a
//   frozen or unreachable gateway, which may already have lost the znode).
//
// In each case the campaign's `signal` is aborted and the stream is cancelled, which releases the
// znode so that the next candidate can be elected: like Curator's LeaderSelector (and the Python
// helper in clients/python), the helper gives leadership up rather than waiting for a suspension
// to resolve, and never considers itself leader again afterwards. Campaign again to rejoin.
//
// Every call goes through a fleet of gateways (clients/CONFORMANCE.md): a list of endpoints (from
// code or `ZKGATE_ENDPOINT`), tried in order, moving to the next one on UNAVAILABLE or a transport
// failure after a full-jitter backoff. A `Standby` (auto-requeue) campaigns or acquires again after
// every loss, on the next endpoint when the gateway drained, died or went silent.
//
// The protos ship inside the package (proto/, a copy of the repository's; a test keeps them equal)
// and are loaded at run time (no generated code).

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const { status: Status } = grpc;

/** Where the `zkgate/v1/*.proto` files live: `ZKGATE_PROTO_DIR`, else the package's own proto/. */
export const DEFAULT_PROTO_DIR =
  process.env.ZKGATE_PROTO_DIR || path.resolve(path.dirname(fileURLToPath(import.meta.url)), 'proto');

/** Used when no endpoint is given in code nor in `ZKGATE_ENDPOINT`. */
export const DEFAULT_ENDPOINT = 'http://127.0.0.1:50051';
/** Deadline of unary calls. */
export const DEFAULT_DEADLINE_MS = 5000;

/** How much longer than the call deadline a resign or release by lease may take: the gateway
 *  answers once the holder has been told and its znode is gone, which for a holder that does not
 *  end its stream is its silence_limit plus the gateway's keepalive timeout plus a second (8.5 s
 *  with the gateway's defaults). */
export const BY_LEASE_EXTRA_MS = 10000;

/** The four reasons a hold is lost (CONFORMANCE.md). */
export const Loss = Object.freeze({
  SUSPENDED: 'suspended',
  SILENCE: 'silence',
  UNAVAILABLE: 'unavailable',
  ENDED: 'ended',
});

/**
 * Parses a fleet: an array of endpoints or one comma-separated string; undefined reads
 * `ZKGATE_ENDPOINT`, else `http://127.0.0.1:50051`. Each is `host:port`, `http://host:port` or
 * `https://host:port` (TLS). Returns `[{address, tls}]`.
 */
export function parseEndpoints(endpoints) {
  let list = endpoints ?? (process.env.ZKGATE_ENDPOINT || DEFAULT_ENDPOINT);
  if (typeof list === 'string') list = list.split(',');
  const out = [];
  for (const raw of list) {
    let t = String(raw).trim();
    if (!t) continue;
    let tls = false;
    if (t.startsWith('https://')) {
      t = t.slice(8);
      tls = true;
    } else if (t.startsWith('http://')) {
      t = t.slice(7);
    } else if (t.includes('://')) {
      throw new TypeError(`endpoint ${raw}: only http:// and https:// are understood`);
    }
    t = t.replace(/\/+$/, '');
    if (!t.includes(':')) throw new TypeError(`endpoint ${raw} is not host:port`);
    out.push({ address: t, tls });
  }
  if (out.length === 0) throw new TypeError('no gateway endpoint given');
  return out;
}

/** Full-jitter exponential backoff: the n-th wait is uniform in [0, min(cap, base * 2^n)] ms. */
export class Backoff {
  constructor(baseMs = 50, capMs = 2000) {
    this.baseMs = baseMs;
    this.capMs = capMs;
    this.attempt = 0;
  }

  next() {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 32);
    return Math.random() * ceiling;
  }

  reset() {
    this.attempt = 0;
  }
}

/** Statuses after which a Standby stops instead of trying again: the request itself is wrong. */
const FATAL = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.FAILED_PRECONDITION,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.UNIMPLEMENTED,
  grpc.status.NOT_FOUND,
  grpc.status.DEADLINE_EXCEEDED,
]);

function lossForStatus(code) {
  return code === grpc.status.UNAVAILABLE ? Loss.UNAVAILABLE : Loss.ENDED;
}

const sleepMs = (ms, signal) =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

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

  /**
   * Pushes a state: it takes the place of a waiting (not yet taken) state with the same `key`,
   * else goes last. Observers deliver states, not a log (as the gateway's own Observe): one the
   * application reads late gives the newest, and what waits stays bounded by what is observed
   * (one election, or one state per election) however long nobody reads. `data` events keep
   * flowing either way, so an unread observer holds up nothing on its connection.
   */
  pushState(value, key) {
    if (!this.closed && this.waiters.length === 0) {
      const i = this.items.findIndex((it) => !it.done && !it.error && it.key === key);
      if (i >= 0) {
        this.items[i] = { value, done: false, key };
        return;
      }
    }
    this._put({ value, done: false, key });
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
  return item.error ? Promise.reject(item.error) : Promise.resolve({ value: item.value, done: item.done });
}

/** Pings remembered while unanswered. Waiters' pings are never answered (only the grant names
 *  one), so the oldest are forgotten: one that old could only anchor a lease already over. */
const REMEMBERED_PINGS = 64;

/**
 * A holder's lease on its own clock (contract G3b, the proto's `Ping`; clients/CONFORMANCE.md
 * "The lease on the holder's own clock"): the pure rule a HolderStream follows with a gateway
 * that answers pings. The holder numbers its pings and remembers when it sent each (on
 * `HolderStream.clock`, ms); the gateway answers one only while its ZooKeeper session vouches
 * for the hold at least `silence_limit` past the moment it read it, and a grant carries the
 * newest ping it had read. So the deadline is the *send* time of the newest answered ping +
 * `silence_limit`: however late an answer arrives, it cannot move the deadline past what the
 * real one allowed (a watchdog restarted by every message heard can be stretched by a slow
 * link beside a successor). Not part of the typed API; exported for the tests.
 */
export class PingLease {
  /** A stream whose first message (the join or acquire, `ping_seq: 1`) was sent at `firstSent`. */
  constructor(firstSent) {
    /** [seq, when sent], oldest first. */
    this._sent = [[1, firstSent]];
    this._lastSeq = 1;
    /** The grant's silence limit (ms), once granted. */
    this.limitMs = null;
    /** The deadline (ms on the same clock), once granted and anchored; null otherwise. */
    this.until = null;
  }

  /** The number of the next ping, sent at `now`. */
  ping(now) {
    this._lastSeq += 1;
    if (this._sent.length >= REMEMBERED_PINGS) this._sent.shift();
    this._sent.push([this._lastSeq, now]);
    return this._lastSeq;
  }

  /** When ping `seq` was sent (undefined if unknown or forgotten), forgetting it and every older
   *  one (answers come in order). */
  _take(seq) {
    const found = this._sent.find(([s]) => s === seq);
    while (this._sent.length > 0 && this._sent[0][0] <= seq) this._sent.shift();
    return found?.[1];
  }

  /** The grant: `pingSeq` was the newest ping the gateway had read, `limitMs` its silence limit.
   *  The deadline it gives; null when the grant names no ping this stream sent (0, unknown,
   *  forgotten) or carries no limit: nothing anchors the hold, which is then lost at once. */
  granted(limitMs, pingSeq) {
    this.limitMs = limitMs ?? null;
    const at = this._take(pingSeq);
    this.until = at != null && this.limitMs != null ? at + this.limitMs : null;
    return this.until;
  }

  /** `heartbeat{seq}`: the deadline, moved on if the answer is to a ping sent later than the one
   *  that set it. Unsolicited (0), unknown or older answers move nothing. */
  answered(seq) {
    if (seq > 0) {
      const at = this._take(seq);
      if (at != null && this.limitMs != null) {
        this.until = this.until == null ? at + this.limitMs : Math.max(this.until, at + this.limitMs);
      }
    }
    return this.until;
  }
}

/** A uint64 field as loaded (a decimal string, `longs: String`; undefined when unset) as a
 *  Number: ping numbers stay far below 2^53. */
function seqOf(v) {
  return v == null ? 0 : Number(v);
}

/**
 * What a Campaign and a LockHold share: one holder stream (`queued` first, then a grant —
 * `elected` / `acquired` — carrying `silence_limit`, then `suspended`/`resumed`/`heartbeat`
 * until the end), read with the watchdog, and given up (stream cancelled, `signal` aborted) as
 * soon as the hold can no longer be trusted. Subclasses say what the grant carries
 * (`_onMessage`) and which message gives the hold up (`_leaveMessage`).
 */
export class HolderStream extends EventEmitter {
  /** The monotonic clock (ms) the silence watchdog's deadline is judged by and pings' send times
   *  are read on; tests move it. */
  static clock = () => performance.now();

  constructor(client, openCall, firstRequest, { onLost, lostError, okReason, start, lossHook, grantHook }) {
    super();
    this.lease = null;
    this.position = null;
    this.silenceLimitMs = null;
    this.queued = false;
    this.lost = false;
    this.lostReason = null;
    /** One of `Loss`: `suspended`, `silence`, `unavailable`, `ended`. */
    this.loss = null;
    this.endCode = null;
    this.endDetails = null;
    this._granted = false;
    this._lostError = lostError;
    this._okReason = okReason;
    this._onLost = onLost;
    this._lossHook = lossHook;
    this._grantHook = grantHook;
    this._client = client;
    this._openCall = openCall;
    this._firstRequest = firstRequest;
    /** Index in `client.endpoints` of the gateway this stream is on. */
    this.endpointIndex = (start ?? client.current) % client.endpoints.length;
    this._tries = 1;
    this._backoff = new Backoff();
    this._retryTimer = null;
    this._closing = false;
    /** A `suspended` heard while queued and not followed by `resumed` (carried into a grant). */
    this._suspendedQueued = false;
    this._done = false;
    this._status = null;
    this._readEnded = false;
    this._watchdog = null;
    /** When silence becomes loss (`HolderStream.clock`), while the watchdog runs: with a gateway
     *  that answers pings, the send of the newest answered ping + `silence_limit`; with an older
     *  one, the last message heard + `silence_limit`. */
    this._silenceDeadline = null;
    /** When this stream's first message (ping 1) was sent, on `HolderStream.clock`. */
    this._firstSent = null;
    /** With a gateway whose `queued` said `answers_pings`: the PingLease; else null. */
    this._pings = null;
    /** The ping timer (setInterval), while pinging. */
    this._pinger = null;
    this._iterators = new Set();
    this._abort = new AbortController();
    this._doneWaiters = [];
    this._stateWatchers = new Set();

    this._startCall();
  }

  /** The gateway this stream is on (`http://host:port`). */
  get endpoint() {
    const ep = this._client.endpoints[this.endpointIndex];
    return `${ep.tls ? 'https' : 'http'}://${ep.address}`;
  }

  /** Opens the stream on `endpointIndex`. Until `queued` arrives, UNAVAILABLE (a refused
   *  connection, a draining gateway) opens it again on the next endpoint after a backoff, once
   *  per endpoint; after `queued` the stream stays where it is and its loss is final. */
  _startCall() {
    // Ping 1 is the first message: its send time is read before the stream opens (earlier is
    // safe, it only shortens the lease).
    this._firstSent = HolderStream.clock();
    const call = this._openCall(this.endpointIndex);
    this._call = call;
    const mine = () => this._call === call;
    call.on('data', (response) => mine() && this._handle(response));
    call.on('error', () => {}); // the status event below carries the same information
    call.on('end', () => {
      if (!mine()) return;
      this._readEnded = true;
      this._maybeFinish();
    });
    call.on('status', (status) => {
      if (!mine()) return;
      if (
        status.code === Status.UNAVAILABLE &&
        !this.queued &&
        !this._closing &&
        this._tries < this._client.endpoints.length
      ) {
        this._tries += 1;
        this.endpointIndex = this._client._movedOn(this.endpointIndex);
        this._retryTimer = setTimeout(() => {
          this._retryTimer = null;
          if (!this._closing) this._startCall();
          else this._finishWith(status);
        }, this._backoff.next());
        return;
      }
      this._finishWith(status);
    });
    // Never half-close on our own: a half-closed holder stays, but keeping the request side
    // open lets resign/release still reach the gateway.
    call.write(this._firstRequest);
  }

  _finishWith(status) {
    this._status = status;
    // 'end' follows once every message received before the status has been handled; should it
    // not come, finish anyway.
    setTimeout(() => {
      this._readEnded = true;
      this._maybeFinish();
    }, 1000).unref();
    this._maybeFinish();
  }

  /** Resolves once `pred()` holds or the hold is lost. */
  _until(pred) {
    return new Promise((resolve) => {
      const check = () => {
        if (!pred() && !this.lost) return false;
        this._stateWatchers.delete(check);
        resolve();
        return true;
      };
      if (!check()) this._stateWatchers.add(check);
    });
  }

  /** Aborted as soon as this hold must not (or no longer) be acted on. */
  get signal() {
    return this._abort.signal;
  }

  /** Granted, and nothing since says otherwise — including the clock: past the silence
   *  watchdog's deadline it is false, even before the watchdog has run (the event loop may run
   *  other callbacks first after a freeze); the watchdog then reports the loss, by silence. */
  get isHolding() {
    return this._held && !(this._watchdog && HolderStream.clock() >= this._silenceDeadline);
  }

  /** Granted and no loss decided: what the stream's own rules ask. */
  get _held() {
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
    if (this._retryTimer) {
      clearTimeout(this._retryTimer);
      this._retryTimer = null;
      this._finishWith({ code: Status.CANCELLED, details: 'Cancelled on client' });
    }
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
    if (!this._heard()) return; // heard after the deadline: lost by silence
    switch (response.event) {
      case 'queued':
        this.lease = response.queued.lease;
        this.position = Number(response.queued.position ?? 0);
        this.queued = true;
        this._client.current = this.endpointIndex;
        if (response.queued.answersPings && !this._pings) {
          // The lease is anchored on this process's clock (CONFORMANCE.md): a waiter pings every
          // third of the limit a grant would carry, so that its grant names a recent ping.
          this._pings = new PingLease(this._firstSent);
          const limit = durationMs(response.queued.silenceLimit);
          if (limit > 0) this._pingEvery(limit / 3);
        }
        this._emitEvent('queued', { lease: this.lease, position: this.position });
        break;
      case 'suspended': {
        const stopWithinMs = durationMs(response.suspended.stopWithin) ?? 0;
        const endRequested = response.suspended.reason === 'SUSPEND_REASON_END_REQUESTED';
        const announce = () => this._emitEvent('suspended', { stopWithinMs, endRequested });
        if (this._held && endRequested) {
          // A Resign/Release with this hold's lease (contract G3c): told before anyone else can
          // be granted it, and the znode stays until we end the stream. Over, as an OK end says
          // (`resigned`/`released`, loss `ended`); then ended in-stream, so it ends OK.
          this._lose(this._okReason, { announce, loss: Loss.ENDED });
          if (!this._call.writableEnded) this._call.write(this._leaveMessage());
        } else if (this._held) {
          this._lose(
            'suspended: the gateway lost its ZooKeeper connection ' +
              `(someone else may be granted it after ${(stopWithinMs / 1000).toFixed(3)} s)`,
            { cancel: true, announce, loss: Loss.SUSPENDED },
          );
        } else {
          // Carried into a later grant until `resumed` (CONFORMANCE.md).
          this._suspendedQueued = true;
          announce();
        }
        break;
      }
      case 'resumed':
        this._suspendedQueued = false;
        this._emitEvent('resumed', {});
        break;
      case 'heartbeat': {
        const seq = seqOf(response.heartbeat.seq);
        // With pings only an answer moves the deadline (`_heard` moved it for an older gateway).
        if (this._pings && this._watchdog) {
          const until = this._pings.answered(seq);
          if (until != null && until > this._silenceDeadline) this._watchUntil(until);
        }
        this._emitEvent('heartbeat', { seq });
        break;
      }
      default: {
        // The subclass's messages; an event nobody knows still counts as hearing from the gateway
        // (for an older gateway's watchdog, in `_heard`).
        const grant = this._onMessage(response.event, response);
        if (grant) {
          this.silenceLimitMs = durationMs(grant.silenceLimit) ?? null;
          this._granted = true;
          // With pings: the deadline is the send of the ping the grant names + its limit. A grant
          // that names no ping this stream sent, or whose lease ran out on its way (a link slower
          // than the limit allows), is recorded and lost at once (below).
          let expired = null;
          if (!this._pings) this._armWatchdog();
          else if (!this._suspendedQueued) expired = this._anchor(seqOf(grant.pingSeq));
          // Synchronously, so that it comes before any loss this stream reports.
          if (this._grantHook) userCode(() => this._grantHook(this));
          this._emitEvent(response.event, { ...grant.fields, silenceLimitMs: this.silenceLimitMs });
          if (this._suspendedQueued) {
            // Granted while the gateway's link is still suspended (no `resumed` since the
            // `suspended` heard while queued): uncertain from its first moment, so it is lost
            // as it is granted, in the same step.
            this._lose(
              'suspended: the gateway granted the hold while its ZooKeeper connection was suspended (no resumed since)',
              { cancel: true, loss: Loss.SUSPENDED },
            );
          } else if (expired) {
            this._lose(expired, { cancel: true, loss: Loss.SILENCE });
          }
        }
        break;
      }
    }
    this._notify();
  }

  _notify() {
    for (const check of [...this._stateWatchers]) check();
  }

  /** With a gateway that does not answer pings, anything at all from it restarts the silence
   *  clock — unless it ran out first (with pings, only `_anchor` and answers move it, but the
   *  rule on a late message is the same). A process frozen (SIGSTOP, a stalled VM) or blocked past its deadline finds, when it runs
   *  again, both its timer due and messages that waited in its socket meanwhile (heartbeats sent
   *  before its gateway froze too, say), and the event loop may read them first. Heard late they
   *  say nothing about now: the silence came first and is final (G3b; found by a probe that froze
   *  a holder, then its gateway, and saw the thawed holder hold on for another silence limit
   *  beside its successor). Returns false when the hold was lost so. */
  _heard() {
    if (!this._watchdog) return true;
    const now = HolderStream.clock();
    if (now >= this._silenceDeadline) {
      this._disarmWatchdog();
      this._silenced(this.silenceLimitMs);
      return false;
    }
    if (!this._pings) {
      this._watchdog.refresh();
      this._silenceDeadline = now + this.silenceLimitMs;
    }
    return true;
  }

  /** The grant, with pings: arms the watchdog at the send of ping `pingSeq` + the limit, then
   *  pings at once and every quarter of the limit. Returns null, or the loss reason when nothing
   *  anchors the hold (no such ping, no limit) or its deadline has already passed. */
  _anchor(pingSeq) {
    this._stopPinging();
    const limit = this.silenceLimitMs;
    const until = this._pings.granted(limit, pingSeq);
    const now = HolderStream.clock();
    if (until == null) {
      return (
        `nothing anchors the lease: the grant names ping ${pingSeq}, which this stream did not ` +
        'send (or forgot), or carries no silence limit'
      );
    }
    if (until <= now) {
      return (
        `the grant arrived after its lease ran out: ping ${pingSeq} was sent ` +
        `${((now - until + limit) / 1000).toFixed(3)} s ago, longer than the silence limit ` +
        `(${(limit / 1000).toFixed(3)} s)`
      );
    }
    this._watchUntil(until);
    this._ping();
    this._pingEvery(limit / 4);
    return null;
  }

  /** Sends the next ping, recording its send time. A full send buffer (the gateway stopped
   *  reading) skips it: the lease then runs out by itself. */
  _ping() {
    if (!this._pings || this.lost || this._done) return;
    const seq = this._pings.ping(HolderStream.clock());
    const call = this._call;
    if (call.writableEnded || call.writableNeedDrain) return;
    call.write({ ping: { seq: String(seq) } });
  }

  _pingEvery(ms) {
    this._stopPinging();
    this._pinger = setInterval(() => this._ping(), Math.max(1, ms));
  }

  _stopPinging() {
    if (this._pinger) clearInterval(this._pinger);
    this._pinger = null;
  }

  /** (Re)arms the watchdog to fire at `until` (on `HolderStream.clock`). */
  _watchUntil(until) {
    this._disarmWatchdog();
    const limit = this.silenceLimitMs;
    this._silenceDeadline = until;
    this._watchdog = setTimeout(
      () => {
        this._watchdog = null;
        this._silenced(limit);
      },
      Math.max(0, until - HolderStream.clock()),
    );
  }

  _armWatchdog() {
    if (this._watchdog || !(this.silenceLimitMs > 0)) return;
    const limit = this.silenceLimitMs;
    this._silenceDeadline = HolderStream.clock() + limit;
    this._watchdog = setTimeout(() => {
      this._watchdog = null;
      this._silenced(limit);
    }, limit);
  }

  _silenced(limit) {
    if (!this._held) return;
    const what = this._pings ? 'no ping answered by the gateway within' : 'no message from the gateway for';
    this._lose(`${what} the silence limit (${(limit / 1000).toFixed(3)} s): it may be frozen or cut off`, {
      cancel: true,
      loss: Loss.SILENCE,
    });
  }

  _disarmWatchdog() {
    if (this._watchdog) clearTimeout(this._watchdog);
    this._watchdog = null;
  }

  /** The hold is over or untrustworthy: record it and cancel the stream if asked (giving the
   *  znode up) before any application code runs; then `announce()` the event that caused it,
   *  and the loss itself. */
  _lose(reason, { cancel = false, announce, loss = Loss.ENDED } = {}) {
    if (this.lost) return;
    this._disarmWatchdog();
    this._stopPinging();
    const wasHolding = this._granted;
    const requested = this._closing;
    this.lost = true;
    this.lostReason = reason;
    this.loss = loss;
    if (cancel) this._call.cancel();
    this._abort.abort(new this._lostError(reason)); // EventTarget: listener errors do not reach us
    this._notify();
    announce?.();
    this._emitEvent('lost', { reason, loss, wasLeader: wasHolding, wasHolding, requested });
    if (wasHolding && !requested) {
      if (this._lossHook) userCode(() => this._lossHook(this));
      if (this._onLost) userCode(() => this._onLost(reason));
    }
  }

  _maybeFinish() {
    if (this._done || !this._status || !this._readEnded) return;
    const { code, details } = this._status;
    this.endCode = code;
    this.endDetails = details ?? '';
    this._lose(code === Status.OK ? this._okReason : `stream ended ${statusName(code)}: ${this.endDetails}`, {
      loss: lossForStatus(code),
    });
    this._done = true;
    this._stopPinging();
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
 * `heartbeat` {seq} (the ping it answers; 0: unsolicited), `lost` {reason, wasLeader, requested},
 * `end` {code, details}.
 * The same events, each as `{type, ...}`, come out of `for await (const ev of campaign)`: `lost`
 * once, and `end` last, after which the iteration finishes. An iterator sees the events from its
 * creation on (iterate right after `campaign()` to see them all).
 * Messages that arrive after leadership was declared lost are ignored.
 *
 * `onLost(reason)` (an option of `campaign`) is called when leadership ends other than by this
 * object's own `resign()`/`cancel()`/`close()`.
 */
export class Campaign extends HolderStream {
  constructor(client, election, candidate, value, { onLost, start, lossHook, grantHook } = {}) {
    super(
      client,
      (index) => client._stubs(index).election.Campaign(),
      // The join is ping 1 (PingLease).
      { join: { election, candidate, value: toBytes(value), pingSeq: '1' } },
      { onLost, lostError: LeadershipLost, okReason: 'resigned', start, lossHook, grantHook },
    );
    this.election = election;
    this.candidate = candidate;
    this.leader = null;
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
  async proclaim(value, { timeoutMs } = {}) {
    if (this.lease == null) await this.waitQueued({ timeoutMs });
    const response = await this._client._unary('election', 'Proclaim', { lease: this.lease, value: toBytes(value) }, timeoutMs);
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
      return {
        silenceLimit: e.silenceLimit,
        pingSeq: e.pingSeq,
        fields: { leader: this.leader, fencingToken: this.leader.fencingToken },
      };
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
  constructor(
    client,
    name,
    { owner, permits = 1, mode = 'write', waitTimeoutMs, ttlMs, onLost, start, lossHook, grantHook } = {},
  ) {
    if (!(mode in LOCK_MODES)) throw new TypeError(`mode must be 'write' or 'read', not ${mode}`);
    super(
      client,
      (index) => client._stubs(index).lock.Acquire(),
      {
        acquire: {
          name,
          owner: owner ?? '',
          permits,
          mode: LOCK_MODES[mode],
          waitTimeout: durationOf(waitTimeoutMs),
          ttl: durationOf(ttlMs),
          // The acquire is ping 1 (PingLease).
          pingSeq: '1',
        },
      },
      { onLost, lostError: LockLost, okReason: 'released', start, lossHook, grantHook },
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
    return {
      silenceLimit: response.acquired.silenceLimit,
      pingSeq: response.acquired.pingSeq,
      fields: { fencingToken: this.fencingToken },
    };
  }
}

function unary(stub, method, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const options = timeoutMs != null ? { deadline: new Date(Date.now() + timeoutMs) } : {};
    stub[method](request, options, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

/** The environment variable of the bearer token, used when no token is given in code. */
export const TOKEN_ENV = 'ZKGATE_TOKEN';

/**
 * The bearer token: `token`, else the content of `tokenFile` (trimmed; an empty file is an
 * error), else `ZKGATE_TOKEN`, else none.
 */
export function resolveToken(token, tokenFile) {
  if (token != null && String(token).trim() !== '') return String(token).trim();
  if (tokenFile != null) {
    const text = readFileSync(tokenFile, 'utf8').trim();
    if (text === '') throw new TypeError(`token file ${tokenFile}: the file is empty`);
    return text;
  }
  const env = (process.env[TOKEN_ENV] ?? '').trim();
  return env === '' ? null : env;
}

/** A grpc-js interceptor adding `authorization: Bearer <token>` to every call. */
function bearerInterceptor(token) {
  const value = `Bearer ${token}`;
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set('authorization', value);
        next(metadata, listener);
      },
    });
}

/**
 * A gateway fleet: `new Client('http://10.0.0.1:50051,http://10.0.0.2:50051')`, an array of
 * endpoints, or no argument for `ZKGATE_ENDPOINT` (default `http://127.0.0.1:50051`). Calls start
 * on `current` (the first endpoint until a failover moves it on) and move to the next endpoint on
 * UNAVAILABLE or a transport failure. `close()` when done.
 *
 * Options: `tls` ({ca, cert, key: Buffer | string PEM; serverName}) for `https://` endpoints
 * (`cert` + `key`: mTLS); `credentials` (grpc-js ChannelCredentials for every endpoint, instead
 * of the above); `deadlineMs` (unary calls, default 5000); `channelOptions`; `protoDir`;
 * `token` (a bearer token sent as `authorization: Bearer <token>` on every call and stream, on
 * every endpoint — so also after a failover) or `tokenFile` (read from that file, trimmed);
 * neither: `ZKGATE_TOKEN` when it is set.
 */
export class Client {
  constructor(endpoints, { tls, credentials, channelOptions, protoDir, deadlineMs = DEFAULT_DEADLINE_MS, token, tokenFile } = {}) {
    this._pkg = loadPackage(protoDir);
    /** The fleet: `[{address, tls}]`. */
    this.endpoints = parseEndpoints(endpoints);
    /** Index of the endpoint new calls start on. */
    this.current = 0;
    this.deadlineMs = deadlineMs;
    if (tls && (tls.cert == null) !== (tls.key == null)) {
      throw new TypeError('a client certificate needs its key, and a key its certificate');
    }
    this._tls = tls;
    this._credentials = credentials;
    this._channelOptions = { ...(channelOptions ?? {}) };
    if (tls?.serverName) this._channelOptions['grpc.ssl_target_name_override'] = tls.serverName;
    this._stubCache = new Map();
    const bearer = resolveToken(token, tokenFile);
    this._interceptors = bearer ? [bearerInterceptor(bearer)] : [];
  }

  _creds(ep) {
    if (this._credentials) return this._credentials;
    if (!ep.tls) return grpc.credentials.createInsecure();
    const pem = (v) => (v == null ? null : Buffer.isBuffer(v) ? v : Buffer.from(v));
    const t = this._tls ?? {};
    return grpc.credentials.createSsl(pem(t.ca), pem(t.key), pem(t.cert));
  }

  /** The grpc-js clients of endpoint `index`: `{election, lock}` (one channel). */
  _stubs(index) {
    const i = index % this.endpoints.length;
    let stubs = this._stubCache.get(i);
    if (!stubs) {
      const ep = this.endpoints[i];
      const election = new this._pkg.Election(ep.address, this._creds(ep), {
        ...this._channelOptions,
        interceptors: this._interceptors,
      });
      const lock = new this._pkg.Lock(ep.address, this._creds(ep), {
        ...this._channelOptions,
        interceptors: this._interceptors,
        channelOverride: election.getChannel(),
      });
      stubs = { election, lock };
      this._stubCache.set(i, stubs);
    }
    return stubs;
  }

  /** Endpoint `from` failed: the next one becomes current; returns its index. */
  _movedOn(from) {
    this.current = (from + 1) % this.endpoints.length;
    return this.current;
  }

  /** The grpc-js `zkgate.v1.Election` client of the current endpoint, for the RPCs this helper
   *  does not wrap. */
  get stub() {
    return this._stubs(this.current).election;
  }

  /** The grpc-js `zkgate.v1.Lock` client of the current endpoint. */
  get lockStub() {
    return this._stubs(this.current).lock;
  }

  /** A unary call with failover: one round through the fleet from `current`, moving on (after a
   *  backoff) on UNAVAILABLE; rejects with the last error. */
  async _unary(service, method, request, timeoutMs) {
    const n = this.endpoints.length;
    const backoff = new Backoff();
    const start = this.current;
    for (let i = 0; ; i++) {
      const index = (start + i) % n;
      try {
        const r = await unary(this._stubs(index)[service], method, request, timeoutMs ?? this.deadlineMs);
        this.current = index;
        return r;
      } catch (e) {
        if (e.code !== Status.UNAVAILABLE || i === n - 1) throw e;
        this._movedOn(index);
        await sleepMs(backoff.next());
      }
    }
  }

  /**
   * Asks for `permits` (default 1) of lock `name` as `owner`; returns the LockHold at once.
   * Options: `mode` ('write' | 'read'), `waitTimeoutMs` (0: try once; unset: wait), `ttlMs`
   * (keep-alives are then sent by the helper), `onLost`.
   */
  acquire(name, options = {}) {
    return new LockHold(this, name, options);
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

  /** The lock's holders ({owner, fencingToken (BigInt), since, mode}; no leases), `waiting` and
   *  `total`, following `nextPageToken` through every page (`pageSize` per request). */
  async holders(name, { timeoutMs, pageSize = 0 } = {}) {
    const holders = [];
    let pageToken = '';
    let r;
    do {
      r = await this._unary('lock', 'Holders', { name, pageSize, pageToken }, timeoutMs);
      for (const h of r.holders ?? []) {
        holders.push({
          owner: h.owner ?? '',
          fencingToken: BigInt(h.fencingToken ?? 0),
          since: timestampDate(h.since),
          mode: h.mode ?? 'LOCK_MODE_WRITE',
        });
      }
      pageToken = r.nextPageToken ?? '';
    } while (pageToken);
    return { holders, waiting: Number(r.waiting ?? 0), total: Number(r.total ?? holders.length) };
  }

  /** The election's queue in order ({candidate, value, position, fencingToken, joined, leader})
   *  and `total`, following `nextPageToken` through every page. */
  async candidates(election, { timeoutMs, pageSize = 0 } = {}) {
    const candidates = [];
    let pageToken = '';
    let r;
    do {
      r = await this._unary('election', 'Candidates', { election, pageSize, pageToken }, timeoutMs);
      for (const c of r.candidates ?? []) {
        candidates.push({
          candidate: c.candidate ?? '',
          value: c.value ?? Buffer.alloc(0),
          position: Number(c.position ?? 0),
          fencingToken: BigInt(c.fencingToken ?? 0),
          joined: timestampDate(c.joined),
          leader: Boolean(c.leader),
        });
      }
      pageToken = r.nextPageToken ?? '';
    } while (pageToken);
    return { candidates, total: Number(r.total ?? candidates.length) };
  }

  /** Releases the hold (or withdraws the request) named by `lease`, from any gateway (by
   *  default within the call deadline plus `BY_LEASE_EXTRA_MS`). */
  async releaseLock(lease, { timeoutMs } = {}) {
    await this._unary('lock', 'Release', { lease }, timeoutMs ?? this.deadlineMs + BY_LEASE_EXTRA_MS);
  }

  /** Is `fencingToken` a current holder's of lock `name`? */
  async validateLock(name, fencingToken, { timeoutMs } = {}) {
    const r = await this._unary('lock', 'Validate', { name, fencingToken: String(fencingToken) }, timeoutMs);
    return Boolean(r.current);
  }

  /** Joins `election` as `candidate` with `value` (Buffer or string); returns the Campaign. */
  campaign(election, candidate, value = Buffer.alloc(0), { onLost } = {}) {
    return new Campaign(this, election, candidate, value, { onLost });
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

  /**
   * Stays a candidate in `election` across losses (auto-requeue): a Standby. Options: `onGranted`,
   * `onLost(reason, campaign)`, `onError`, `work`, `requeue` (default true); see Standby.
   */
  standbyCampaign(election, candidate, value = Buffer.alloc(0), options = {}) {
    return new Standby(
      this,
      (start, lossHook, grantHook) => new Campaign(this, election, candidate, value, { start, lossHook, grantHook }),
      options,
    );
  }

  /** Stays queued for lock `name` across losses: a Standby. `lockOptions`: as for `acquire`
   *  (`owner`, `permits`, `mode`, `ttlMs`); `options`: as for `standbyCampaign`. */
  standbyLock(name, lockOptions = {}, options = {}) {
    return new Standby(
      this,
      (start, lossHook, grantHook) => new LockHold(this, name, { ...lockOptions, start, lossHook, grantHook }),
      options,
    );
  }

  /**
   * Runs `work(campaign)` each time elected, campaigning again after every loss; `work` must
   * finish once `campaign.signal` is aborted. Resolves with what `work` returns when it returns
   * while still leading (leadership is then resigned). `options`: as for `standbyCampaign`.
   */
  runWhileLeader(election, candidate, value, work, options = {}) {
    return this.standbyCampaign(election, candidate, value, { ...options, work }).done;
  }

  /** `runWhileLeader` for lock `name`. */
  runWhileHolding(name, lockOptions, work, options = {}) {
    return this.standbyLock(name, lockOptions, { ...options, work }).done;
  }

  /** The election's current leader, or null when nobody leads. */
  async leader(election, { timeoutMs } = {}) {
    try {
      return toLeader((await this._unary('election', 'Leader', { election }, timeoutMs)).leader);
    } catch (e) {
      if (e.code === Status.NOT_FOUND) return null;
      throw e;
    }
  }

  /** Is `fencingToken` the current leader's? Resolves with {current, leader}. */
  async validate(election, fencingToken, { timeoutMs } = {}) {
    const r = await this._unary('election', 'Validate', { election, fencingToken: String(fencingToken) }, timeoutMs);
    return { current: Boolean(r.current), leader: toLeader(r.leader) };
  }

  /** Resigns the candidacy named by `lease`, from any gateway. */
  async resign(lease, { timeoutMs } = {}) {
    await this._unary('election', 'Resign', { lease }, timeoutMs ?? this.deadlineMs + BY_LEASE_EXTRA_MS);
  }

  /**
   * The election's leader (null while vacant) as an async iterator: the current state first,
   * then one value per change (read late: the newest state, one waiting at most; see
   * `AsyncQueue.pushState`). Leaving the loop (break, return, throw) or aborting `signal` ends
   * it. When the stream fails (UNAVAILABLE: the gateway drains or died; ABORTED: it lost its
   * session) it observes again — on the next endpoint after UNAVAILABLE — after a backoff, and
   * never yields a leader with a lower fencing token than one it already yielded. Other errors
   * end the iteration with the error (`code`, `details`).
   */
  observe(election, { signal } = {}) {
    let call = null;
    let index = this.current;
    let highest = -1n;
    let stopped = false;
    const backoff = new Backoff();
    const stop = new AbortController();
    const q = new AsyncQueue(() => {
      stopped = true;
      stop.abort();
      call?.cancel();
    });
    const open = () => {
      if (stopped) return;
      const c = this._stubs(index).election.Observe({ election });
      call = c;
      let ended = false;
      let failure = null;
      c.on('data', (r) => {
        backoff.reset();
        const leader = toLeader(r.leader);
        if (leader) {
          if (leader.fencingToken < highest) return; // older than what was already delivered
          highest = leader.fencingToken;
        }
        q.pushState(leader, 'leader');
      });
      c.on('error', () => {}); // the status event carries the same information
      const finish = async () => {
        if (ended || stopped) return;
        ended = true;
        if (failure && failure.code !== Status.UNAVAILABLE && failure.code !== Status.ABORTED) {
          q.end(failure);
          return;
        }
        if (failure?.code === Status.UNAVAILABLE) index = this._movedOn(index);
        await sleepMs(backoff.next(), stop.signal);
        open();
      };
      c.on('status', (s) => {
        if (s.code !== Status.OK) {
          failure = new Error(`Observe ended ${statusName(s.code)}: ${s.details}`);
          failure.code = s.code;
          failure.details = s.details;
        }
        setTimeout(finish, 1000).unref(); // in case 'end' never comes
      });
      c.on('end', finish); // after every message received before the status
    };
    open();
    if (signal) {
      if (signal.aborted) q.return();
      else signal.addEventListener('abort', () => q.return(), { once: true });
    }
    return q;
  }

  /**
   * Every election whose name starts with `prefix` (elections created later included) plus every
   * name in `elections`, as an async iterator of `{ election, leader }` (leader null while
   * vacant) and, once, `{ snapshotComplete: true }` after the first state of every election.
   * Reconnects like `observe`; per election it never yields a lower fencing token than one it
   * already yielded nor repeats an unchanged state, and an election that led before a reconnect
   * but is missing from the new snapshot is yielded as vacant.
   */
  observeMany(prefix, elections = [], { signal } = {}) {
    let call = null;
    let index = this.current;
    let stopped = false;
    let completed = false;
    const known = new Map(); // election -> { highest: bigint, last: string|null, leads: bool }
    const backoff = new Backoff();
    const stop = new AbortController();
    const q = new AsyncQueue(() => {
      stopped = true;
      stop.abort();
      call?.cancel();
    });
    const key = (l) => (l ? `${l.fencingToken}/${l.candidate}/${l.value.toString('base64')}` : null);
    const open = () => {
      if (stopped) return;
      const c = this._stubs(index).election.ObserveMany({ prefix, elections });
      call = c;
      let ended = false;
      let failure = null;
      let snapshot = new Set(); // elections seen in this stream's snapshot, until it completes
      c.on('data', (r) => {
        backoff.reset();
        if (r.snapshotComplete) {
          for (const [election, k] of known) {
            if (snapshot && k.leads && !snapshot.has(election)) {
              k.leads = false;
              k.last = null;
              q.pushState({ election, leader: null }, `state:${election}`);
            }
          }
          snapshot = null;
          if (!completed) {
            completed = true;
            q.push({ snapshotComplete: true });
          }
          return;
        }
        if (!r.state) return;
        const election = r.state.election;
        const leader = toLeader(r.state.leader);
        const first = snapshot !== null && !snapshot.has(election);
        if (snapshot) snapshot.add(election);
        let k = known.get(election);
        if (!k) known.set(election, (k = { highest: -1n, last: undefined, leads: false }));
        if (leader && leader.fencingToken < k.highest) return; // older than what was delivered
        if (first && k.last === key(leader)) return; // a reconnect repeating the same state
        if (leader) k.highest = leader.fencingToken;
        k.last = key(leader);
        k.leads = leader !== null;
        q.pushState({ election, leader }, `state:${election}`);
      });
      c.on('error', () => {}); // the status event carries the same information
      const finish = async () => {
        if (ended || stopped) return;
        ended = true;
        if (failure && failure.code !== Status.UNAVAILABLE && failure.code !== Status.ABORTED) {
          q.end(failure);
          return;
        }
        if (failure?.code === Status.UNAVAILABLE) index = this._movedOn(index);
        await sleepMs(backoff.next(), stop.signal);
        open();
      };
      c.on('status', (s) => {
        if (s.code !== Status.OK) {
          failure = new Error(`ObserveMany ended ${statusName(s.code)}: ${s.details}`);
          failure.code = s.code;
          failure.details = s.details;
        }
        setTimeout(finish, 1000).unref(); // in case 'end' never comes
      });
      c.on('end', finish);
    };
    open();
    if (signal) {
      if (signal.aborted) q.return();
      else signal.addEventListener('abort', () => q.return(), { once: true });
    }
    return q;
  }

  /** Closes every channel: new calls fail. Close (or cancel) open campaigns and observers first. */
  close() {
    for (const { election, lock } of this._stubCache.values()) {
      election.close();
      lock.close();
    }
    this._stubCache.clear();
  }
}

/**
 * Holds again after every loss (auto-requeue; clients/CONFORMANCE.md): keeps one Campaign or
 * LockHold open at a time (`current`) and, when it ends, opens the next — on the next endpoint
 * after `unavailable` or `silence`, on the same one otherwise — after a full-jitter backoff (50 ms
 * doubling to 2 s, reset once queued). Make one with `client.standbyCampaign` / `standbyLock`.
 *
 * Callbacks: `onGranted(stream)` when elected/acquired; `onLost(reason, stream)` once per lost
 * hold, the moment it is decided (`reason`: suspended | silence | unavailable | ended); `onError(e)`
 * when it stops on a refusal that trying again cannot fix (a bad name, permits that disagree).
 * `work(stream)` (optional, may be async) runs while each hold lasts and must finish once
 * `stream.signal` is aborted; if it finishes while still holding, the hold is given up and the
 * Standby stops. `requeue: false` stops after the first loss.
 *
 * `done` resolves (with `work`'s result) when it stops, or rejects with the error; `holding`
 * says whether a hold is current; `close()` gives it up (resign/release) and stops.
 */
export class Standby extends EventEmitter {
  constructor(client, open, { onGranted, onLost, onError, work, requeue = true } = {}) {
    super();
    this._client = client;
    this._open = open;
    this._onGranted = onGranted;
    this._onLost = onLost;
    this._onError = onError;
    this._work = work;
    this._requeue = requeue;
    this.current = null;
    this.holding = false;
    this.error = null;
    this._stop = new AbortController();
    this.done = this._run();
    this.done.catch(() => {}); // surfaced through onError / error; awaiting `done` rethrows
  }

  _reportGrant(stream) {
    this.holding = true;
    this.emit('granted', stream);
    if (this._onGranted) userCode(() => this._onGranted(stream));
  }

  _reportLoss(stream) {
    this.holding = false;
    this.emit('lost', stream.loss ?? Loss.ENDED, stream);
    if (this._onLost) userCode(() => this._onLost(stream.loss ?? Loss.ENDED, stream));
  }

  async _run() {
    const backoff = new Backoff();
    let index = this._client.current;
    let result;
    try {
      while (!this._stop.signal.aborted) {
        const s = this._open(
          index,
          (st) => this._reportLoss(st),
          (st) => this._reportGrant(st),
        );
        this.current = s;
        await s._until(() => s.queued);
        if (s.queued) backoff.reset();
        await s._until(() => s._granted);
        if (s._granted && !s.lost) {
          if (this._work) {
            result = await this._work(s);
            if (!s.lost) {
              this._stop.abort();
              await s.close();
              break;
            }
          }
        }
        await s._until(() => false);
        const gaveUp = new AbortController();
        await Promise.race([s.waitDone(), sleepMs(5000, gaveUp.signal)]);
        gaveUp.abort(); // clears the timer
        this.holding = false;
        await s.close();
        if (this._stop.signal.aborted) break;
        if (!s._granted && FATAL.has(s.endCode)) {
          const e = new Error(`${statusName(s.endCode)}: ${s.endDetails}`);
          e.code = s.endCode;
          e.details = s.endDetails;
          throw e;
        }
        if (!this._requeue && s._granted) break;
        index = s.loss === Loss.UNAVAILABLE || s.loss === Loss.SILENCE ? this._client._movedOn(s.endpointIndex) : s.endpointIndex;
        await sleepMs(backoff.next(), this._stop.signal);
      }
    } catch (e) {
      this.error = e;
      if (this._onError) userCode(() => this._onError(e));
      throw e;
    } finally {
      this.holding = false;
      this.emit('stopped');
    }
    return result;
  }

  /** Resolves with the stream once a hold is current; rejects if the Standby stops first. */
  waitGranted() {
    if (this.holding) return Promise.resolve(this.current);
    return new Promise((resolve, reject) => {
      const granted = (s) => {
        this.off('stopped', stopped);
        resolve(s);
      };
      const stopped = () => {
        this.off('granted', granted);
        reject(this.error ?? new Error('the standby stopped'));
      };
      this.once('granted', granted);
      this.once('stopped', stopped);
    });
  }

  /** Gives the current hold up (resign/release; a queued request is withdrawn) and stops. */
  async close() {
    this._stop.abort();
    await this.current?.close();
    await this.done.catch(() => {});
  }
}

/** Shorthand for `new Client(endpoints, options)`. */
export function connect(endpoints, options) {
  return new Client(endpoints, options);
}

export { grpc, Status };
