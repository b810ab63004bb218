"""The gate reaches the edge in the `up` that creates its load balancer: the probe connects to an in-cluster
address while TLS (SNI, certificate check) and the Host header name the public host, as curl's --connect-to does.
A local HTTPS server on 127.0.0.1 with a certificate for `llm.example.test` only (tests/fixtures/tls/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_serving.verification import probe
from llm_serving.verification.probe import PASS, Settings, Target
from tests.support.openai_server import KEY, Behaviour, OpenAIServer

TLS = Path(__file__).resolve().parents[2] / "fixtures" / "tls"
HOST = "llm.example.test"  # .test never resolves (RFC 6761): only the connect-to address can reach it


@pytest.fixture
def trusted_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    # ssl.create_default_context() loads OpenSSL's default paths, which honour SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    monkeypatch.setattr(probe, "CONNECT_TO", {})


def test_the_edge_is_checked_by_its_public_name_through_the_in_cluster_address(trusted_ca):
    server = OpenAIServer(Behaviour(), tls=(TLS / "edge.pem", TLS / "edge.key"))
    with server as url:
        port = int(url.split(":")[2].split("/")[0])
        target = Target("edge", f"https://{HOST}/v1", connect_to=f"127.0.0.1:{port}")
        report = probe.run(Settings("llama-8b", (target,), request_timeout_seconds=20), KEY)
    assert report["verdict"] == PASS, report["failures"]
    assert {c["name"] for c in report["checks"]} == {"models", "auth", "stream", "completion", "fields"}
    # Every request named the public host: the certificate matched it and Envoy would route by it.
    assert server.hosts and set(server.hosts) == {HOST}


def test_a_certificate_for_another_name_fails_even_through_the_address(trusted_ca):
    server = OpenAIServer(Behaviour(), tls=(TLS / "edge.pem", TLS / "edge.key"))
    with server as url:
        port = int(url.split(":")[2].split("/")[0])
        target = Target("edge", "https://other.example.test/v1", connect_to=f"127.0.0.1:{port}")
        report = probe.run(Settings("llama-8b", (target,), request_timeout_seconds=20), KEY)
    assert report["verdict"] == "fail"
    assert any("certificate" in line.lower() or "hostname" in line.lower() for line in report["failures"])
    assert server.hosts == []  # no request was sent over an unverified connection


def test_connect_to_must_be_host_and_port():
    with pytest.raises(probe.UsageError, match="expected host:port"):
        probe.run(Settings("m", (Target("edge", f"https://{HOST}/v1", connect_to="no-port"),)), KEY)
