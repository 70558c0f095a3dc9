// Not run: `tsc --noEmit` (test/types.test.js) checks that index.d.ts describes this use of the
// client, and that wrong uses (marked @ts-expect-error) are refused.
import { Client, Loss, type Campaign, type LossReason, type LockHold } from '@zkgate/client';

async function main(): Promise<void> {
  const fleet = new Client(['http://10.0.0.1:50051', 'http://10.0.0.2:50051'], {
    deadlineMs: 2000,
    tls: { serverName: 'zkgate.internal' },
  });
  const lead: Campaign = await fleet.elect('billing', 'host-1', 'v', { timeoutMs: 5000 });
  const token: bigint | null = lead.fencingToken;
  const where: string = lead.endpoint;
  lead.signal.addEventListener('abort', () => undefined);
  await lead.close();

  const held: LockHold = await fleet.lock('invoice-42', { owner: 'host-1', ttlMs: 3000 });
  const t: bigint = await held.waitAcquired();
  await held.release();

  const standby = fleet.standbyLock('jobs', { owner: 'w1' }, {
    onGranted: (h) => console.log(h.fencingToken, h.endpoint),
    onLost: (reason: LossReason) => console.log(reason === Loss.UNAVAILABLE),
  });
  const h: LockHold = await standby.waitGranted();
  await standby.close();

  const result = await fleet.runWhileLeader('e', 'c', undefined, async (c) => c.fencingToken ?? 0n);
  const r: bigint | undefined = result;

  const { holders, total } = await fleet.holders('jobs', { pageSize: 100 });
  const owners: string[] = holders.map((x) => x.owner);
  const { candidates } = await fleet.candidates('e');
  for await (const leader of fleet.observe('e')) {
    if (leader) console.log(leader.candidate, leader.fencingToken + 1n);
    break;
  }
  // @ts-expect-error fencing tokens are bigint, not number
  const n: number = lead.fencingToken;
  // @ts-expect-error the lock mode is 'write' or 'read'
  fleet.acquire('x', { mode: 'exclusive' });
  console.log(token, where, t, h, r, total, owners, candidates, n);
  fleet.close();
}

void main;
