#!/usr/bin/env python3
"""Run one "active" worker among many: each copy campaigns, and only the leader works.

    python3 examples/leader_worker.py --name worker-1          # terminal 1
    python3 examples/leader_worker.py --name worker-2          # terminal 2
    # Ctrl-C worker-1: worker-2 takes over within milliseconds.

The work loop stops as soon as leadership is lost or cannot be trusted (stream ended, gateway
suspended, or silence past the silence limit), then campaigns again.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import zkgate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--gateway", default=None, help="endpoints, comma-separated (default: ZKGATE_ENDPOINT)"
    )
    p.add_argument("--election", default="demo-worker")
    p.add_argument("--name", default=f"{os.uname().nodename}-{os.getpid()}")
    args = p.parse_args()
    fleet = zkgate.Fleet(args.gateway)  # shared by every campaign: one channel per gateway

    while True:
        print(f"{args.name}: campaigning in {args.election!r} via {', '.join(map(str, fleet.endpoints))}", flush=True)
        try:
            with zkgate.elect(fleet, args.election, args.name, args.name.encode()) as lead:
                print(f"{args.name}: elected, fencing token {lead.fencing_token}", flush=True)
                batch = 0
                while not lead.lost.wait(1.0):
                    batch += 1
                    # Pass the token to anything that fences writes (Election/Validate).
                    print(f"{args.name}: batch {batch} (token {lead.fencing_token})", flush=True)
                print(f"{args.name}: leadership lost: {lead.lost_reason}", flush=True)
        except zkgate.LeadershipLost as e:
            print(f"{args.name}: campaign ended: {e.reason}", flush=True)
        time.sleep(1.0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
