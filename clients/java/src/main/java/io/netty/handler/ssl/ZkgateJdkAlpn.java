package io.netty.handler.ssl;

import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLException;

/**
 * ALPN over the JDK's own TLS for Debian's Netty.
 *
 * <p>gRPC needs ALPN to agree on HTTP/2 over TLS. Java 9+ has ALPN built in and Netty 4.1.48
 * still carries the engine that uses it ({@code Java9SslEngine}), but Debian's libnetty-java
 * patches out {@code JdkAlpnApplicationProtocolNegotiator} (it also covered Jetty's alpn-boot),
 * so {@code GrpcSslContexts.forClient().build()} fails with "JDK provider does not support ALPN
 * protocol"; and Debian's tcnative library (the OpenSSL route) is installed under a name Netty
 * does not look for. This class restores the client side of that negotiator: it lives in Netty's
 * package because the engine and the context constructor it needs are package-private. Used by
 * {@code io.zkgate.ZkgateClient} for {@code https://} endpoints; nothing else.
 */
@SuppressWarnings("deprecation")
public final class ZkgateJdkAlpn {
    private ZkgateJdkAlpn() {}

    /**
     * A client context offering ALPN {@code h2} with the JDK provider, with the trust and key
     * material of {@code builder} (a {@code SslContextBuilder.forClient()} with
     * {@code trustManager}/{@code keyManager} set, and no application protocol config).
     */
    public static SslContext clientContext(SslContextBuilder builder) throws SSLException {
        SslContext plain = builder.sslProvider(SslProvider.JDK).build();
        JdkApplicationProtocolNegotiator negotiator = new JdkBaseApplicationProtocolNegotiator(
                new JdkApplicationProtocolNegotiator.SslEngineWrapperFactory() {
                    @Override
                    public SSLEngine wrapSslEngine(SSLEngine engine, JdkApplicationProtocolNegotiator n,
                            boolean isServer) {
                        return new Java9SslEngine(engine, n, isServer);
                    }
                },
                JdkBaseApplicationProtocolNegotiator.NO_FAIL_SELECTOR_FACTORY,
                JdkBaseApplicationProtocolNegotiator.NO_FAIL_SELECTION_LISTENER_FACTORY,
                "h2");
        return new JdkSslContext(((JdkSslContext) plain).context(), true, null,
                IdentityCipherSuiteFilter.INSTANCE, negotiator, ClientAuth.NONE, null, false);
    }
}
