#!/usr/bin/env node
// Run one "active" worker among many: each copy campaigns, and only the leader works.
//
//     node examples/leader_worker.js --name worker-1          # terminal 1
//     node examples/leader_worker.js --name worker-2          # terminal 2
//     # Ctrl-C worker-1: worker-2 takes over within milliseconds.
//
// The work loop stops as soon as leadership is lost or cannot be trusted (stream ended, gateway
// suspended, or silence past the silence limit), then campaigns again.

import os from 'node:os';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LeadershipLost } from '../index.js';

const { values: args } = parseArgs({
  options: {
    gateway: { type: 'string' }, // endpoints, comma-separated (default: ZKGATE_ENDPOINT)
    election: { type: 'string', default: 'demo-worker' },
    name: { type: 'string', default: `${os.hostname()}-${process.pid}` },
  },
});

const gw = new Client(args.gateway);
let current = null;
process.on('SIGINT', async () => {
  await current?.close(); // resign: the next worker is elected at once
  gw.close();
  process.exit(0);
});

for (;;) {
  console.log(`${args.name}: campaigning in '${args.election}' via ${gw.endpoints.map((e) => e.address).join(', ')}`);
  try {
    current = await gw.elect(args.election, args.name, args.name);
    const lead = current;
    console.log(`${args.name}: elected, fencing token ${lead.fencingToken}`);
    let batch = 0;
    while (!lead.signal.aborted) {
      batch += 1;
      // Pass the token to anything that fences writes (Election/Validate).
      console.log(`${args.name}: batch ${batch} (token ${lead.fencingToken})`);
      await sleep(1000, undefined, { signal: lead.signal }).catch(() => {});
    }
    console.log(`${args.name}: leadership lost: ${lead.lostReason}`);
    await lead.close();
  } catch (e) {
    if (!(e instanceof LeadershipLost)) throw e;
    console.log(`${args.name}: campaign ended: ${e.reason}`);
  }
  current = null;
  await sleep(1000);
}
