"""The gateway's two stretches around a ZooKeeper request, from a `perf trace` of its socket
system calls (bench/trace/stretches.sh):

* client message read -> ZooKeeper request sent: a `recvfrom` on a client socket followed,
  before any other read or write to a client, by a `sendto` on the ZooKeeper socket;
* ZooKeeper reply read -> client write: a `recvfrom` of more than 20 bytes (not a ping) on the
  ZooKeeper socket followed by the next `writev` to a client socket.

The ZooKeeper socket is the one the gateway `sendto`s (hyper writes clients with `writev`). For
each stretch: how many, p10/p50/p90, and in how many the second call ran on another thread.
"""
import re
import statistics
import sys

LINE = re.compile(r"\s*([\d.]+) \(\s*[\d.]+ ms\): \S+/(\d+) (\w+)\(fd: (\d+).*?=\s*(\d+)")


def stretches(path):
    ev = []
    for line in open(path):
        m = LINE.match(line)
        if m:
            ev.append((float(m[1]), int(m[2]), m[3], int(m[4]), int(m[5])))
    zk = {e[3] for e in ev if e[2] == "sendto"}
    to_zk, to_client = [], []
    for i, (t, tid, call, fd, n) in enumerate(ev):
        if call == "recvfrom" and fd not in zk:
            for t2, tid2, call2, fd2, _ in ev[i + 1 : i + 15]:
                if call2 == "sendto" and fd2 in zk:
                    to_zk.append(((t2 - t) * 1000, tid2 != tid))
                    break
                if call2 in ("recvfrom", "writev"):
                    break
        if call == "recvfrom" and fd in zk and n > 20:
            for t2, tid2, call2, fd2, _ in ev[i + 1 : i + 15]:
                if call2 == "writev" and fd2 not in zk:
                    to_client.append(((t2 - t) * 1000, tid2 != tid))
                    break
                if call2 == "sendto" or (call2 == "recvfrom" and fd2 not in zk):
                    break
    return to_zk, to_client


def summary(v):
    if not v:
        return "none"
    us = sorted(x for x, _ in v)
    other = sum(1 for _, o in v if o)
    return "n=%d p10=%.0f p50=%.0f p90=%.0f us, on another thread: %d (%.0f %%)" % (
        len(us), us[len(us) // 10], statistics.median(us), us[len(us) * 9 // 10],
        other, 100.0 * other / len(v))


for path in sys.argv[1:]:
    to_zk, to_client = stretches(path)
    print(path)
    print("  client message read -> ZooKeeper request sent:", summary(to_zk))
    print("  ZooKeeper reply read -> client write:          ", summary(to_client))
