// TypeScript declarations for @zkgate/client (index.js). Checked by `tsc --noEmit` on
// test/types-usage.ts (test/types.test.js), so they follow the code.

import { EventEmitter } from 'node:events';
import type * as grpcJs from '@grpc/grpc-js';

export declare const grpc: typeof grpcJs;
export declare const Status: typeof grpcJs.status;

/** Where the `zkgate/v1/*.proto` files are loaded from: `ZKGATE_PROTO_DIR`, else the package's proto/. */
export declare const DEFAULT_PROTO_DIR: string;
/** Used when no endpoint is given in code nor in `ZKGATE_ENDPOINT`. */
export declare const DEFAULT_ENDPOINT: string;
/** Deadline of unary calls, ms. */
export declare const DEFAULT_DEADLINE_MS: number;
/** How much longer than the call deadline a resign or release by lease may take by default. */
export declare const BY_LEASE_EXTRA_MS: number;

/** Why a hold was lost (clients/CONFORMANCE.md). */
export type LossReason = 'suspended' | 'silence' | 'unavailable' | 'ended';
export declare const Loss: Readonly<{
  SUSPENDED: 'suspended';
  SILENCE: 'silence';
  UNAVAILABLE: 'unavailable';
  ENDED: 'ended';
}>;

export interface Endpoint {
  /** `host:port` */
  address: string;
  tls: boolean;
}

/** Parses a fleet (an array or one comma-separated string; undefined: `ZKGATE_ENDPOINT`). */
export declare function parseEndpoints(endpoints?: string | readonly string[]): Endpoint[];

/** Full-jitter exponential backoff (50 ms doubling to 2 s by default). */
export declare class Backoff {
  constructor(baseMs?: number, capMs?: number);
  baseMs: number;
  capMs: number;
  attempt: number;
  /** The next wait, ms. */
  next(): number;
  reset(): void;
}

/** Loads the `zkgate.v1` package (grpc-js service constructors). */
export declare function loadPackage(protoDir?: string): grpcJs.GrpcObject;
/** A `google.protobuf.Duration` in ms; undefined if unset. */
export declare function durationMs(d?: { seconds?: string | number; nanos?: number } | null): number | undefined;

export interface Leader {
  election: string;
  candidate: string;
  value: Buffer;
  fencingToken: bigint;
  since?: Date;
}

export interface Holder {
  owner: string;
  fencingToken: bigint;
  since?: Date;
  mode: 'LOCK_MODE_WRITE' | 'LOCK_MODE_READ' | string;
}

export interface CandidateInfo {
  candidate: string;
  value: Buffer;
  position: number;
  fencingToken: bigint;
  joined?: Date;
  leader: boolean;
}

export type Bytes = Buffer | Uint8Array | ArrayBuffer | string;

export declare class LeadershipLost extends Error {
  constructor(reason: string);
  reason: string;
}
export declare class LockLost extends Error {
  constructor(reason: string);
  reason: string;
}
export declare class NotAcquired extends LockLost {}
/** A wait ran out of time (its `name` is `TimeoutError`); the campaign or request goes on. */
export declare class CampaignTimeout extends Error {}

export interface WaitOptions {
  timeoutMs?: number;
}

export interface HolderEvent {
  type: 'queued' | 'elected' | 'acquired' | 'suspended' | 'resumed' | 'proclaimed' | 'heartbeat' | 'lost' | 'end';
  [field: string]: unknown;
}

/** What a Campaign and a LockHold share: one holder stream with the silence watchdog. */
export declare class HolderStream extends EventEmitter implements AsyncIterable<HolderEvent> {
  /** The monotonic clock (ms) the silence watchdog's deadline is judged by, on every message as
   *  well as by its timer: a message heard after the deadline does not revive the hold. With a
   *  gateway that answers pings, the pings' send times (which anchor the deadline) are read on
   *  it too. */
  static clock: () => number;
  /** The capability to resign/release from any gateway (secret: do not log). */
  lease: string | null;
  position: number | null;
  silenceLimitMs: number | null;
  queued: boolean;
  lost: boolean;
  lostReason: string | null;
  /** Set with `lost`. */
  loss: LossReason | null;
  endCode: grpcJs.status | null;
  endDetails: string | null;
  /** Index in `client.endpoints` of the gateway this stream is on. */
  endpointIndex: number;
  /** The gateway this stream is on (`http://host:port`). */
  readonly endpoint: string;
  /** Aborted as soon as the hold must not (or no longer) be acted on. */
  readonly signal: AbortSignal;
  readonly isHolding: boolean;
  readonly done: boolean;
  check(): void;
  waitQueued(options?: WaitOptions): Promise<number>;
  waitDone(): Promise<void>;
  cancel(): void;
  close(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<HolderEvent>;
}

export declare class Campaign extends HolderStream {
  election: string;
  candidate: string;
  leader: Leader | null;
  readonly elected: boolean;
  readonly isLeader: boolean;
  readonly fencingToken: bigint | null;
  waitElected(options?: WaitOptions): Promise<Leader>;
  proclaim(value: Bytes, options?: WaitOptions): Promise<Leader>;
  resign(options?: WaitOptions): Promise<void>;
}

export declare class LockHold extends HolderStream {
  name: string;
  fencingToken: bigint | null;
  readonly acquired: boolean;
  readonly isHeld: boolean;
  waitAcquired(options?: WaitOptions): Promise<bigint>;
  release(options?: WaitOptions): Promise<void>;
}

export interface TlsOptions {
  /** CA bundle (PEM) to trust; default: the system's. */
  ca?: Buffer | string;
  /** Client certificate and key (PEM), for mTLS. */
  cert?: Buffer | string;
  key?: Buffer | string;
  /** Verify the gateway's certificate against this name instead of the endpoint's host. */
  serverName?: string;
}

export interface ClientOptions {
  tls?: TlsOptions;
  credentials?: grpcJs.ChannelCredentials;
  channelOptions?: grpcJs.ChannelOptions;
  protoDir?: string;
  /** Deadline of unary calls (default 5000). */
  deadlineMs?: number;
  /** Bearer token sent as `authorization: Bearer <token>` on every call and stream
   *  (default: `ZKGATE_TOKEN`). Never put it on a command line. */
  token?: string;
  /** Read the bearer token from this file (its content, trimmed). */
  tokenFile?: string;
}

/** `ZKGATE_TOKEN`. */
export declare const TOKEN_ENV: string;
/** The bearer token: `token`, else `tokenFile`'s content, else `ZKGATE_TOKEN`, else null. */
export declare function resolveToken(token?: string, tokenFile?: string): string | null;

export interface LockOptions {
  owner?: string;
  permits?: number;
  mode?: 'write' | 'read';
  /** 0: try once; unset: wait for ever. */
  waitTimeoutMs?: number;
  /** Keep-alives are then sent by the helper every ttlMs / 3. */
  ttlMs?: number;
  onLost?: (reason: string) => void;
}

export interface StandbyOptions<S extends HolderStream, R = unknown> {
  onGranted?: (stream: S) => void;
  onLost?: (reason: LossReason, stream: S) => void;
  onError?: (error: Error) => void;
  /** Runs while each hold lasts; must finish once `stream.signal` is aborted. */
  work?: (stream: S) => R | Promise<R>;
  /** Default true. */
  requeue?: boolean;
}

/** Holds again after every loss (auto-requeue). */
export declare class Standby<S extends HolderStream = HolderStream, R = unknown> extends EventEmitter {
  current: S | null;
  holding: boolean;
  error: Error | null;
  /** Resolves with `work`'s result when it stops; rejects with the error that stopped it. */
  readonly done: Promise<R | undefined>;
  waitGranted(): Promise<S>;
  close(): Promise<void>;
}

export declare class Client {
  constructor(endpoints?: string | readonly string[], options?: ClientOptions);
  readonly endpoints: Endpoint[];
  /** Index of the endpoint new calls start on. */
  current: number;
  deadlineMs: number;
  /** grpc-js clients of the current endpoint, for RPCs this helper does not wrap. */
  readonly stub: grpcJs.Client;
  readonly lockStub: grpcJs.Client;

  campaign(election: string, candidate: string, value?: Bytes, options?: { onLost?: (reason: string) => void }): Campaign;
  elect(
    election: string,
    candidate: string,
    value?: Bytes,
    options?: { timeoutMs?: number; onLost?: (reason: string) => void },
  ): Promise<Campaign>;
  standbyCampaign<R = unknown>(
    election: string,
    candidate: string,
    value?: Bytes,
    options?: StandbyOptions<Campaign, R>,
  ): Standby<Campaign, R>;
  runWhileLeader<R>(
    election: string,
    candidate: string,
    value: Bytes | undefined,
    work: (campaign: Campaign) => R | Promise<R>,
    options?: Omit<StandbyOptions<Campaign, R>, 'work'>,
  ): Promise<R | undefined>;
  leader(election: string, options?: WaitOptions): Promise<Leader | null>;
  validate(election: string, fencingToken: bigint | string | number, options?: WaitOptions): Promise<{ current: boolean; leader: Leader | null }>;
  resign(lease: string, options?: WaitOptions): Promise<void>;
  candidates(election: string, options?: WaitOptions & { pageSize?: number }): Promise<{ candidates: CandidateInfo[]; total: number }>;
  observe(election: string, options?: { signal?: AbortSignal }): AsyncIterableIterator<Leader | null>;
  /** Every election under `prefix` plus `elections`: states, then `{ snapshotComplete: true }` once. */
  observeMany(
    prefix: string,
    elections?: string[],
    options?: { signal?: AbortSignal },
  ): AsyncIterableIterator<{ election: string; leader: Leader | null } | { snapshotComplete: true }>;

  acquire(name: string, options?: LockOptions): LockHold;
  lock(name: string, options?: LockOptions & { timeoutMs?: number }): Promise<LockHold>;
  standbyLock<R = unknown>(
    name: string,
    lockOptions?: Omit<LockOptions, 'waitTimeoutMs' | 'onLost'>,
    options?: StandbyOptions<LockHold, R>,
  ): Standby<LockHold, R>;
  runWhileHolding<R>(
    name: string,
    lockOptions: Omit<LockOptions, 'waitTimeoutMs' | 'onLost'>,
    work: (hold: LockHold) => R | Promise<R>,
    options?: Omit<StandbyOptions<LockHold, R>, 'work'>,
  ): Promise<R | undefined>;
  holders(name: string, options?: WaitOptions & { pageSize?: number }): Promise<{ holders: Holder[]; waiting: number; total: number }>;
  releaseLock(lease: string, options?: WaitOptions): Promise<void>;
  validateLock(name: string, fencingToken: bigint | string | number, options?: WaitOptions): Promise<boolean>;

  close(): void;
}

export declare function connect(endpoints?: string | readonly string[], options?: ClientOptions): Client;
