"""`python -m stacks pin-images <stack>`: each model's vLLM image tag, and each image the stack's charts run (the
Envoy proxy's included), resolved to its digest through the registry's own API, and (with `--write`) the digests
written into the stack file as `models[].image.digest` and `chartImageDigests`.

A tag can be pushed again; a digest names one build. Prod and staging refuse an image without a digest at preview
(the policy pack's `images-digest-pinned`), and this is the command that message names. The chart images are those
llm_serving/platform/versions.py lists for each chart the stack installs at its pinned version
(llm_serving.stack.chart_images); a chart at another version runs images nobody listed, and the command says so.

The registry API is the OCI Distribution Specification (v1.1, "Pulling manifests"): `HEAD /v2/<name>/manifests/<tag>`
with the manifest media types in `Accept` answers the digest of what a pull by that tag gets in the
`Docker-Content-Digest` header; a multi-architecture image answers its index's digest, which is what a pull by
digest needs on any node. A registry that wants a token answers 401 with `WWW-Authenticate: Bearer realm=...,
service=..., scope=...` (the token flow of the Docker registry auth spec, which Docker Hub and ghcr.io use for
anonymous pulls of public images): the token comes from the realm and the request is sent again with it. A
registry that omits the header answers the manifest to a GET, whose sha256 is the digest.

The stack file is edited as text (its comments are the review's context): the `digest:` line is inserted or
replaced under the model's `image:` (added if absent), and one `"<repository:tag>": "<digest>"` line per chart image
under `llm-serving:chartImageDigests:` (added at the end of `config:` if absent), where entries that name no image
the stack runs any more (a chart bump) are removed; after each edit the file is parsed again and must differ from
before in exactly those values, else nothing is written.

Length: the registry client and the two text edits of the stack file share the command's one read and one write;
apart, each half would need the other's parsing of the same file.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from llm_serving.platform.versions import ChartImage
from llm_serving.stack import chart_images
from stacks import environment
from stacks.config import files as stack_files
from stacks.config.problems import CommandLineParser, ConfigError, Problem

# What a pull accepts, an index first so a multi-architecture image answers its index (OCI image-spec media types,
# and Docker's manifest list / v2 manifest, which Docker Hub still serves for older images).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DOCKER_HUB = "registry-1.docker.io"
# The names Docker's reference grammar gives Docker Hub, whose registry API answers at DOCKER_HUB only.
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", DOCKER_HUB)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
TIMEOUT_SECONDS = 30
# Plain HTTP only to a registry on this machine (a local mirror, a test registry); every other one over TLS.
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


class RegistryError(Exception):
    """Why a tag could not be resolved, as one line."""


@dataclass(frozen=True)
class ImageReference:
    registry: str  # host[:port]
    repository: str  # the name in the registry's API (library/ for Docker Hub's official images)
    tag: str

    @property
    def base_url(self) -> str:
        scheme = "http" if self.registry.rsplit(":", 1)[0] in _LOOPBACK else "https"
        return f"{scheme}://{self.registry}"


def parse_reference(repository: str, tag: str) -> ImageReference:
    """`vllm/vllm-openai` -> Docker Hub's `vllm/vllm-openai`; `ghcr.io/org/name` -> ghcr.io's `org/name`. A first
    component with a dot or a port, or `localhost`, names the registry (Docker's reference grammar); `docker.io` is
    Docker Hub, whose one-component names live under `library/`."""
    first, _, rest = repository.partition("/")
    if rest and first not in DOCKER_HUB_ALIASES and ("." in first or ":" in first or first == "localhost"):
        return ImageReference(first, rest, tag)
    name = rest if rest and first in DOCKER_HUB_ALIASES else repository
    return ImageReference(DOCKER_HUB, name if "/" in name else f"library/{name}", tag)


def _challenge(header: str) -> dict[str, str]:
    """The parameters of a `Bearer realm="...",service="...",scope="..."` challenge."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        raise RegistryError(f"the registry asks for {scheme or 'an unknown'} authentication, not a bearer token")
    return {key.lower(): value for key, value in re.findall(r'(\w+)="([^"]*)"', params)}


def _open(request: urllib.request.Request) -> Any:
    return urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)  # noqa: S310 - http(s) URLs built above


def _token(challenge: dict[str, str], image: ImageReference) -> str:
    realm = challenge.get("realm")
    if not realm or not realm.startswith(("https://", "http://")):
        raise RegistryError(f"the registry's token realm {realm!r} is not an http(s) URL")
    query = {k: v for k, v in (("service", challenge.get("service")),
                               ("scope", challenge.get("scope") or f"repository:{image.repository}:pull")) if v}
    try:
        # The realm was checked to be http(s) above.
        with _open(urllib.request.Request(f"{realm}?{urllib.parse.urlencode(query)}")) as response:  # noqa: S310
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise RegistryError(f"no pull token from {realm}: {error}") from None
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not token:
        raise RegistryError(f"the token answer of {realm} holds no token")
    return str(token)


# An ECR registry answers the registry API with a Basic challenge whose password is an ECR authorization token (ECR
# user guide, registry_auth): its own API answers instead, with BatchGetImage, the call a pull makes for the manifest
# ("When an image is pulled, the BatchGetImage API is called once to retrieve the image manifest": the ECR API
# reference, botocore 1.44.5 data/ecr/2015-09-21/service-2.json), so pull permission is what it needs
# (ecr:BatchGetImage). EKS's own image registry (602401143452, the EFA device plugin's) lets any account's nodes pull
# with AmazonEC2ContainerRegistryReadOnly (EKS user guide, add-ons-images) but refuses DescribeImages ("no
# resource-based policy allows the ecr:DescribeImages action": jetstack/version-checker#167 and #122), so pull is all
# this asks of any ECR registry. `acceptedMediaTypes` lists the index types first, as AWS's containerd
# resolver does (awslabs/amazon-ecr-containerd-resolver ecr/base.go supportedImageMediaTypes, ecr/resolver.go
# Resolve): a multi-architecture image then answers its index, whose digest is `imageId.imageDigest`.
ECR_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
# BatchGetImage reports an image it cannot answer in `failures`, not as an error (service-2.json ImageFailureCode).
_ECR_NO_SUCH_IMAGE = ("ImageNotFound", "InvalidImageTag")


def resolve_ecr(image: ImageReference, ecr: Any = None) -> str:
    """The digest of an image in an ECR registry (private, or EKS's own), through BatchGetImage (ecr:BatchGetImage,
    what a pull needs)."""
    match = ECR_REGISTRY.match(image.registry)
    assert match is not None
    if ecr is None:
        import boto3  # only for ECR images: the registry API serves every other registry

        ecr = boto3.client("ecr", region_name=match["region"])
    from botocore.exceptions import BotoCoreError, ClientError

    name = f"{image.registry}/{image.repository}:{image.tag}"
    try:
        found = ecr.batch_get_image(registryId=match["account"], repositoryName=image.repository,
                                    imageIds=[{"imageTag": image.tag}], acceptedMediaTypes=list(MANIFEST_TYPES))
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "RepositoryNotFoundException":
            raise RegistryError(f"{name}: no such repository ({code})") from None
        raise RegistryError(f"{image.registry}: ecr:BatchGetImage refused: {code}") from None
    except BotoCoreError as error:
        raise RegistryError(f"{image.registry}: {error} (ECR needs AWS credentials with ecr:BatchGetImage)") from None
    if not found.get("images"):
        failure = (found.get("failures") or [{}])[0]
        code = failure.get("failureCode", "")
        if code in _ECR_NO_SUCH_IMAGE:
            raise RegistryError(f"{name}: no such tag ({code})")
        raise RegistryError(f"{name}: ECR answered no image ({code or 'no failure code'}: "
                            f"{failure.get('failureReason', '')})")
    digest = str(found["images"][0]["imageId"]["imageDigest"])
    if not DIGEST.match(digest):
        raise RegistryError(f"{image.registry}: ECR answered {digest!r}, not a sha256 digest")
    return digest


def resolve(image: ImageReference) -> str:
    """The digest a pull of `image` by tag gets now."""
    if ECR_REGISTRY.match(image.registry):
        return resolve_ecr(image)
    url = f"{image.base_url}/v2/{image.repository}/manifests/{urllib.parse.quote(image.tag)}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    for attempt in (1, 2):
        for method in ("HEAD", "GET"):
            request = urllib.request.Request(url, headers=headers, method=method)  # noqa: S310 - base_url is http(s)
            try:
                with _open(request) as response:
                    digest = response.headers.get("Docker-Content-Digest")
                    if digest is None and method == "HEAD":
                        continue  # no header: the digest of the manifest's bytes, from a GET
                    if digest is None:
                        digest = "sha256:" + hashlib.sha256(response.read()).hexdigest()
            except urllib.error.HTTPError as error:
                if error.code == 401 and attempt == 1 and "Authorization" not in headers:
                    challenge = _challenge(error.headers.get("WWW-Authenticate", ""))
                    headers["Authorization"] = f"Bearer {_token(challenge, image)}"
                    break  # the next attempt, with the token
                if error.code == 404:
                    raise RegistryError(f"{image.registry}/{image.repository}:{image.tag}: no such tag") from None
                raise RegistryError(f"{url}: HTTP {error.code} {error.reason}") from None
            except (urllib.error.URLError, OSError) as error:
                raise RegistryError(f"{url}: {getattr(error, 'reason', error)}") from None
            if not DIGEST.match(digest):
                raise RegistryError(f"{url}: the registry answered {digest!r}, not a sha256 digest")
            return digest
    raise AssertionError("unreachable: the second attempt returns or raises")


# --- the stack file, edited as text -----------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def _block_end(lines: list[str], start: int, parent_indent: int) -> int:
    """The index after the last line of the block that begins after `start` and is indented deeper than
    `parent_indent` (blank lines and comments inside it count, trailing ones do not). A block sequence nested in a
    mapping may sit at its key's own indent (YAML 1.2.2, section 8.2.1 Block Sequences: "people perceive the `-`
    indicator as indentation"; what PyYAML's `safe_dump` writes): under a key line, `- ` lines at `parent_indent`
    are in the block, under a sequence item they are the next item."""
    end = start + 1
    last = start
    under_key = not lines[start].lstrip().startswith("- ")
    while end < len(lines):
        if not _blank(lines[end]):
            indent = _indent(lines[end])
            if indent < parent_indent or indent == parent_indent and not (
                    under_key and lines[end].lstrip().startswith("- ")):
                break
            last = end
        end += 1
    return last + 1


def indent(line: str) -> int:
    """The spaces before the line's first character."""
    return _indent(line)


def block_end(lines: list[str], start: int, parent_indent: int) -> int:
    """The index after the last line of the block under `lines[start]` (see `_block_end`)."""
    return _block_end(lines, start, parent_indent)


def model_item(lines: list[str], model: str, instead: str = "add models[].image.digest by hand, or pin the base "
               "stack") -> tuple[int, int, int]:
    """Where the model's item of `llm-serving:models` is in `lines`: (its `- name: <model>` line, the index after
    its last line, the indent of its keys). `instead`: what to do when the file lists no models of its own."""
    models = next((i for i, line in enumerate(lines) if line.rstrip() == f"  {stack_files.PROJECT}:models:"), None)
    if models is None:
        raise ConfigError([Problem("models", f"the stack file lists no models of its own (a clone?): {instead}",
                                   model, "a stack file with `llm-serving:models:`")])
    end = _block_end(lines, models, 2)
    dashes = [i for i in range(models + 1, end) if lines[i].lstrip().startswith("- ")]
    column = _indent(lines[dashes[0]]) if dashes else 0
    # Each item of the list (`- ` at the list's column), its name on the dash line or on a key line of its own
    # (PyYAML sorts `eval` before `name`).
    for item in (i for i in dashes if _indent(lines[i]) == column):
        key_indent = column + 2
        item_end = _block_end(lines, item, column)
        names = [lines[item][column + 2:]] + [lines[i][key_indent:] for i in range(item + 1, item_end)
                                               if _indent(lines[i]) == key_indent]
        if any(re.fullmatch(rf"name: {re.escape(model)}\s*", n.rstrip("\n")) for n in names):
            return item, item_end, key_indent
    raise ConfigError([Problem(f"models[{model}]", "no such model in the stack file's own list", model,
                               "a model the file names")])


def set_digest(text: str, model: str, digest: str) -> str:
    """`text` with `digest: <digest>` under the model's `image:` in `llm-serving:models`."""
    lines = text.splitlines(keepends=True)
    item, item_end, key_indent = model_item(lines, model)
    image = next((i for i in range(item + 1, item_end)
                  if _indent(lines[i]) == key_indent and lines[i].strip().startswith("image:")), None)
    pad = " " * key_indent
    if image is None:
        addition = [f"{pad}image:\n", f"{pad}  digest: \"{digest}\"\n"]
        if item_end == len(lines) and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return "".join(lines[:item_end] + addition + lines[item_end:])
    if lines[image].strip() != "image:":
        raise ConfigError([Problem(f"models[{model}].image", "is written inline; write it as a block to pin it",
                                   lines[image].strip(), "image:\\n  repository: ...")])
    image_end = _block_end(lines, image, key_indent)
    children = [i for i in range(image + 1, image_end) if not _blank(lines[i])]
    child_pad = " " * (_indent(lines[children[0]]) if children else key_indent + 2)
    existing = next((i for i in children if lines[i].strip().startswith("digest:")), None)
    new_line = f"{child_pad}digest: \"{digest}\"\n"
    if existing is not None:
        lines[existing] = new_line
    else:
        lines.insert(image_end, new_line)
    return "".join(lines)


def _models_of(text: str) -> list[dict[str, Any]]:
    document = stack_files.parse_yaml(text) or {}
    return list(document.get("config", {}).get(f"{stack_files.PROJECT}:models") or [])


def _check_edit(before: str, after: str, model: str, digest: str) -> None:
    """The edit changed exactly `models[model].image.digest`, to `digest`."""
    old, new = stack_files.parse_yaml(before), stack_files.parse_yaml(after)
    expected = json.loads(json.dumps(old))
    for item in expected["config"][f"{stack_files.PROJECT}:models"]:
        if item.get("name") == model:
            item.setdefault("image", {})["digest"] = digest
    if new != expected:
        raise ConfigError([Problem(f"models[{model}].image.digest", "the stack file's layout defeated the edit; "
                                   "nothing was written", digest, "set it by hand")])


# `llm-serving:chartImageDigests`, a block of `"<repository:tag>": "<digest>"` lines.
CHART_DIGESTS = f"{stack_files.PROJECT}:chartImageDigests"
CHART_DIGESTS_COMMENT = ("  # The images the charts run, by digest: `python -m stacks pin-images <stack> --write`\n"
                         "  # writes them; run it again after a chart bump.\n")


def _entry(line: str) -> str | None:
    """The reference a `"<reference>": "<digest>"` line of the block names."""
    parsed = stack_files.parse_yaml(line.strip())
    return str(next(iter(parsed))) if isinstance(parsed, dict) and len(parsed) == 1 else None


def set_chart_digests(text: str, digests: Mapping[str, str], remove: Collection[str] = ()) -> str:
    """`text` with each `reference: digest` of `digests` in `llm-serving:chartImageDigests` (the block added at the
    end of `config:` when absent), and the entries named in `remove` taken out (the block too, once empty)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"  {CHART_DIGESTS}:"), None)
    if start is None:
        inline = next((line.strip() for line in lines if line.startswith(f"  {CHART_DIGESTS}:")), None)
        if inline is not None:
            raise ConfigError([Problem("chartImageDigests", "is written inline; write it as a block to pin it",
                                       inline, f"{CHART_DIGESTS}:\\n  \"<repository:tag>\": \"<digest>\"")])
        if not digests:
            return "".join(lines)
        config = next((i for i, line in enumerate(lines) if line.rstrip() == "config:"), None)
        if config is None:
            raise ConfigError([Problem("config", "the stack file has no `config:` block", None, "config:")])
        end = _block_end(lines, config, 0)
        block = [CHART_DIGESTS_COMMENT, f"  {CHART_DIGESTS}:\n"]
        block += [f'    "{reference}": "{digests[reference]}"\n' for reference in sorted(digests)]
        return "".join(lines[:end] + block + lines[end:])
    end = _block_end(lines, start, 2)
    children = [i for i in range(start + 1, end) if not _blank(lines[i])]
    pad = " " * (_indent(lines[children[0]]) if children else 4)
    seen: set[str] = set()
    kept: list[int] = []
    for i in children:
        reference = _entry(lines[i])
        if reference is None:
            raise ConfigError([Problem("chartImageDigests", "holds a line that is not one `reference: digest` entry",
                                       lines[i].strip(), '"<repository:tag>": "<digest>" on one line')])
        if reference in remove:
            lines[i] = ""
            continue
        kept.append(i)
        if reference in digests:
            lines[i] = f'{pad}"{reference}": "{digests[reference]}"\n'
            seen.add(reference)
    added = [f'{pad}"{reference}": "{digests[reference]}"\n' for reference in sorted(set(digests) - seen)]
    if not kept and not added:
        # An empty block reads as null, which the map refuses: the key and our comment above it go too.
        lines[start] = ""
        if start >= 2 and "".join(lines[start - 2:start]) == CHART_DIGESTS_COMMENT:
            lines[start - 2] = lines[start - 1] = ""
        return "".join(lines)
    return "".join(lines[:end] + added + lines[end:])


def _check_chart_edit(before: str, after: str, expected: Mapping[str, str]) -> None:
    """The edit changed exactly `llm-serving:chartImageDigests`, to `expected`."""
    old, new = stack_files.parse_yaml(before), stack_files.parse_yaml(after)
    want = json.loads(json.dumps(old))
    if expected:
        want["config"][CHART_DIGESTS] = dict(expected)
    else:
        want["config"].pop(CHART_DIGESTS, None)
    if new != want:
        raise ConfigError([Problem("chartImageDigests", "the stack file's layout defeated the edit; nothing was "
                                   "written", None, "set it by hand")])


def _own_chart_digests(text: str) -> dict[str, str]:
    document = stack_files.parse_yaml(text) or {}
    return dict(document.get("config", {}).get(CHART_DIGESTS) or {})


# --- the command ------------------------------------------------------------------------------------------

def parser() -> CommandLineParser:
    parser = CommandLineParser(prog="python -m stacks pin-images",
                               description="Resolve each model's vLLM image tag, and each image the stack's charts "
                                           "run, to its digest (registry API).")
    parser.add_argument("stack", help="a stack name or a path to its Pulumi.<stack>.yaml")
    parser.add_argument("--write", action="store_true",
                        help="write models[].image.digest and chartImageDigests into the stack file (default: print "
                             "the digests only)")
    return parser


def main(argv: list[str], stack_path: Any, stdout: TextIO | None = None, stderr: TextIO | None = None,
         registry: Callable[[ImageReference], str] | None = None) -> int:
    """`registry`: what resolves a reference to its digest (default `resolve`)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    lookup = registry or resolve
    args = parser().use_streams(out, err).parse_args(argv)
    path: Path = stack_path(args.stack)
    _, config = environment.load_stack_file(path)
    text = path.read_text()
    own = {m.get("name") for m in _models_of(text)}
    failed = 0
    for model in config.models:
        image = model.image
        reference = parse_reference(image.repository, image.tag)
        try:
            digest = lookup(reference)
        except RegistryError as error:
            err.write(f"pin-images: {model.name}: {error}\n")
            failed += 1
            continue
        if image.digest == digest:
            out.write(f"{model.name}: {image.repository}:{image.tag} is pinned at {digest}\n")
            continue
        was = f" (was {image.digest})" if image.digest else ""
        out.write(f"{model.name}: {image.repository}:{image.tag} -> {digest}{was}\n")
        if args.write:
            if model.name not in own:
                raise ConfigError([Problem(f"models[{model.name}]", "comes from the stack this one extends: pin "
                                           "that stack", path.name, "the stack file that lists the model")])
            updated = set_digest(text, model.name, digest)
            _check_edit(text, updated, model.name, digest)
            text = updated
    chart_failed, text = _pin_charts(config, text, args.write, lookup, out, err)
    failed += chart_failed
    if args.write:
        path.write_text(text)
        environment.load_stack_file(path)  # still a valid stack
        out.write(f"wrote {path}\n")
    return 1 if failed else 0


def _pin_charts(config: Any, text: str, write: bool, lookup: Callable[[ImageReference], str], out: TextIO,
                err: TextIO) -> tuple[int, str]:
    """Resolve the images of the stack's charts; with `write`, `text` with chartImageDigests set. (failures, text)"""
    failed = 0
    resolved: dict[str, str] = {}
    running: dict[str, tuple[str, ChartImage]] = {}
    for chart in chart_images.installed_charts(config):
        if not chart.known and chart.pin.images:
            err.write(f"pin-images: {chart.pin.chart} {chart.version}: llm_serving/platform/versions.py lists the "
                      f"images of {chart.pin.version} only, so its images run by the chart's own tags; pin it at "
                      f"{chart.pin.version}, or list its images there\n")
            failed += 1
        for image in chart.images:
            running.setdefault(image.reference, (chart.pin.chart, image))
    for reference, (chart_name, image) in running.items():
        try:
            digest = lookup(parse_reference(image.repository, image.tag))
        except RegistryError as error:
            err.write(f"pin-images: {chart_name}: {error}\n")
            failed += 1
            continue
        current = config.chart_image_digests.get(reference)
        if current == digest:
            out.write(f"{chart_name}: {reference} is pinned at {digest}\n")
            continue
        was = f" (was {current})" if current else ""
        out.write(f"{chart_name}: {reference} -> {digest}{was}\n")
        resolved[reference] = digest
    own = _own_chart_digests(text)
    stale = sorted(reference for reference in own if reference not in running)
    for reference in stale:
        out.write(f"chartImageDigests: {reference} names no image this stack runs"
                  f"{'; removed' if write else ''}\n")
    if write and (resolved or stale):
        expected = {**{k: v for k, v in own.items() if k not in stale}, **resolved}
        updated = set_chart_digests(text, resolved, remove=stale)
        _check_chart_edit(text, updated, expected)
        text = updated
    return failed, text
