"""TLS against a real `storybus dev` serving HTTPS with a private CA and
taking client certificates: the CA file, a client certificate that gets
the tokens without a secret (mutual TLS), and an untrusted certificate,
which is configuration and never retried."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CMS_ID, CMS_SECRET, REPO, WORKSPACE, Bus, FakeClock, start_dev, stop_dev
from storybus_client import (
    CertificateError,
    Client,
    ClientCredentials,
    FileOutbox,
    HTTPTransport,
    Message,
    StorybusError,
    tls_context,
)

SAN_URI = "spiffe://newsroom.example/ns/python/sa/publisher"


@dataclass
class Certs:
    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> Certs:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client
    certificate with the connection's URI SAN, made with openssl."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=storybus python test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    for name, ext in [("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                      ("client", f"subjectAltName=URI:{SAN_URI}\nextendedKeyUsage=clientAuth\n")]:
        (d / f"{name}.ext").write_text(ext)
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return Certs(d / "ca.crt", (d / "server.crt", d / "server.key"), (d / "client.crt", d / "client.key"))


@pytest.fixture(scope="module")
def tls_bus(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Bus, Certs]]:
    """`storybus dev` on HTTPS whose cms connection also takes the client
    certificate with SAN_URI."""
    d = tmp_path_factory.mktemp("tls")
    certs = make_certs(d)
    sample = (REPO / "config" / "dev" / "workspace-newsroom.yaml").read_text()
    assert "    clientID: cms\n" in sample
    config = d / "workspace.yaml"
    config.write_text(sample.replace("    clientID: cms\n",
                                     f"    clientID: cms\n    tlsClientAuth:\n      sanURI: {SAN_URI}\n", 1))
    bus = start_dev(binary, d / "data", "--config", str(config),
                    "--tls-cert-file", str(certs.server[0]), "--tls-key-file", str(certs.server[1]),
                    "--tls-client-ca-file", str(certs.ca))
    assert bus.url.startswith("https://")
    yield bus, certs
    stop_dev(bus)


def snapshot() -> Message:
    return Message.build(message_type="story.context", system_id="cms",
                         payload={"story_id": f"py-tls-{uuid.uuid4().hex[:8]}", "sequence_number": 1,
                                  "state": "draft", "headline": "Over TLS"})


def test_a_ca_file_and_a_secret(tls_bus: tuple[Bus, Certs]) -> None:
    bus, certs = tls_bus
    transport = HTTPTransport(tls_context(ca_file=str(certs.ca)))
    tokens = ClientCredentials(bus.url, WORKSPACE, CMS_ID, CMS_SECRET, transport=transport)
    with Client(bus.url, WORKSPACE, tokens, transport=transport) as client:
        assert client.publish(snapshot()).status == 202


def test_a_client_certificate_gets_the_tokens_without_a_secret(tls_bus: tuple[Bus, Certs]) -> None:
    bus, certs = tls_bus
    ctx = tls_context(ca_file=str(certs.ca), cert_file=str(certs.client[0]), key_file=str(certs.client[1]))
    transport = HTTPTransport(ctx)
    tokens = ClientCredentials(bus.url, WORKSPACE, CMS_ID, transport=transport)
    with Client(bus.url, WORKSPACE, tokens, transport=transport) as client:
        assert client.publish(snapshot()).status == 202
    # The token is bound to the certificate: without it, the bus refuses it.
    bare = HTTPTransport(tls_context(ca_file=str(certs.ca)))
    with Client(bus.url, WORKSPACE, tokens, transport=bare, clock=FakeClock()) as client:
        with pytest.raises(StorybusError) as info:
            client.publish(snapshot())
    assert (info.value.status, info.value.rule) == (401, "auth.token.invalid")


def test_an_untrusted_certificate_is_configuration_and_not_retried(tls_bus: tuple[Bus, Certs], tmp_path: Path) -> None:
    bus, _ = tls_bus
    clock = FakeClock()
    alerts: list[StorybusError] = []
    outbox = FileOutbox(tmp_path)
    m = snapshot()
    # The system's roots do not hold the test CA.
    tokens = ClientCredentials(bus.url, WORKSPACE, CMS_ID, CMS_SECRET)
    with Client(bus.url, WORKSPACE, tokens, clock=clock, outbox=outbox, on_alert=alerts.append) as client:
        with pytest.raises(CertificateError) as info:
            client.publish(m)
    e = info.value
    assert clock.sleeps == [], "an untrusted certificate was retried"
    assert not e.temporary and not e.refused and e.kept and e.needs_alert
    assert "not retried; kept in the outbox" in str(e) and e.error_class == "not-allowed"
    assert "kept in the outbox" in outbox.list_pending()[0].reason
    assert alerts == [e]
    assert [x.message for x in outbox.list_pending()] == [m.raw]


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError, match="both"):
        tls_context(cert_file="client.crt")
