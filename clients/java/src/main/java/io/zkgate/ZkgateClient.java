package io.zkgate;

import io.grpc.Channel;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import io.netty.handler.ssl.ZkgateJdkAlpn;
import io.zkgate.v1.CandidatesRequest;
import io.zkgate.v1.CandidatesResponse;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.ElectionValidateRequest;
import io.zkgate.v1.HoldersRequest;
import io.zkgate.v1.HoldersResponse;
import io.zkgate.v1.LeaderRequest;
import io.zkgate.v1.LockGrpc;
import io.zkgate.v1.LockValidateRequest;
import io.zkgate.v1.ProclaimRequest;
import io.zkgate.v1.ReleaseRequest;
import io.zkgate.v1.ResignRequest;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * A connection to a zkgate fleet: a list of gateway endpoints tried in order, with failover and
 * the jittered backoff of clients/CONFORMANCE.md, optional TLS/mTLS, and a deadline on every
 * unary call. Create one per process and share it; it is thread-safe. {@link #close()} shuts
 * the channels down.
 *
 * <pre>{@code
 * ZkgateClient client = ZkgateClient.create();                  // ZKGATE_ENDPOINT, else http://127.0.0.1:50051
 * ZkgateClient fleet = ZkgateClient.builder()
 *         .endpoints("https://gw-a:50051,https://gw-b:50051")
 *         .caBundle(new File("ca.pem")).clientCertificate(new File("me.pem"), new File("me.key"))
 *         .deadline(Duration.ofSeconds(3)).build();
 * ZkgateClient tenant = ZkgateClient.builder()                 // a gateway with --auth-policy
 *         .tokenFile(new File("/run/secrets/zkgate-token")).build(); // else ZKGATE_TOKEN
 * }</pre>
 */
public final class ZkgateClient implements AutoCloseable {
    /** The default deadline of unary calls. */
    public static final Duration DEFAULT_DEADLINE = Duration.ofSeconds(5);
    /** The environment variable of the bearer token, used when none is given in code. */
    public static final String TOKEN_ENV = "ZKGATE_TOKEN";
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    private final List<Endpoint> endpoints;
    private final File caBundle;
    private final File clientCert;
    private final File clientKey;
    private final String serverName;
    private final Duration deadline;
    /** The bearer token, or null. */
    private final String token;
    private final ManagedChannel[] channels;
    private volatile int preferred;
    private boolean closed;

    private ZkgateClient(Builder b) {
        this.endpoints = List.copyOf(b.endpoints == null ? Endpoint.fromEnvironment() : b.endpoints);
        this.caBundle = b.caBundle;
        this.clientCert = b.clientCert;
        this.clientKey = b.clientKey;
        this.serverName = b.serverName;
        this.deadline = b.deadline;
        this.token = resolveToken(b.token, b.tokenFile);
        this.channels = new ManagedChannel[endpoints.size()];
    }

    /** The token: {@code token}, else {@code tokenFile}'s content (trimmed), else {@code ZKGATE_TOKEN}, else null. */
    static String resolveToken(String token, File tokenFile) {
        if (token != null && !token.isBlank()) {
            return token.strip();
        }
        if (tokenFile != null) {
            String text;
            try {
                text = Files.readString(tokenFile.toPath(), StandardCharsets.UTF_8).strip();
            } catch (IOException e) {
                throw new UncheckedIOException("token file " + tokenFile, e);
            }
            if (text.isEmpty()) {
                throw new IllegalArgumentException("token file " + tokenFile + ": the file is empty");
            }
            return text;
        }
        String env = System.getenv(TOKEN_ENV);
        return env == null || env.isBlank() ? null : env.strip();
    }

    /** A client for {@code ZKGATE_ENDPOINT} (a comma-separated list), else {@link Endpoint#DEFAULT}. */
    public static ZkgateClient create() {
        return builder().build();
    }

    /** A client for these endpoints (each may itself be a comma-separated list). */
    public static ZkgateClient connect(String... endpoints) {
        return builder().endpoints(String.join(",", endpoints)).build();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Options for {@link ZkgateClient}. */
    public static final class Builder {
        private List<Endpoint> endpoints;
        private File caBundle;
        private File clientCert;
        private File clientKey;
        private String serverName;
        private Duration deadline = DEFAULT_DEADLINE;
        private String token;
        private File tokenFile;

        private Builder() {}

        /** A comma-separated list of endpoints, tried in order. Default: {@code ZKGATE_ENDPOINT}. */
        public Builder endpoints(String csv) {
            this.endpoints = Endpoint.parseList(csv);
            return this;
        }

        public Builder endpoints(List<String> list) {
            return endpoints(String.join(",", list));
        }

        /** PEM CA bundle to verify gateways with (TLS). Without it, the JDK's trust store. */
        public Builder caBundle(File pem) {
            this.caBundle = pem;
            return this;
        }

        /** PEM client certificate chain and PKCS#8 PEM key, for mTLS. */
        public Builder clientCertificate(File certPem, File keyPem) {
            this.clientCert = certPem;
            this.clientKey = keyPem;
            return this;
        }

        /** The name to verify the gateway's certificate against, instead of the endpoint's host. */
        public Builder serverNameOverride(String name) {
            this.serverName = name;
            return this;
        }

        /**
         * A bearer token sent as {@code authorization: Bearer <token>} on every call and stream,
         * on every endpoint (so also after a failover): a gateway with {@code --auth-policy}
         * identifies the caller by it. Default: {@code ZKGATE_TOKEN}. Never put it on a command line.
         */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /** Read the bearer token from this file (its content, trimmed) when the client is built. */
        public Builder tokenFile(File file) {
            this.tokenFile = file;
            return this;
        }

        /** Deadline of unary calls (default 5 s). */
        public Builder deadline(Duration deadline) {
            this.deadline = deadline;
            return this;
        }

        public ZkgateClient build() {
            return new ZkgateClient(this);
        }
    }

    /** The fleet, in order. */
    public List<Endpoint> endpoints() {
        return endpoints;
    }

    /** The deadline of unary calls (and of a resign/release's wait for the gateway). */
    public Duration deadline() {
        return deadline;
    }

    private boolean hasTlsOptions() {
        return caBundle != null || clientCert != null || serverName != null;
    }

    /**
     * The channel to endpoint {@code index}, made on first use. Its failures are statuses that
     * the retry rules treat as refusals: a closed client, bad TLS files.
     */
    synchronized Channel channel(int index) {
        if (closed) {
            throw Status.FAILED_PRECONDITION.withDescription("the ZkgateClient is closed").asRuntimeException();
        }
        ManagedChannel ch = channels[index];
        if (ch == null) {
            Endpoint ep = endpoints.get(index);
            NettyChannelBuilder b = NettyChannelBuilder.forAddress(ep.host(), ep.port())
                    // A waiting candidate on a frozen gateway hears nothing: HTTP/2 pings find out.
                    .keepAliveTime(10, TimeUnit.SECONDS)
                    .keepAliveTimeout(5, TimeUnit.SECONDS);
            if (ep.tls(hasTlsOptions())) {
                try {
                    // Not GrpcSslContexts.forClient(): Debian's Netty lacks its JDK ALPN glue.
                    SslContextBuilder ssl = SslContextBuilder.forClient();
                    if (caBundle != null) {
                        ssl.trustManager(caBundle);
                    }
                    if (clientCert != null) {
                        ssl.keyManager(clientCert, clientKey);
                    }
                    SslContext ctx = ZkgateJdkAlpn.clientContext(ssl);
                    b.sslContext(ctx).useTransportSecurity();
                } catch (Exception e) {
                    throw Status.INVALID_ARGUMENT.withDescription("TLS options for " + ep + ": " + e.getMessage())
                            .withCause(e).asRuntimeException();
                }
                if (serverName != null) {
                    b.overrideAuthority(serverName + ":" + ep.port());
                }
            } else {
                b.usePlaintext();
            }
            if (token != null) {
                Metadata headers = new Metadata();
                headers.put(AUTHORIZATION, "Bearer " + token);
                b.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
            }
            ch = b.build();
            channels[index] = ch;
        }
        return ch;
    }

    synchronized boolean isClosed() {
        return closed;
    }

    /** The endpoint after {@code index}, round robin. */
    int next(int index) {
        return (index + 1) % endpoints.size();
    }

    /** Where unary calls and new holds start: the last endpoint that answered. */
    int preferred() {
        return preferred;
    }

    /** Whether a failure moves on to the next endpoint (transport failure, drain, refused connection). */
    static boolean retryable(Status s) {
        return s.getCode() == Status.Code.UNAVAILABLE;
    }

    /**
     * Whether a Campaign/Acquire stream that ended before it was granted is simply tried again
     * on the same gateway: it lost its place without a refusal (ABORTED: the gateway's session
     * ended; OK: resigned or released by lease elsewhere; a cancel or an internal error on the
     * way). Refusals (a bad name, a permits mismatch, a limit) are not retried.
     */
    static boolean retryHere(Status s) {
        switch (s.getCode()) {
            case OK, ABORTED, CANCELLED, INTERNAL, UNKNOWN:
                return true;
            default:
                return false;
        }
    }

    /**
     * One unary call with failover: UNAVAILABLE moves to the next endpoint after the backoff,
     * until every endpoint was tried twice.
     */
    private <T> T unary(Function<Channel, T> call) {
        Backoff backoff = new Backoff();
        int ep = preferred;
        int tries = Math.max(2, endpoints.size() * 2);
        for (int i = 1;; i++) {
            try {
                T out = call.apply(channel(ep));
                preferred = ep;
                return out;
            } catch (StatusRuntimeException e) {
                if (!retryable(e.getStatus()) || i >= tries) {
                    throw e;
                }
                ep = next(ep);
                try {
                    backoff.pause();
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
            }
        }
    }

    private ElectionGrpc.ElectionBlockingStub election(Channel ch) {
        return ElectionGrpc.newBlockingStub(ch).withDeadlineAfter(deadline.toMillis(), TimeUnit.MILLISECONDS);
    }

    private LockGrpc.LockBlockingStub locks(Channel ch) {
        return LockGrpc.newBlockingStub(ch).withDeadlineAfter(deadline.toMillis(), TimeUnit.MILLISECONDS);
    }

    /**
     * How much longer than the call deadline a resign or release by lease may take: the gateway
     * answers once the holder has been told and its znode is gone, which for a holder that does
     * not end its stream is its silence_limit plus the gateway's keepalive timeout plus a second
     * (8.5 s with the gateway's defaults).
     */
    public static final Duration BY_LEASE_EXTRA = Duration.ofSeconds(10);

    private long byLeaseMillis() {
        return deadline.plus(BY_LEASE_EXTRA).toMillis();
    }

    /** A default holder id: {@code java-<pid>}. */
    public static String defaultId() {
        return "java-" + ProcessHandle.current().pid();
    }

    // ---- elections ----

    /** A {@link LeaderSelector} for {@code election} as {@code candidate}; call {@code start()}. */
    public LeaderSelector leaderSelector(String election, String candidate, LeaderSelectorListener listener) {
        return new LeaderSelector(this, election, candidate, listener);
    }

    /** A {@link LeaderSelector} with the candidate id {@link #defaultId()}. */
    public LeaderSelector leaderSelector(String election, LeaderSelectorListener listener) {
        return leaderSelector(election, defaultId(), listener);
    }

    /** Who leads {@code election} now; empty when nobody does. */
    public Optional<LeaderInfo> leader(String election) {
        try {
            return Optional.of(LeaderInfo.of(unary(ch -> election(ch)
                    .leader(LeaderRequest.newBuilder().setElection(election).build())).getLeader()));
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /** Watches {@code election}; see {@link Observation}. */
    public Observation observe(String election, Consumer<Optional<LeaderInfo>> listener) {
        return new Observation(this, election, listener);
    }

    /**
     * Watches every election under {@code prefix} plus {@code elections}; see
     * {@link ManyObservation}.
     */
    public ManyObservation observeMany(String prefix, java.util.List<String> elections,
            java.util.function.BiConsumer<String, Optional<LeaderInfo>> listener, Runnable onSnapshotComplete) {
        return new ManyObservation(this, prefix, elections, listener, onSnapshotComplete);
    }

    /** The candidates in queue order (first page: up to the gateway's reply size). */
    public CandidatesResponse candidates(String election) {
        return unary(ch -> election(ch).candidates(CandidatesRequest.newBuilder().setElection(election).build()));
    }

    /** Whether {@code fencingToken} is the current leader's (for services that fence writes). */
    public boolean validateLeader(String election, long fencingToken) {
        return unary(ch -> election(ch).validate(ElectionValidateRequest.newBuilder().setElection(election)
                .setFencingToken(fencingToken).build())).getCurrent();
    }

    /** The unary Proclaim by lease on endpoint {@code ep} (a leadership's own gateway). */
    LeaderInfo proclaim(int ep, String lease, byte[] value) {
        return LeaderInfo.of(election(channel(ep)).proclaim(ProclaimRequest.newBuilder().setLease(lease)
                .setValue(com.google.protobuf.ByteString.copyFrom(value)).build()).getLeader());
    }

    /** Resign a candidacy by lease, from anywhere. False when the lease is spent or unknown. */
    public boolean resign(String lease) {
        try {
            unary(ch -> ElectionGrpc.newBlockingStub(ch).withDeadlineAfter(byLeaseMillis(), TimeUnit.MILLISECONDS)
                    .resign(ResignRequest.newBuilder().setLease(lease).build()));
            return true;
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
                return false;
            }
            throw e;
        }
    }

    // ---- locks ----

    /** A mutex on {@code name}, owner {@link #defaultId()}. */
    public ZkgateLock lock(String name) {
        return new ZkgateLock(this, name, defaultId(), 1, LockMode.WRITE, null);
    }

    /** One permit of a semaphore with {@code permits} permits (everyone on the name must agree). */
    public ZkgateLock semaphore(String name, int permits) {
        return new ZkgateLock(this, name, defaultId(), permits, LockMode.WRITE, null);
    }

    /** A read-write lock on {@code name}. */
    public ZkgateReadWriteLock readWriteLock(String name) {
        return new ZkgateReadWriteLock(new ZkgateLock(this, name, defaultId(), 1, LockMode.READ, null),
                new ZkgateLock(this, name, defaultId(), 1, LockMode.WRITE, null));
    }

    /** A {@link LockSelector} running {@code listener} while {@code lock} is held. */
    public LockSelector lockSelector(ZkgateLock lock, LockSelector.Listener listener) {
        return new LockSelector(this, lock, listener);
    }

    /** Holders and waiters of a lock (first page). */
    public HoldersResponse holders(String name) {
        return unary(ch -> locks(ch).holders(HoldersRequest.newBuilder().setName(name).build()));
    }

    /** Whether {@code fencingToken} is a current holder's of lock {@code name}. */
    public boolean validateLock(String name, long fencingToken) {
        return unary(ch -> locks(ch).validate(LockValidateRequest.newBuilder().setName(name)
                .setFencingToken(fencingToken).build())).getCurrent();
    }

    /** Release a lock by lease, from anywhere. False when the lease is spent or unknown. */
    public boolean release(String lease) {
        try {
            unary(ch -> LockGrpc.newBlockingStub(ch).withDeadlineAfter(byLeaseMillis(), TimeUnit.MILLISECONDS)
                    .release(ReleaseRequest.newBuilder().setLease(lease).build()));
            return true;
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
                return false;
            }
            throw e;
        }
    }

    /**
     * Shuts the channels down (open streams are cancelled: their znodes go). Close the
     * selectors, locks and observations first; anything still running then stops with a
     * {@code FAILED_PRECONDITION} refusal instead of retrying.
     */
    @Override
    public synchronized void close() {
        closed = true;
        for (ManagedChannel ch : channels) {
            if (ch != null) {
                ch.shutdownNow();
            }
        }
        for (ManagedChannel ch : channels) {
            if (ch != null) {
                try {
                    ch.awaitTermination(2, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }
}
