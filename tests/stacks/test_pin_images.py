"""`python -m stacks pin-images`: tags resolved to digests through a registry's API (a local registry on 127.0.0.1
that asks for a bearer token for some repositories, as Docker Hub, ghcr.io and nvcr.io do, and serves others
anonymously, as registry.k8s.io and quay.io do), and the digests written into the stack file with its comments kept:
the models' vLLM image and every image the stack's charts run. The chart images keep their real names; the tests
send them to the local registry (`via`), through the same client code."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llm_serving.platform import versions
from llm_serving.platform.versions import ChartImage
from llm_serving.stack import chart_images
from stacks import images
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from tests.support.local_http import serving

INDEX = json.dumps({"schemaVersion": 2, "mediaType": images.MANIFEST_TYPES[0], "manifests": []}).encode()
INDEX_DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()
TOKEN = "pull-token-for-vllm"
# Repositories the local registry serves without a token: the chart images of these registries (their real names
# are the repository paths below the local registry, `via`).
ANONYMOUS = ("registry.k8s.io/", "quay.io/")


def manifest(name: str, tag: str) -> bytes:
    """The index the local registry serves for `name:tag` (vllm/vllm-openai:v0.33.0: INDEX); unique per image."""
    if (name, tag) == ("vllm/vllm-openai", "v0.33.0"):
        return INDEX
    return json.dumps({"schemaVersion": 2, "mediaType": images.MANIFEST_TYPES[0], "manifests": [],
                       "annotations": {"name": f"{name}:{tag}"}}).encode()


def digest_of(name: str, tag: str) -> str:
    return "sha256:" + hashlib.sha256(manifest(name, tag)).hexdigest()


def token_for(name: str) -> str:
    return TOKEN if name == "vllm/vllm-openai" else f"pull-token-for-{name}"


class Registry(http.server.BaseHTTPRequestHandler):
    """Any repository and tag (vllm/vllm-openai: only v0.33.0, for the unknown-tag case); a token from /token for
    the pull scope of each repository, except the ANONYMOUS ones."""

    digest_header = True
    requests: list[tuple[str, str, dict[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _manifest(self, body: bool) -> None:
        type(self).requests.append((self.command, self.path, dict(self.headers)))
        name, _, tag = self.path.removeprefix("/v2/").rpartition("/manifests/")
        anonymous = name.startswith(ANONYMOUS)
        if not anonymous and self.headers.get("Authorization") != f"Bearer {token_for(name)}":
            realm = f"http://{self.headers['Host']}/token"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="local-registry",'
                                                 f'scope="repository:{name}:pull"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if name == "vllm/vllm-openai" and tag != "v0.33.0":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        payload = manifest(name, tag)
        self.send_response(200)
        self.send_header("Content-Type", images.MANIFEST_TYPES[0])
        if self.digest_header:
            self.send_header("Docker-Content-Digest", digest_of(name, tag))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def do_HEAD(self) -> None:
        self._manifest(body=False)

    def do_GET(self) -> None:
        if self.path.startswith("/token?"):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            scope = query.get("scope", [""])[0]
            name = scope.removeprefix("repository:").removesuffix(":pull")
            ok = query == {"service": ["local-registry"], "scope": [f"repository:{name}:pull"]}
            payload = json.dumps({"token": token_for(name)} if ok else {}).encode()
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


def via(host: str) -> Callable[[images.ImageReference], str]:
    """`images.resolve`, with every image of another registry served by the local one at `host` under its full
    name (`registry.k8s.io/lws/lws` -> `<host>/registry.k8s.io/lws/lws`): the client's own code, no network."""

    def resolve(reference: images.ImageReference) -> str:
        if reference.registry != host:
            reference = images.ImageReference(host, f"{reference.registry}/{reference.repository}", reference.tag)
        return images.resolve(reference)

    return resolve


def test_references_name_their_registry_as_docker_does():
    assert images.parse_reference("vllm/vllm-openai", "v0.33.0") == images.ImageReference(
        "registry-1.docker.io", "vllm/vllm-openai", "v0.33.0")
    assert images.parse_reference("python", "3.12").repository == "library/python"
    ghcr = images.parse_reference("ghcr.io/llm-d/llm-d-router-endpoint-picker", "v0.10.0")
    assert (ghcr.registry, ghcr.repository, ghcr.base_url) == ("ghcr.io", "llm-d/llm-d-router-endpoint-picker",
                                                               "https://ghcr.io")
    # Plain HTTP only on this machine.
    assert images.parse_reference("127.0.0.1:5000/vllm/vllm-openai", "x").base_url == "http://127.0.0.1:5000"
    # versions.py spells Docker Hub out; its registry API answers at registry-1.docker.io only.
    assert images.parse_reference("docker.io/envoyproxy/gateway", "v1.9.0") == images.ImageReference(
        "registry-1.docker.io", "envoyproxy/gateway", "v1.9.0")
    assert images.parse_reference("docker.io/python", "3.12").repository == "library/python"


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


def _run(host: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = images.main(list(argv), stack_path=Path, stdout=out, stderr=err, registry=via(host))
    return code, out.getvalue(), err.getvalue()


def served_digest(image: ChartImage) -> str:
    """The digest the local registry answers for a chart image, under the name `via` sends it by."""
    reference = images.parse_reference(image.repository, image.tag)
    return digest_of(f"{reference.registry}/{reference.repository}", image.tag)


def _chart_lines(path: Path, verb: str) -> list[str]:
    """What the command prints for each chart image of the stack at `path`: `->` new digests, or `is pinned at`."""
    config = load_stack_file(path)[1]
    lines = []
    seen = set()
    for chart in chart_images.installed_charts(config):
        for image in chart.images:
            if image.reference not in seen:
                seen.add(image.reference)
                lines.append(f"{chart.pin.chart}: {image.reference} {verb} {served_digest(image)}")
    return lines


def test_write_pins_every_digest_and_keeps_every_comment(registry, stack_dir):
    path = _dev_with_image(stack_dir, f"{registry}/vllm/vllm-openai")
    before = path.read_text()
    code, out, err = _run(registry, str(path), "--write")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"llama-8b: {registry}/vllm/vllm-openai:v0.33.0 -> {INDEX_DIGEST}",
                                *_chart_lines(path, "->"), f"wrote {path}"]
    after = path.read_text()
    # The comments of the file are all kept; the chart block brings its own two lines, at its head.
    comments = [line for line in after.splitlines() if line.lstrip().startswith("#")]
    assert comments == [line for line in before.splitlines() if line.lstrip().startswith("#")] + [
        line for line in images.CHART_DIGESTS_COMMENT.splitlines()]
    config = load_stack_file(path)[1]
    assert config.models[0].image.digest == INDEX_DIGEST
    running = chart_images.chart_images(config)
    assert len(running) >= 15  # dev: the autoscaler, the Prometheus stack, the GPU add-ons, KEDA, the edge
    assert config.chart_image_digests == {image.reference: served_digest(image) for image in running}
    # Both paths of the client ran: a token for the Hub, ghcr.io and nvcr.io images, none for registry.k8s.io's.
    asked: dict[str, list[str | None]] = {}
    for _, target, headers in Registry.requests:
        asked.setdefault(target.split("/manifests/")[0].removeprefix("/v2/"), []).append(headers.get("Authorization"))
    hub = "registry-1.docker.io/envoyproxy/gateway"
    assert asked[hub] == [None, f"Bearer {token_for(hub)}"]  # refused, then answered with the token
    assert asked["registry.k8s.io/nfd/node-feature-discovery"] == [None]  # answered at once
    # Run again: nothing to change.
    assert _run(registry, str(path))[1].splitlines() == [
        f"llama-8b: {registry}/vllm/vllm-openai:v0.33.0 is pinned at {INDEX_DIGEST}",
        *_chart_lines(path, "is pinned at")]


def test_without_write_the_file_is_untouched_and_an_unreachable_registry_exits_1(stack_dir):
    path = _dev_with_image(stack_dir, "127.0.0.1:9/vllm/vllm-openai")
    before = path.read_text()
    code, out, err = _run("127.0.0.1:9", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("pin-images: llama-8b: http://127.0.0.1:9/v2/vllm/vllm-openai/manifests/v0.33.0: ")
    # Each chart image is one line too, named by its chart.
    assert "pin-images: gateway-helm: http://127.0.0.1:9/v2/registry-1.docker.io/envoyproxy/gateway/" in err
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


def test_a_list_at_its_keys_indent_as_clone_writes_it():
    """`clone` writes with PyYAML's safe_dump, whose block sequences sit at their key's indent."""
    digest = "sha256:" + "a" * 64
    text = ("config:\n  llm-serving:models:\n  - name: a\n    maxModelLen: 1\n  - name: b\n    maxModelLen: 2\n"
            "  llm-serving:environment: staging\n")
    updated = images.set_digest(text, "a", digest)
    images._check_edit(text, updated, "a", digest)
    assert updated == text.replace("maxModelLen: 1\n", f'maxModelLen: 1\n    image:\n      digest: "{digest}"\n')


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


def _batch_get_image(account: str, repository: str, tag: str) -> dict[str, object]:
    """The request a pull's manifest read makes (botocore's Stubber checks it against the ECR service model)."""
    return {"registryId": account, "repositoryName": repository, "imageIds": [{"imageTag": tag}],
            "acceptedMediaTypes": list(images.MANIFEST_TYPES)}


def test_the_efa_device_plugin_image_in_eks_own_registry_resolves_with_pull_permission_only():
    # EKS's registry refuses ecr:DescribeImages to other accounts (jetstack/version-checker#167) and lets them pull:
    # BatchGetImage, the manifest read of a pull, is the only call.
    plugin = versions.EFA_DEVICE_PLUGIN.images[0]
    reference = images.parse_reference(plugin.repository, plugin.tag)
    match = images.ECR_REGISTRY.match(reference.registry)
    assert match is not None and (match["account"], match["region"]) == ("602401143452", "us-west-2")
    client, stub = _ecr()
    stub.add_response("batch_get_image", {"images": [{
        "registryId": "602401143452", "repositoryName": reference.repository,
        "imageId": {"imageTag": plugin.tag, "imageDigest": INDEX_DIGEST},
        "imageManifest": INDEX.decode(), "imageManifestMediaType": images.MANIFEST_TYPES[0]}], "failures": []},
        _batch_get_image("602401143452", "eks/aws-efa-k8s-device-plugin", plugin.tag))
    with stub:
        assert images.resolve_ecr(reference, client) == INDEX_DIGEST
    stub.assert_no_pending_responses()
    # An index first: a multi-architecture image answers the digest a pull on any node can use.
    assert images.MANIFEST_TYPES[0] == "application/vnd.oci.image.index.v1+json"


def test_a_private_ecr_image_resolves_the_same_way_and_its_failures_are_one_line():
    client, stub = _ecr()
    reference = images.parse_reference(f"{ECR}/vllm-openai-efa", "v0.33.0")
    request = _batch_get_image("123456789012", "vllm-openai-efa", "v0.33.0")
    stub.add_response("batch_get_image", {"images": [{"imageId": {"imageTag": "v0.33.0",
                                                                  "imageDigest": INDEX_DIGEST}}]}, request)
    with stub:
        assert images.resolve_ecr(reference, client) == INDEX_DIGEST
    # A missing tag is a failure in the answer, not an error (the service model's ImageFailureCode).
    stub.add_response("batch_get_image", {"images": [], "failures": [{
        "imageId": {"imageTag": "v0.33.0"}, "failureCode": "ImageNotFound",
        "failureReason": "Requested image not found"}]}, request)
    missing = r"vllm-openai-efa:v0\.33\.0: no such tag \(ImageNotFound\)$"
    with stub, pytest.raises(images.RegistryError, match=missing):
        images.resolve_ecr(reference, client)
    stub.add_client_error("batch_get_image", service_error_code="AccessDeniedException", http_status_code=400)
    with stub, pytest.raises(images.RegistryError, match=r"ecr:BatchGetImage refused: AccessDeniedException$"):
        images.resolve_ecr(reference, client)
    stub.add_client_error("batch_get_image", service_error_code="RepositoryNotFoundException")
    with stub, pytest.raises(images.RegistryError, match=r"vllm-openai-efa:v0\.33\.0: no such repository"):
        images.resolve_ecr(reference, client)
    assert images.ECR_REGISTRY.match(ECR) and not images.ECR_REGISTRY.match("ghcr.io")


STALE = "docker.io/envoyproxy/gateway:v1.8.0"


def test_a_bumped_chart_leaves_no_stale_digest_and_an_unlisted_chart_version_fails(registry, stack_dir):
    path = _dev_with_image(stack_dir, f"{registry}/vllm/vllm-openai")
    text = path.read_text().replace("  llm-serving:edge:\n", "  llm-serving:addons:\n    dcgmExporter:\n"
                                    "      chartVersion: 4.8.1\n  llm-serving:edge:\n", 1)
    # What a digest of the chart's former version looks like once versions.py has moved on.
    path.write_text(text + f'  llm-serving:chartImageDigests:\n    "{STALE}": "sha256:{"0" * 64}"\n')
    code, out, err = _run(registry, str(path), "--write")
    assert code == 1
    assert err == ("pin-images: dcgm-exporter 4.8.1: llm_serving/platform/versions.py lists the images of 4.8.2 "
                   "only, so its images run by the chart's own tags; pin it at 4.8.2, or list its images there\n")
    assert f"chartImageDigests: {STALE} names no image this stack runs; removed\n" in out
    config = load_stack_file(path)[1]
    assert STALE not in config.chart_image_digests
    # The images of the other charts are pinned all the same; the exporter's, unknown at 4.8.1, is not.
    assert set(config.chart_image_digests) == {i.reference for i in chart_images.chart_images(config)}
    assert not any("dcgm-exporter" in reference for reference in config.chart_image_digests)


DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64
HEAD = "config:\n  aws:region: us-east-1\n  llm-serving:models:\n    - name: a\n"
BLOCK = images.CHART_DIGESTS_COMMENT + "  llm-serving:chartImageDigests:\n"


@pytest.mark.parametrize("before,digests,remove,after", [
    # No block: one is added at the end of config, with the comment that says where it comes from.
    (HEAD, {"x.io/b:1": DIGEST_B, "x.io/a:1": DIGEST_A}, (),
     HEAD + BLOCK + f'    "x.io/a:1": "{DIGEST_A}"\n    "x.io/b:1": "{DIGEST_B}"\n'),
    # A block: an entry is replaced where it is (its neighbours' comments kept), a new one joins at its end.
    (BLOCK + f'    "x.io/a:1": "{DIGEST_B}"  # reviewed\n  aws:region: us-east-1\n',
     {"x.io/a:1": DIGEST_A, "x.io/c:1": DIGEST_B}, (),
     BLOCK + f'    "x.io/a:1": "{DIGEST_A}"\n    "x.io/c:1": "{DIGEST_B}"\n  aws:region: us-east-1\n'),
    # A stale entry goes; once none is left, the block and its comment go too (an empty block would read as null).
    (HEAD + BLOCK + f'    "x.io/a:1": "{DIGEST_A}"\n', {}, ("x.io/a:1",), HEAD),
])
def test_the_chart_digests_go_into_one_block(before, digests, remove, after):
    text = before if before.startswith("config:") else "config:\n" + before
    want = after if after.startswith("config:") else "config:\n" + after
    updated = images.set_chart_digests(text, digests, remove)
    assert updated == want
    expected = {**{k: v for k, v in images._own_chart_digests(text).items() if k not in remove}, **digests}
    images._check_chart_edit(text, updated, expected)


def test_an_inline_chart_digests_map_is_refused():
    text = 'config:\n  llm-serving:chartImageDigests: {"x.io/a:1": "sha256:' + "a" * 64 + '"}\n'
    with pytest.raises(ConfigError) as error:
        images.set_chart_digests(text, {"x.io/b:1": DIGEST_B})
    assert error.value.problems[0].line().startswith("llm-serving:chartImageDigests: is written inline")
