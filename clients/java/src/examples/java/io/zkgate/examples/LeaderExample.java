package io.zkgate.examples;

import io.zkgate.LeaderSelector;
import io.zkgate.ZkgateClient;

/**
 * Run leader-only work while this process leads election {@code reports}:
 * {@code java -cp "$(cat clients/java/build/classpath)" io.zkgate.examples.LeaderExample [ID]}.
 * Start it twice, stop the leader (Ctrl-C), and watch the other one take over.
 */
public final class LeaderExample {
    private LeaderExample() {}

    public static void main(String[] args) throws Exception {
        String id = args.length > 0 ? args[0] : ZkgateClient.defaultId();
        try (ZkgateClient client = ZkgateClient.create();
                LeaderSelector selector = client.leaderSelector("reports", id, leadership -> {
                    System.out.println(id + " leads with fencing token " + leadership.fencingTokenString());
                    while (true) {
                        Thread.sleep(1000); // interrupted the moment leadership is lost
                        System.out.println(id + " working as leader (token " + leadership.fencingTokenString() + ")");
                    }
                })) {
            selector.start();
            Runtime.getRuntime().addShutdownHook(new Thread(selector::close)); // Ctrl-C: resign first
            Thread.currentThread().join();
        }
    }
}
