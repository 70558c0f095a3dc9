#!/usr/bin/env node
// The zkgate conformance agent for the Node client (clients/CONFORMANCE.md).
//
//     ZKGATE_ENDPOINT=http://127.0.0.1:50051,http://127.0.0.1:50052 \
//         node clients/node/examples/agent.js elect NAME [--id ID] [--once]
//     ... agent.js lock NAME [--id ID] [--once]
//
// Campaigns for election NAME (or holds lock NAME) through the fleet in ZKGATE_ENDPOINT with
// auto-requeue (unless --once: exit 3 after the first loss) and prints one JSON object per line:
// `elected`/`acquired` (token, endpoint), `lost` (reason), `released` (after SIGTERM), `error`.
// tests/cross_language.rs drives it beside the other languages' agents.

import { parseArgs } from 'node:util';

import { Client } from '../index.js';

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: { id: { type: 'string', default: `js-${process.pid}` }, once: { type: 'boolean', default: false } },
  });
} catch (e) {
  emit({ event: 'error', message: e.message });
  process.exit(1);
}
const [verb, name] = args.positionals;
if (!['elect', 'lock'].includes(verb) || !name) {
  emit({ event: 'error', message: 'usage: agent.js elect|lock NAME [--id ID] [--once]' });
  process.exit(1);
}
const { id, once } = args.values;

let lost = false;
const client = new Client(); // ZKGATE_ENDPOINT
const options = {
  requeue: !once,
  onGranted: (s) =>
    emit({ event: verb === 'elect' ? 'elected' : 'acquired', token: String(s.fencingToken), endpoint: s.endpoint }),
  onLost: (reason, s) => {
    console.error(`agent: lost (${reason}): ${s.lostReason}`);
    emit({ event: 'lost', reason });
    lost = true;
  },
  onError: (e) => emit({ event: 'error', message: e.message }),
};
const standby =
  verb === 'elect' ? client.standbyCampaign(name, id, id, options) : client.standbyLock(name, { owner: id }, options);

let terminating = false;
async function terminate() {
  if (terminating) return;
  terminating = true;
  await standby.close();
  client.close();
  emit({ event: 'released' });
  process.exit(0);
}
process.on('SIGTERM', terminate);
process.on('SIGINT', terminate);

standby.done.then(
  () => {
    if (terminating) return;
    client.close();
    process.exit(lost ? 3 : 0);
  },
  () => {
    if (terminating) return;
    client.close();
    process.exit(1);
  },
);
