"""A rotated API key or HF token rolls the pods that read it, and no digest leaks the value."""

from __future__ import annotations

import hashlib
import re

import pytest

from llm_serving.platform import credential_revision, derived_upstream_key
from llm_serving.stack.stack import API_KEY_REVISION_ANNOTATION, HF_TOKEN_REVISION_ANNOTATION, ServingStack
from stacks.offline import render
from tests.support.components import EXISTING_EVERYTHING, run, stack_args

_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def test_a_credential_revision_is_a_short_keyed_digest_that_changes_with_the_credential():
    first, second = credential_revision("k" * 32), credential_revision("k" * 31 + "l")
    assert re.fullmatch(r"[0-9a-f]{16}", first) and re.fullmatch(r"[0-9a-f]{16}", second)
    assert first != second
    assert credential_revision("k" * 32) == first  # the same key never rolls the pods
    # Not the plain SHA-256 of the key (which anyone could look up for a leaked or guessed key).
    assert first != hashlib.sha256(b"k" * 32).hexdigest()[:16]


def test_the_upstream_key_is_derived_but_is_not_the_client_key():
    client = "client-key-0123456789abcdef"
    upstream = derived_upstream_key(client)
    assert re.fullmatch(r"[0-9a-f]{64}", upstream) and client not in upstream
    assert derived_upstream_key(client + "x") != upstream


@pytest.mark.parametrize("empty", ["", None])
def test_an_empty_credential_has_no_revision(empty):
    with pytest.raises((ValueError, AttributeError)):
        credential_revision(empty)


def _raw_template_annotations(monkeypatch, credential: str) -> dict[str, dict]:
    """ServingStack with its API key and HF token both `credential` (the component tier, on a cluster that runs
    everything: the model's workloads and little else); the pod-template annotations as the provider would receive
    them (secrets still wrapped), per workload type."""
    monitors: list[render.RecordingMonitor] = []

    class Capturing(render.RecordingMonitor):
        def __init__(self, mocks):
            super().__init__(mocks)
            monitors.append(self)

    monkeypatch.setattr(render, "RecordingMonitor", Capturing)
    args = stack_args(EXISTING_EVERYTHING, apiKey=credential, hfToken=credential)
    result = run(lambda: ServingStack("llm-serving", args))
    (monitor,) = monitors
    found = {}
    for recorded in monitor.recorded:
        workload = recorded.type in ("kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job")
        # The compile cache's producer and the endpoint picker read neither credential (no API key, no Hub):
        # they never roll for them.
        if workload and "llama-8b" in recorded.name and not {"verify", "compile", "epp"} & set(
                recorded.name.split("-")):
            found[recorded.type] = recorded.inputs["spec"]["template"]["metadata"]["annotations"]
    deployment = result.manifest("Deployment", "llama-8b")
    assert deployment["spec"]["template"]["metadata"]["annotations"][API_KEY_REVISION_ANNOTATION] == "[secret]"
    return found


def test_a_new_api_key_or_hf_token_changes_the_pod_templates_and_stays_secret(monkeypatch):
    old_key, new_key = "old-key-0123456789abcdef01234567", "new-key-0123456789abcdef01234567"
    before = _raw_template_annotations(monkeypatch, old_key)
    after = _raw_template_annotations(monkeypatch, new_key)
    for kind, annotation in (("kubernetes:apps/v1:Deployment", API_KEY_REVISION_ANNOTATION),
                             ("kubernetes:batch/v1:Job", HF_TOKEN_REVISION_ANNOTATION)):
        old, new = before[kind][annotation], after[kind][annotation]
        # Marked secret on the wire: Pulumi encrypts it in state and masks it in previews.
        assert old[_SIG_KEY] == _SECRET_SIG and new[_SIG_KEY] == _SECRET_SIG
        assert old["value"] == credential_revision(old_key) and new["value"] == credential_revision(new_key)
        assert old["value"] != new["value"]  # a changed template: the Deployment rolls, the Job is replaced
        assert old_key not in str(before[kind]) and new_key not in str(after[kind])
