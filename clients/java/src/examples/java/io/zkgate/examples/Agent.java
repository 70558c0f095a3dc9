package io.zkgate.examples;

import io.zkgate.LeaderSelector;
import io.zkgate.LeaderSelectorListener;
import io.zkgate.Leadership;
import io.zkgate.LockSelector;
import io.zkgate.LossReason;
import io.zkgate.ZkgateClient;
import io.zkgate.ZkgateException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The conformance agent of clients/CONFORMANCE.md, which tests/cross_language.rs drives:
 * {@code Agent elect|lock NAME [--id ID] [--once]}, endpoints from {@code ZKGATE_ENDPOINT}.
 * Standard output carries one JSON object per line and nothing else; logs go to stderr.
 */
public final class Agent {
    private static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out),
            true, StandardCharsets.UTF_8);

    /** Set by the SIGTERM hook, so that the selector's end is not taken for a --once loss. */
    private static volatile boolean terminating;

    private Agent() {}

    private static synchronized void emit(String json) {
        OUT.println(json);
        OUT.flush();
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    private static void granted(String event, Leadership l) {
        emit("{\"event\":\"" + event + "\",\"token\":\"" + l.fencingTokenString() + "\",\"endpoint\":"
                + quote(l.endpoint().toString()) + "}");
    }

    private static void emitLost(LossReason r) {
        emit("{\"event\":\"lost\",\"reason\":\"" + r.wire() + "\"}");
    }

    private static void error(String message) {
        emit("{\"event\":\"error\",\"message\":" + quote(message) + "}");
        System.out.flush();
        Runtime.getRuntime().halt(1);
    }

    /** Holds until interrupted (the loss) — the agent has no work of its own. */
    private static void hold() throws InterruptedException {
        Thread.sleep(Long.MAX_VALUE);
    }

    /** Starts {@code selector} unless SIGTERM came first; the hook closes what was registered. */
    private static void start(AtomicReference<AutoCloseable> running, AutoCloseable selector,
            Runnable start) throws InterruptedException {
        synchronized (running) {
            if (running.get() == null) {
                running.set(selector);
                start.run();
                return;
            }
        }
        Thread.sleep(Long.MAX_VALUE); // terminating: the hook exits
    }

    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Exception e) {
            error(e.toString());
        }
    }

    private static void run(String[] args) throws Exception {
        if (args.length < 2 || !(args[0].equals("elect") || args[0].equals("lock"))) {
            error("usage: Agent elect|lock NAME [--id ID] [--once]");
        }
        String verb = args[0];
        String name = args[1];
        String id = "java-" + ProcessHandle.current().pid();
        boolean once = false;
        for (int i = 2; i < args.length; i++) {
            switch (args[i]) {
                case "--id" -> {
                    if (i + 1 >= args.length) {
                        error("--id needs a value");
                    }
                    id = args[++i];
                }
                case "--once" -> once = true;
                default -> error("unknown option " + args[i]);
            }
        }
        ZkgateClient client = ZkgateClient.create();
        // SIGTERM: resign/release (closing the selector does), say so, exit 0. Registered before
        // the selector exists, so an early SIGTERM also ends with `released`.
        AtomicReference<AutoCloseable> running = new AtomicReference<>();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            terminating = true;
            AutoCloseable s;
            synchronized (running) {
                s = running.getAndSet(() -> { });
            }
            try {
                if (s != null) {
                    s.close();
                }
            } catch (Exception e) {
                System.err.println("agent: closing: " + e);
            }
            emit("{\"event\":\"released\"}");
            Runtime.getRuntime().halt(0);
        }, "agent-sigterm"));
        AutoCloseable selector;
        java.util.function.Function<Duration, Boolean> awaitEnd;
        if (verb.equals("elect")) {
            LeaderSelector s = client.leaderSelector(name, id, new LeaderSelectorListener() {
                @Override
                public void takeLeadership(Leadership l) throws InterruptedException {
                    hold();
                }

                @Override
                public void elected(Leadership l) {
                    granted("elected", l);
                }

                @Override
                public void lost(Leadership l, LossReason r) {
                    emitLost(r);
                }

                @Override
                public void failed(ZkgateException e) {
                    error(e.getMessage());
                }
            }).autoRequeue(!once);
            selector = s;
            awaitEnd = d -> {
                try {
                    return s.awaitEnd(d);
                } catch (InterruptedException e) {
                    return false;
                }
            };
            start(running, s, s::start);
        } else {
            LockSelector s = client.lockSelector(client.lock(name).withOwner(id), new LockSelector.Listener() {
                @Override
                public void whileHolding(Leadership l) throws InterruptedException {
                    hold();
                }

                @Override
                public void acquired(Leadership l) {
                    granted("acquired", l);
                }

                @Override
                public void lost(Leadership l, LossReason r) {
                    emitLost(r);
                }

                @Override
                public void failed(ZkgateException e) {
                    error(e.getMessage());
                }
            }).autoRequeue(!once);
            selector = s;
            awaitEnd = d -> {
                try {
                    return s.awaitEnd(d);
                } catch (InterruptedException e) {
                    return false;
                }
            };
            start(running, s, s::start);
        }
        // --once: the selector ends after the first loss; exit 3.
        while (!awaitEnd.apply(Duration.ofDays(1))) {
            // keep waiting
        }
        if (terminating) {
            Thread.sleep(Long.MAX_VALUE); // the SIGTERM hook ended the selector: it exits 0
        }
        Runtime.getRuntime().halt(3);
    }
}
