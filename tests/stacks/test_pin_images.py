"""`python -m stacks pin-images`: tags resolved to digests through a registry's API (a local registry on 127.0.0.1
that asks for a bearer token, as Docker Hub and ghcr.io do), and the digest written into the stack file with its
comments kept."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks import images
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from tests.support.local_http import serving

INDEX = json.dumps({"schemaVersion": 2, "mediaType": images.MANIFEST_TYPES[0], "manifests": []}).encode()
INDEX_DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()
TOKEN = "pull-token-for-vllm"


class Registry(http.server.BaseHTTPRequestHandler):
    """One repository, vllm/vllm-openai, with tag v0.33.0; a token from /token for the pull scope."""

    digest_header = True
    requests: list[tuple[str, str, dict[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _manifest(self, body: bool) -> None:
        type(self).requests.append((self.command, self.path, dict(self.headers)))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            realm = f"http://{self.headers['Host']}/token"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="local-registry",'
                                                 'scope="repository:vllm/vllm-openai:pull"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path != "/v2/vllm/vllm-openai/manifests/v0.33.0":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", images.MANIFEST_TYPES[0])
        if self.digest_header:
            self.send_header("Docker-Content-Digest", INDEX_DIGEST)
        self.send_header("Content-Length", str(len(INDEX)))
        self.end_headers()
        if body:
            self.wfile.write(INDEX)

    def do_HEAD(self) -> None:
        self._manifest(body=False)

    def do_GET(self) -> None:
        if self.path.startswith("/token?"):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            ok = query == {"service": ["local-registry"], "scope": ["repository:vllm/vllm-openai:pull"]}
            payload = json.dumps({"token": TOKEN} if ok else {}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self._manifest(body=True)


@pytest.fixture
def registry() -> Iterator[str]:
    Registry.requests = []
    Registry.digest_header = True
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def test_references_name_their_registry_as_docker_does():
    assert images.parse_reference("vllm/vllm-openai", "v0.33.0") == images.ImageReference(
        "registry-1.docker.io", "vllm/vllm-openai", "v0.33.0")
    assert images.parse_reference("python", "3.12").repository == "library/python"
    ghcr = images.parse_reference("ghcr.io/llm-d/llm-d-router-endpoint-picker", "v0.10.0")
    assert (ghcr.registry, ghcr.repository, ghcr.base_url) == ("ghcr.io", "llm-d/llm-d-router-endpoint-picker",
                                                               "https://ghcr.io")
    # Plain HTTP only on this machine.
    assert images.parse_reference("127.0.0.1:5000/vllm/vllm-openai", "x").base_url == "http://127.0.0.1:5000"


def test_a_tag_resolves_to_the_index_digest_after_the_token_challenge(registry):
    digest = images.resolve(images.parse_reference(f"{registry}/vllm/vllm-openai", "v0.33.0"))
    assert digest == INDEX_DIGEST
    (refused, accepted) = Registry.requests
    assert (refused[0], accepted[0]) == ("HEAD", "HEAD")  # no manifest body is fetched when the header answers
    assert "Authorization" not in refused[2] and accepted[2]["Authorization"] == f"Bearer {TOKEN}"
    # An index first: a multi-architecture image answers the digest a pull on any node can use.
    assert accepted[2]["Accept"].split(", ")[0] == "application/vnd.oci.image.index.v1+json"


def test_without_the_digest_header_the_digest_is_the_manifests_own_sha256(registry):
    Registry.digest_header = False
    assert images.resolve(images.parse_reference(f"{registry}/vllm/vllm-openai", "v0.33.0")) == INDEX_DIGEST
    assert [r[0] for r in Registry.requests] == ["HEAD", "HEAD", "GET"]


def test_an_unknown_tag_is_one_line(registry):
    with pytest.raises(images.RegistryError, match=r"vllm/vllm-openai:v9\.9\.9: no such tag$"):
        images.resolve(images.parse_reference(f"{registry}/vllm/vllm-openai", "v9.9.9"))


DEV_IMAGE = "      image:\n        repository: {repository}\n        tag: v0.33.0\n"


def _dev_with_image(stack_dir: Path, repository: str) -> Path:
    path = stack_dir / "Pulumi.dev.yaml"
    text = path.read_text()
    anchor = "      maxModelLen: 8192\n"
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + DEV_IMAGE.format(repository=repository), 1))
    return path


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = images.main(list(argv), stack_path=Path, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_write_pins_the_digest_and_keeps_every_comment(registry, stack_dir):
    path = _dev_with_image(stack_dir, f"{registry}/vllm/vllm-openai")
    before = path.read_text()
    code, out, err = _run(str(path), "--write")
    assert (code, err) == (0, "")
    assert out == f"llama-8b: {registry}/vllm/vllm-openai:v0.33.0 -> {INDEX_DIGEST}\nwrote {path}\n"
    after = path.read_text()
    assert [line for line in after.splitlines() if line.lstrip().startswith("#")] == [
        line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert load_stack_file(path)[1].models[0].image.digest == INDEX_DIGEST
    # Run again: nothing to change.
    assert _run(str(path))[1] == f"llama-8b: {registry}/vllm/vllm-openai:v0.33.0 is pinned at {INDEX_DIGEST}\n"


def test_without_write_the_file_is_untouched_and_an_unreachable_registry_exits_1(stack_dir):
    path = _dev_with_image(stack_dir, "127.0.0.1:9/vllm/vllm-openai")
    before = path.read_text()
    code, out, err = _run(str(path))
    assert (code, out) == (1, "")
    assert err.startswith("pin-images: llama-8b: http://127.0.0.1:9/v2/vllm/vllm-openai/manifests/v0.33.0: ")
    assert path.read_text() == before


@pytest.mark.parametrize("item,expected", [
    # No image block: one is added at the end of the item.
    ("  - name: a\n    maxModelLen: 1\n",
     '  - name: a\n    maxModelLen: 1\n    image:\n      digest: "sha256:{d}"\n'),
    # An image block without a digest: the digest joins it, at its children's indent.
    ("  - name: a\n    image:\n      tag: v1  # reviewed\n    maxModelLen: 1\n",
     '  - name: a\n    image:\n      tag: v1  # reviewed\n      digest: "sha256:{d}"\n    maxModelLen: 1\n'),
    # A digest already there: replaced in place.
    ("  - name: a\n    image:\n      digest: sha256:" + "0" * 64 + "\n      tag: v1\n",
     '  - name: a\n    image:\n      digest: "sha256:{d}"\n      tag: v1\n'),
])
def test_the_digest_line_goes_where_the_model_reads_it(item, expected):
    digest = "sha256:" + "a" * 64
    other = "  - name: b\n    maxModelLen: 2\n"
    text = "config:\n  llm-serving:models:\n" + "".join("  " + line + "\n" for line in (item + other).splitlines())
    updated = images.set_digest(text, "a", digest)
    images._check_edit(text, updated, "a", digest)
    want = "config:\n  llm-serving:models:\n" + "".join(
        "  " + line + "\n" for line in (expected.format(d="a" * 64) + other).splitlines())
    assert updated == want


def test_a_model_the_file_does_not_list_is_refused():
    text = "config:\n  llm-serving:models:\n    - name: a\n      maxModelLen: 1\n"
    with pytest.raises(ConfigError) as error:
        images.set_digest(text, "b", "sha256:" + "a" * 64)
    assert error.value.problems[0].line().startswith("llm-serving:models[b]: no such model")


ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


def _ecr():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("ecr", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_a_private_ecr_image_resolves_through_describe_images():
    # ECR answers the registry API with a Basic challenge (an ECR authorization token): its own API instead.
    client, stub = _ecr()
    reference = images.parse_reference(f"{ECR}/vllm-openai-efa", "v0.33.0")
    stub.add_response("describe_images", {"imageDetails": [{"imageDigest": INDEX_DIGEST}]},
                      {"registryId": "123456789012", "repositoryName": "vllm-openai-efa",
                       "imageIds": [{"imageTag": "v0.33.0"}]})
    with stub:
        assert images.resolve_ecr(reference, client) == INDEX_DIGEST
    stub.add_client_error("describe_images", service_error_code="ImageNotFoundException")
    with stub, pytest.raises(images.RegistryError, match=r"vllm-openai-efa:v0\.33\.0: no such tag"):
        images.resolve_ecr(reference, client)
    assert images.ECR_REGISTRY.match(ECR) and not images.ECR_REGISTRY.match("ghcr.io")
