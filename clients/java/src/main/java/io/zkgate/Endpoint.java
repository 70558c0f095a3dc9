package io.zkgate;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;

/**
 * One gateway of the fleet: {@code host:port}, {@code http://host:port} (plaintext) or
 * {@code https://host:port} (TLS), as clients/CONFORMANCE.md spells them. A bare
 * {@code host:port} is plaintext unless the client was given TLS options.
 */
public final class Endpoint {
    /** The default when neither code nor {@code ZKGATE_ENDPOINT} names one. */
    public static final String DEFAULT = "http://127.0.0.1:50051";

    private final String text;
    private final String host;
    private final int port;
    private final Boolean tls; // null: bare host:port, decided by the client's TLS options

    private Endpoint(String text, String host, int port, Boolean tls) {
        this.text = text;
        this.host = host;
        this.port = port;
        this.tls = tls;
    }

    /** Parses one endpoint; throws {@link IllegalArgumentException} with the reason. */
    public static Endpoint parse(String text) {
        String t = text.trim();
        Boolean tls = null;
        String rest = t;
        if (t.startsWith("http://")) {
            tls = false;
            rest = t.substring(7);
        } else if (t.startsWith("https://")) {
            tls = true;
            rest = t.substring(8);
        } else if (t.contains("://")) {
            throw new IllegalArgumentException("endpoint " + t + ": only http:// and https:// are known");
        }
        while (rest.endsWith("/")) {
            rest = rest.substring(0, rest.length() - 1);
        }
        URI uri;
        try {
            uri = new URI("zkgate://" + rest);
        } catch (Exception e) {
            throw new IllegalArgumentException("endpoint " + t + ": " + e.getMessage());
        }
        if (uri.getHost() == null || uri.getPort() < 0) {
            throw new IllegalArgumentException("endpoint " + t + ": expected host:port");
        }
        String host = uri.getHost();
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        return new Endpoint(t, host, uri.getPort(), tls);
    }

    /** Parses a comma-separated list (empty items are skipped). */
    public static List<Endpoint> parseList(String csv) {
        List<Endpoint> out = new ArrayList<>();
        for (String item : csv.split(",")) {
            if (!item.isBlank()) {
                out.add(parse(item));
            }
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException("no endpoint in \"" + csv + "\"");
        }
        return out;
    }

    /** {@code ZKGATE_ENDPOINT} if set and not empty, else {@link #DEFAULT}. */
    public static List<Endpoint> fromEnvironment() {
        String env = System.getenv("ZKGATE_ENDPOINT");
        return parseList(env == null || env.isBlank() ? DEFAULT : env);
    }

    public String host() {
        return host;
    }

    public int port() {
        return port;
    }

    /** Whether to use TLS, given whether the client has TLS options. */
    boolean tls(boolean clientHasTlsOptions) {
        return tls != null ? tls : clientHasTlsOptions;
    }

    /** The endpoint as it was given. */
    @Override
    public String toString() {
        return text;
    }
}
