#!/usr/bin/env python3
"""Folds `perf script -F comm,tid,ip,sym` output of the gateway (bench/trace/profile.sh).

Prints three tables of the samples' shares:
- by the code that asked: each sample goes to the nearest frame, from the leaf up, of one of
  the groups below, so the allocator, libc and the kernel under a frame count to the code
  that called them;
- by where the CPU was spent: the leaf frame's group (self time);
- zkgate's functions: the nearest zkgate frame of the samples zkgate asked for.
"""
import collections
import re
import sys

GROUPS = {
    "zkgate's own code": {"zkgate"},
    "tokio: scheduling, wake-ups, timers, the I/O driver": {"tokio"},
    "the gRPC transport (h2, hyper, tonic, axum, http, prost)": {
        "h2", "hyper", "hyper_util", "tonic", "tonic_prost", "tonic_health", "axum", "http",
        "http_body", "http_body_util", "prost", "zkgate_proto", "tower",
    },
    "the ZooKeeper client": {"zookeeper_client"},
    "metrics and its Prometheus recorder": {"metrics", "metrics_exporter_prometheus", "metrics_util"},
}


def read(path):
    samples, cur = [], None
    for line in open(path, errors="replace"):
        if not line.strip():
            if cur:
                samples.append(cur)
            cur = None
        elif line[0] not in " \t":
            cur = []
        elif cur is not None:
            parts = line.strip().split(None, 1)
            cur.append(parts[1] if len(parts) > 1 else "?")
    if cur:
        samples.append(cur)
    return samples


def crate(frame):
    m = re.match(r"(?:impl\s+)?(?:dyn\s+)?([A-Za-z_0-9]+)::", frame.lstrip("<"))
    return m.group(1) if m else None


def group(frame):
    c = crate(frame)
    for name, crates in GROUPS.items():
        if c in crates:
            return name
    return None


def spent(frame):
    if frame.startswith("[") or re.match(r"^[0-9a-f]+$", frame):
        return "unknown"
    g = group(frame)
    if g:
        return g
    if re.search(r"malloc|free|realloc|memalign|unlink_chunk|consolidate|calloc", frame):
        return "the allocator"
    if re.search(r"mem(cpy|move|cmp|set)|clock_gettime", frame):
        return "libc memcpy/memcmp/clock"
    if crate(frame) in {"core", "alloc", "std", "hashbrown"}:
        return "Rust core, alloc, std, hashbrown"
    if crate(frame) is None:
        return "the kernel and the rest of libc"
    return "other crates"


def main():
    samples = read(sys.argv[1])
    n = len(samples)
    asked, self_time, functions = (collections.Counter() for _ in range(3))
    for stack in samples:
        owner = next((g for g in map(group, stack) if g), "nobody above the kernel/libc")
        asked[owner] += 1
        self_time[spent(stack[0])] += 1
        if owner == "zkgate's own code":
            f = next(f for f in stack if group(f) == owner)
            f = re.sub(r"<[^<>]*>", "", f.replace("{{closure}}", ""))
            functions[f[:100]] += 1
    print(f"{n} samples")
    for title, counter, rows in [
        ("by the code that asked", asked, 10),
        ("by where the CPU was spent (self)", self_time, 12),
        ("zkgate's functions (nearest zkgate frame)", functions, 25),
    ]:
        print(f"\n{title}")
        for k, v in counter.most_common(rows):
            print(f"{100 * v / n:6.1f} %  {k}")


if __name__ == "__main__":
    main()
