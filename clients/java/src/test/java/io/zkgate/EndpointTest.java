package io.zkgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Endpoint lists and the backoff, without a network. */
class EndpointTest {
    @Test
    void parsesTheThreeForms() {
        List<Endpoint> eps = Endpoint.parseList("gw-a:50051, http://10.0.0.2:7000,https://[::1]:443/,");
        assertEquals(3, eps.size());
        assertEquals("gw-a", eps.get(0).host());
        assertEquals(50051, eps.get(0).port());
        assertFalse(eps.get(0).tls(false), "bare host:port is plaintext without TLS options");
        assertTrue(eps.get(0).tls(true), "and TLS with them");
        assertFalse(eps.get(1).tls(true), "http:// is always plaintext");
        assertEquals("::1", eps.get(2).host());
        assertTrue(eps.get(2).tls(false), "https:// is always TLS");
        assertEquals("http://10.0.0.2:7000", eps.get(1).toString(), "shown as given");
    }

    @Test
    void refusesNonsense() {
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("grpc://h:1"));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("no-port"));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parseList(" , "));
    }

    @Test
    void backoffIsFullJitterDoublingToTwoSeconds() {
        Backoff b = new Backoff();
        for (int i = 0; i < 12; i++) {
            long ceiling = Math.min(Backoff.CAP_MILLIS, Backoff.BASE_MILLIS << i);
            long pause = b.nextMillis();
            assertTrue(pause >= 0 && pause <= ceiling, "pause " + pause + " over " + ceiling);
        }
        b.reset();
        assertTrue(b.nextMillis() <= Backoff.BASE_MILLIS, "reset starts over at the base");
    }

    @Test
    void theTokenComesFromCodeOrAFile() throws Exception {
        File file = File.createTempFile("zkgate-token", "");
        File empty = File.createTempFile("zkgate-empty", "");
        file.deleteOnExit();
        empty.deleteOnExit();
        Files.writeString(file.toPath(), "from-file\n");
        Files.writeString(empty.toPath(), "\n");
        assertEquals("from-code", ZkgateClient.resolveToken(" from-code ", file));
        assertEquals("from-file", ZkgateClient.resolveToken(null, file));
        assertThrows(IllegalArgumentException.class, () -> ZkgateClient.resolveToken(null, empty));
    }
}
