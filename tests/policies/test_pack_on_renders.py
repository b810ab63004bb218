"""The policy rules on every stack's offline render, on a deliberately broken copy of prod, and through
pulumi-policy's own analyzer (in process, no engine) to show what the real pack sees and reports.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_serving.platform import versions
from llm_serving.stack import chart_images
from policies import rules
from stacks.environment import load_stack_file
from stacks.offline import policy_check
from tests.conftest import STACK_FILES, STACK_NAMES, render_file
from tests.support import stack_variants

POLICIES_DIR = Path(rules.__file__).parent
ENVIRONMENTS = {name: load_stack_file(path)[1].environment.value for name, path in zip(STACK_NAMES, STACK_FILES,
                                                                                        strict=True)}
MANDATORY = [r.name for r in rules.RULES if r.enforcement == "mandatory"]
PICKER_IMAGE = ("ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
                "@sha256:2e516fa1310da7be59b82beb1445362139597d6d553ef04d546716abe3aaaa70")
DIGEST_RULE = "images-digest-pinned"
PVC_KEY = f"{rules.PVC}::llama-70b-weights-claim"
PIN = "`python -m stacks pin-images <stack> --write`"


def _pods(result: Any) -> dict[str, dict[str, Any]]:
    """Pod specs of prod's vLLM Deployment and weight-staging Job, keyed by kind."""
    found = {}
    for resource in result.resources:
        if resource["type"] == rules.JOB or (
            resource["type"] == rules.DEPLOYMENT
            and resource["inputs"]["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"
        ):
            found[resource["inputs"]["kind"]] = resource["inputs"]
    return found


@pytest.fixture(scope="module")
def pinned(rendered, variants_dir) -> dict[str, Any]:
    """Renders once `python -m stacks pin-images` has run (stack_variants.pinned: made-up digests for the models'
    image and every image of the stack's charts): prod's, rendered; dev pulls by tag and is its own. Staging is
    prod's clone with its own values, and its unpinned render fails the digest rule alone (below), so one pinned
    render of the pair shows that the digests clear it."""
    return {"dev": rendered["dev"], "prod": render_file(stack_variants.pinned(variants_dir, "prod"))}


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_stack_passes_every_mandatory_rule_once_its_images_are_pinned(rendered, pinned, name):
    # The committed prod and staging carry no digest (this repository reaches no registry): their previews fail
    # on images-digest-pinned alone until `pin-images` has run.
    unpinned = rules.violations(rendered[name], ENVIRONMENTS[name])
    assert {rule for rule in MANDATORY if unpinned[rule]} == ({DIGEST_RULE} if name in ("prod", "staging") else set())
    if name in pinned:
        found = rules.violations(pinned[name], ENVIRONMENTS[name])
        assert {rule: found[rule] for rule in MANDATORY} == {rule: [] for rule in MANDATORY}


def _producer_job() -> str:
    from llm_serving.stack import planning
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path("prod"))[1]
    key = planning.compile_cache_wiring(config, config.models[0])
    assert key is not None
    return key.job_name("llama-70b")  # named after the cache's key


VLLM_IMAGE_USERS = (
    "DaemonSet llm-serving/llm-serving-image-prepull container pull-0",
    "DaemonSet llm-serving/llm-serving-image-prepull container hold-0",
    "Deployment llm-serving/llama-70b container compile-cache-seed",
    "Deployment llm-serving/llama-70b container vllm",
    f"Job llm-serving/{_producer_job()} container compile",
)


def _chart_keys(stack: str) -> list[str]:
    """Where prod's or staging's preview finds a chart image by tag until `pin-images` has run: each values key of
    each release of the stack that carries a digest (versions.py), as the message names it."""
    config = load_stack_file(STACK_FILES[STACK_NAMES.index(stack)])[1]
    return [f"Helm release {chart.pin.chart}: values {key}" for chart in chart_images.installed_charts(config)
            for key in dict.fromkeys(i.key for i in chart.images if i is not versions.ENVOY_PROXY_IMAGE)]


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_every_unpinned_image_fails_the_preview_and_names_the_command(rendered, stack):
    found = rules.violations(rendered[stack], stack)
    # The charts' images: each values key that would carry a digest, and the Envoy proxy's image.
    charts = [m for m in found[DIGEST_RULE] if m.startswith(("Helm release", "EnvoyProxy"))]
    assert sorted(m.split(" is ")[0] for m in charts if m.startswith("Helm")) == sorted(_chart_keys(stack))
    assert [m for m in charts if m.startswith("EnvoyProxy")] == [
        "EnvoyProxy envoy-gateway-system/llm-serving-proxy: the proxies run Envoy Gateway's built-in image, by tag "
        "(spec.provider.kubernetes.envoyDeployment.container.image); they carry every request and enforce the "
        f"edge's auth, and a tag can be pushed again, so {stack} pulls exactly the build that was tested: run {PIN} "
        "(chartImageDigests, with the stack's own Envoy Gateway)."]
    assert all(m.endswith(f"run {PIN} (chartImageDigests).") for m in charts if m.startswith("Helm"))
    # Where the chart sets a tag of its own (the exporter's, the autoscaler's minor), the message quotes it.
    assert (f"Helm release cluster-autoscaler: values image.tag is 'v1.34.5', so chart cluster-autoscaler pulls that "
            f"image by tag; a tag can be pushed again, so {stack} pulls exactly the build that was tested: run {PIN} "
            "(chartImageDigests).") in charts
    found = {DIGEST_RULE: [m for m in found[DIGEST_RULE] if m not in charts]}
    pods = _pods(rendered[stack])
    image = pods["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "vllm/vllm-openai:v0.33.0"
    tail = (f"has no digest; a tag can be pushed again, so {stack} pulls exactly the build that was tested: for vLLM "
            "run `python -m stacks pin-images <stack> --write` (models[].image.digest).")
    stage = pods["Job"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert stage == ("python:3.12.8-slim-bookworm"
                     "@sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0")
    (picker,) = [m for m in rendered[stack].manifests
                 if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-70b-epp"]
    assert picker["spec"]["template"]["spec"]["containers"][0]["image"] == PICKER_IMAGE
    # Of the pods the program declares itself, only the vLLM image lacks one, wherever it runs (the pre-pull pods,
    # the cache seed, the server, the cache's producer): the staging Job and the pickers are pulled by digest by
    # default.
    containers = [c for m in rendered[stack].manifests if m["kind"] in ("Deployment", "DaemonSet", "Job")
                  for spec in [m["spec"]["template"]["spec"]]
                  for c in [*spec.get("initContainers", []), *spec["containers"]] if c["image"] == image]
    assert len(found[DIGEST_RULE]) == len(containers) >= 4
    assert all(m.endswith(f": image {image} {tail}") for m in found[DIGEST_RULE])
    if stack == "prod":
        assert [m.split(": image ")[0] for m in found[DIGEST_RULE]] == list(VLLM_IMAGE_USERS)
    assert rules.violations(rendered["dev"], ENVIRONMENTS["dev"])[DIGEST_RULE] == []


def broken_prod(result: Any) -> Any:
    """prod's render once pinned (`pinned`) with one mistake per rule, except requests-and-limits-set."""
    resources, wiring = copy.deepcopy(result.resources), copy.deepcopy(result.wiring)
    broken = dataclasses.replace(result, resources=resources, wiring=wiring)
    pods = _pods(broken)
    serving = pods["Deployment"]["spec"]["template"]["spec"]
    del serving["tolerations"]
    serving["containers"][0]["livenessProbe"]["timeoutSeconds"] = 1
    stage = pods["Job"]["spec"]["template"]["spec"]["containers"][0]
    stage["image"] = "vllm/vllm-openai:latest"
    stage["securityContext"]["privileged"] = True
    # The token pasted as a plain env value instead of the mounted Secret file.
    stage["env"].append({"name": "HF_TOKEN", "value": "hf_" + "x" * 34})
    wiring[PVC_KEY]["retainOnDelete"] = False
    (scaled,) = [r["inputs"] for r in resources if r["type"] == rules.SCALED_OBJECT]
    scaled["spec"]["triggers"].append({"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}})
    resources.append({"type": rules.INGRESS, "name": "legacy-ingress", "parent": None, "inputs": {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "legacy", "namespace": "llm-serving", "annotations": {
            "nginx.ingress.kubernetes.io/proxy-buffering": "on",
            "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
        }},
        "spec": {"ingressClassName": "nginx"},
    }})
    wiring[f"{rules.INGRESS}::legacy-ingress"] = {**wiring[PVC_KEY], "protect": False, "retainOnDelete": False}
    # The device plugin's namespace left privileged with no word on why.
    (device_plugin,) = [r["inputs"] for r in resources if r["type"] == rules.NAMESPACE
                        and r["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
                        and "device-plugin" in r["inputs"]["metadata"]["name"]]
    del device_plugin["metadata"]["annotations"]
    # A chart image back on its tag, and the Envoy proxy's image left to Envoy Gateway's default.
    (gateway,) = [r["inputs"] for r in resources if r["type"] == rules.HELM_RELEASE
                  and r["inputs"]["name"] == "gateway-helm"]
    gateway["values"]["global"]["images"]["envoyGateway"]["image"] = "docker.io/envoyproxy/gateway:v1.9.0"
    (proxy,) = [r["inputs"] for r in resources if r["type"] == rules.ENVOY_PROXY]
    del proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"]
    return broken


def _first_clauses(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each message up to its first ';': what is wrong and where (unit tests pin the full text)."""
    return {rule: [m.split(";")[0] for m in messages] for rule, messages in found.items() if messages}


BROKEN_CHART_IMAGES = [
    "EnvoyProxy envoy-gateway-system/llm-serving-proxy: the proxies run Envoy Gateway's built-in image, by tag "
    "(spec.provider.kubernetes.envoyDeployment.container.image)",
    "Helm release gateway-helm: values global.images.envoyGateway.image is 'docker.io/envoyproxy/gateway:v1.9.0', "
    "so chart gateway-helm pulls that image by tag",
]


def expected_broken_findings(job: str) -> dict[str, list[str]]:
    stage, vllm = f"Job llm-serving/{job} container stage", "Deployment llm-serving/llama-70b container vllm"
    return {
        "images-pinned": [f"{stage}: image vllm/vllm-openai:latest uses the moving tag 'latest', so nodes can run "
                          "different builds and a rollback cannot return to the old one"],
        DIGEST_RULE: [f"{stage}: image vllm/vllm-openai:latest has no digest", *BROKEN_CHART_IMAGES],
        "gpu-pods-select-gpu-nodes": ["Deployment llm-serving/llama-70b requests nvidia.com/gpu but does not tolerate "
                                      "the GPU nodes' taint nvidia.com/gpu=true:NoSchedule, so it stays Pending"],
        "probes-present-lenient-liveness": [f"{vllm}: livenessProbe.timeoutSeconds is 1"],
        "no-privileged-containers": [f"{stage}: securityContext.privileged is true, which gives the container the "
                                     "node's devices and kernel"],
        "no-plaintext-secrets": [f"{stage}: env HF_TOKEN is set as a plain value, readable by anyone who can read "
                                 "the Job and stored in the stack state"],
        "weights-retained-and-protected-in-prod": ["PersistentVolumeClaim llm-serving/llama-70b-weights holds model "
                                                   "weights without retainOnDelete"],
        "edge-non-buffering": ["Ingress llm-serving/legacy: nginx.ingress.kubernetes.io/proxy-buffering is on"],
        "autoscaling-not-on-utilisation": ["ScaledObject llm-serving/llama-70b trigger #3: type cpu scales on "
                                           "utilisation, which says nothing about an LLM server's load"],
        "namespaces-enforce-pod-security": ["Namespace nvidia-device-plugin: enforces Pod Security level privileged "
                                            "without annotation llm-serving/pod-security-reason"],
    }


def test_a_broken_prod_fails_exactly_the_rules_it_breaks(pinned):
    broken = broken_prod(pinned["prod"])
    job = _pods(broken)["Job"]["metadata"]["name"]
    assert _first_clauses(rules.violations(broken, "prod")) == expected_broken_findings(job)
    # The copy is deep: the session's render is untouched.
    assert rules.violations(pinned["prod"], "prod")["no-plaintext-secrets"] == []


def test_check_command_reports_and_fails_on_mandatory_rules(rendered, pinned):
    text, status = policy_check.report(rendered["prod"], "prod")
    assert status == 1
    unpinned = len(VLLM_IMAGE_USERS) + len(_chart_keys("prod")) + 1  # the Envoy proxy
    assert f"  images-digest-pinned [mandatory]: {unpinned} violation(s)\n" in text
    text, status = policy_check.report(pinned["prod"], "prod")
    assert status == 0
    assert "  edge-non-buffering [mandatory]: ok\n" in text
    assert "  drains-cover-stream-bound [mandatory]: ok\n" in text
    text, status = policy_check.report(broken_prod(pinned["prod"]), "prod")
    assert status == 1 and "  autoscaling-not-on-utilisation [mandatory]: 1 violation(s)\n" in text


# --------------------------------------------------------------------------------------------
# The pack: pulumi-policy's analyzer servicer, called in process with the request the engine sends.


def analyzer(environment: str) -> Any:
    pytest.importorskip("pulumi_policy")
    from pulumi_policy import EnforcementLevel
    from pulumi_policy.policy import _PolicyAnalyzerServicer  # the pack's gRPC Analyze, without a server

    from policies.pack import build_policies

    return _PolicyAnalyzerServicer("llm-serving", "0.1.0", build_policies(environment), EnforcementLevel.MANDATORY)


def analyze(servicer: Any, resource: dict[str, Any], protect: bool) -> list[tuple[str, str, str]]:
    """(policy, enforcement, message) for one resource, its inputs sent as a protobuf Struct as the engine does."""
    from google.protobuf import json_format, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2 as proto

    properties = struct_pb2.Struct()
    json_format.ParseDict(resource["inputs"], properties)
    request = proto.AnalyzeRequest(
        type=resource["type"], properties=properties, name=resource["name"],
        urn=f"urn:pulumi:test::llm-serving::{resource['type']}::{resource['name']}",
        options=proto.AnalyzerResourceOptions(protect=protect),
    )
    levels = {proto.ADVISORY: "advisory", proto.MANDATORY: "mandatory"}
    return [(d.policyName, levels[d.enforcementLevel], d.message) for d in servicer.Analyze(request, None).diagnostics]


def pack_findings(result: Any, environment: str) -> dict[str, list[str]]:
    servicer = analyzer(environment)
    found: dict[str, list[str]] = {}
    for resource in result.resources:
        protect = result.wiring[f"{resource['type']}::{resource['name']}"]["protect"]
        for policy, level, message in analyze(servicer, resource, protect):
            (rule,) = [r for r in rules.RULES if r.name == policy]
            assert level == rule.enforcement
            # pulumi-policy prefixes the policy's description on its own line.
            description, text = message.split("\n", 1)
            assert description == rule.description
            found.setdefault(policy, []).append(text)
    return found


def test_pack_builds_one_policy_per_rule_without_the_engine():
    pytest.importorskip("pulumi_policy")
    from pulumi_policy import EnforcementLevel

    from policies.pack import build_policies

    policies = build_policies()
    assert [(p.name, p.description, p.enforcement_level) for p in policies] == [
        (r.name, r.description, EnforcementLevel(r.enforcement)) for r in rules.RULES
    ]


def test_pack_entry_point_serves_build_policies():
    # Running __main__.py would start the gRPC server and block; its shape is checked instead.
    tree = ast.parse((POLICIES_DIR / "__main__.py").read_text())
    (call,) = [n.value for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert ast.unparse(call) == (
        "PolicyPack('llm-serving', enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())"
    )
    project = yaml.safe_load((POLICIES_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    pins = [line for line in (POLICIES_DIR / "requirements.txt").read_text().splitlines() if "==" in line]
    assert pins == ["pulumi-policy==1.21.0", "pulumi==3.272.0"]
    program_pins = (POLICIES_DIR.parent / "requirements.txt").read_text().splitlines()
    assert "pulumi==3.272.0" in program_pins


def test_pack_agrees_with_the_render_on_prod(rendered):
    assert pack_findings(rendered["prod"], "prod") == {
        DIGEST_RULE: rules.violations(rendered["prod"], "prod")[DIGEST_RULE]
    }
    assert pack_findings(rendered["dev"], "dev") == {}


def test_pack_on_a_broken_prod_misses_only_what_the_engine_hides(pinned):
    broken = broken_prod(pinned["prod"])
    expected = expected_broken_findings(_pods(broken)["Job"]["metadata"]["name"])
    # retainOnDelete is not in the analyzer protocol, so only the offline render catches the unretained claim.
    del expected["weights-retained-and-protected-in-prod"]
    assert _first_clauses(pack_findings(broken, "prod")) == expected


def test_pack_sees_protect_but_not_secretness(rendered):
    servicer = analyzer("prod")
    claim = rendered["prod"].resource(rules.PVC, "llama-70b-weights-claim")
    assert analyze(servicer, claim, protect=True) == []
    ((policy, level, message),) = analyze(servicer, claim, protect=False)
    assert (policy, level) == ("weights-retained-and-protected-in-prod", "mandatory")
    assert "holds prod model weights without protect" in message
    # A Secret's value reaches validations as plain text whether or not it is a Pulumi secret.
    secret = copy.deepcopy(rendered["prod"].resource(rules.SECRET, "hf-token"))
    secret["inputs"]["stringData"]["token"] = "hf_plaintext"
    assert analyze(servicer, secret, protect=False) == []


def test_pack_defers_a_failing_rule_on_values_unknown_at_preview(rendered):
    servicer = analyzer("dev")
    deployment = copy.deepcopy(rendered["dev"].resource(rules.DEPLOYMENT, "llama-8b-deployment"))
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"] = UNKNOWN_STRING_VALUE
    ((policy, level, message),) = analyze(servicer, deployment, protect=False)
    assert (policy, level) == ("images-pinned", "advisory")
    assert message == (
        "can't run policy 'images-pinned' from policy pack 'llm-serving@v0.1.0' during preview: string value at "
        ".spec.template.spec.containers.0.image can't be known during preview"
    )


def test_the_pack_starts_the_way_the_clis_python_host_starts_it():
    """pulumi-analyzer-policy-python runs `<pack venv>/bin/python -u -m pulumi.policy <engine> <pack dir>`
    (pulumi/pulumi sdk/python/dist); the pack then serves gRPC and prints its port. Run from the pack
    directory alone, without the repository on the path: the published pack ships only that folder."""
    pytest.importorskip("pulumi_policy")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen([sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."], cwd=POLICIES_DIR,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        first = process.stdout.readline().strip() if ready else ""
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert first.isdigit(), f"no port printed; stderr: {stderr[-2000:]}"


def test_make_preview_and_up_build_the_packs_virtualenv_first():
    makefile = (POLICIES_DIR.parent / "Makefile").read_text()
    assert "preview: $(STAMP) $(POLICY_STAMP) secrets-set\n" in makefile
    # up also runs the node-group guard first (tools/node_group_guard.py).
    assert "up: $(STAMP) $(POLICY_STAMP) secrets-set node-group-guard\n" in makefile
    assert "$(POLICY_STAMP): policies/requirements.txt\n\t$(PYTHON) -m venv policies/.venv\n" in makefile
