#!/usr/bin/env python3
"""The zkgate conformance agent for the Python client (clients/CONFORMANCE.md).

    ZKGATE_ENDPOINT=http://127.0.0.1:50051,http://127.0.0.1:50052 \\
        python3 clients/python/examples/agent.py elect NAME [--id ID] [--once]
    ... agent.py lock NAME [--id ID] [--once]

Campaigns for election NAME (or holds lock NAME) through the fleet in ZKGATE_ENDPOINT with
auto-requeue (unless --once: exit 3 after the first loss) and prints one JSON object per line:
``elected``/``acquired`` (token, endpoint), ``lost`` (reason), ``released`` (after SIGTERM),
``error``. tests/cross_language.rs drives it beside the other languages' agents.
"""

import argparse
import faulthandler
import json
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import zkgate  # noqa: E402

_out = threading.Lock()


def emit(**event) -> None:
    with _out:
        sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("verb", choices=["elect", "lock"])
    p.add_argument("name")
    p.add_argument("--id", default=f"py-{os.getpid()}")
    p.add_argument("--once", action="store_true", help="no auto-requeue: exit 3 after a loss")
    args = p.parse_args()

    stop = threading.Event()
    lost = threading.Event()

    def on_term(*_):
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # Every thread's stack on stderr at SIGUSR1: what a harness asks for before it gives up on
    # an agent that went quiet (tests/cross_language.rs).
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    granted = "elected" if args.verb == "elect" else "acquired"

    def on_granted(s) -> None:
        emit(event=granted, token=str(s.fencing_token), endpoint=s.endpoint)

    def on_lost(reason: str, s) -> None:
        print(f"agent: lost ({reason}): {s.lost_reason}", file=sys.stderr, flush=True)
        emit(event="lost", reason=reason)
        lost.set()

    def on_error(e: BaseException) -> None:
        emit(event="error", message=str(e))

    fleet = zkgate.Fleet()  # ZKGATE_ENDPOINT
    kwargs = dict(on_granted=on_granted, on_lost=on_lost, on_error=on_error, requeue=not args.once)
    if args.verb == "elect":
        standby = zkgate.standby_campaign(fleet, args.name, args.id, args.id.encode(), **kwargs)
    else:
        standby = zkgate.standby_lock(fleet, args.name, owner=args.id, **kwargs)
    while not stop.wait(0.1):
        if standby.stopped.is_set():
            break
    if stop.is_set():
        standby.close()
        # The hold is given up once close() returns: say so before closing the channels.
        emit(event="released")
        # grpc-python's Channel.close() can block for good after a stream ended abnormally
        # (Fleet.close): past its timeout, say where, and exit without it.
        if not fleet.close():
            print(
                f"agent: the channels did not close within {fleet.CLOSE_TIMEOUT} s; exiting",
                file=sys.stderr,
                flush=True,
            )
            faulthandler.dump_traceback(all_threads=True)
            os._exit(0)
        return 0
    fleet.close()
    if standby.error is not None:
        return 1
    return 3 if lost.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
