package io.zkgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.File;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * A gateway with TLS that requires client certificates ({@code ZKGATE_TLS_ADDR}, PEM files in
 * {@code ZKGATE_TLS_DIR}: ca.pem, client.pem, client.key; the server certificate names
 * 127.0.0.1 and localhost).
 */
class TlsTest {
    static File pem(String name) {
        return new File(Fixture.env("ZKGATE_TLS_DIR"), name);
    }

    static ZkgateClient.Builder mtls() {
        return ZkgateClient.builder().caBundle(pem("ca.pem"))
                .clientCertificate(pem("client.pem"), pem("client.key")).deadline(Duration.ofSeconds(3));
    }

    @Test
    void mutualTlsHoldsALock() throws Exception {
        try (ZkgateClient client = mtls().endpoints("https://" + Fixture.env("ZKGATE_TLS_ADDR")).build();
                ZkgateLock lock = client.lock(Fixture.name("tls"))) {
            assertTrue(lock.tryAcquire(Duration.ofSeconds(10)));
            assertTrue(client.validateLock(lock.name(), lock.fencingToken()));
        }
    }

    @Test
    void serverNameOverrideAndBareHostPortWithTlsOptions() throws Exception {
        // A bare host:port is TLS when TLS options are given; the certificate is checked
        // against the override, not the address.
        String port = Fixture.env("ZKGATE_TLS_ADDR").replaceAll(".*:", "");
        try (ZkgateClient client = mtls().endpoints("127.0.0.1:" + port).serverNameOverride("localhost").build()) {
            assertTrue(client.leader(Fixture.name("nobody")).isEmpty());
        }
    }

    @Test
    void withoutAClientCertificateTheGatewayRefuses() {
        try (ZkgateClient client = ZkgateClient.builder().caBundle(pem("ca.pem")).deadline(Duration.ofSeconds(2))
                .endpoints("https://" + Fixture.env("ZKGATE_TLS_ADDR")).build()) {
            StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> client.leader("x"));
            assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode(), e.toString());
        }
    }
}
