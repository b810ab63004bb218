"""The component tier: one component (or any function that creates resources) run under Pulumi's mock runtime,
and what it registered, as CDK's `Template.fromStack(stack)` gives it.

    result = run(lambda: NvidiaDevicePlugin("plugin", args))
    assert_has(result, "kubernetes:helm.sh/v3:Release", {"chart": "nvidia-device-plugin"})

`run` returns the offline render's RenderResult (resources with type, name, parent, inputs and options;
Kubernetes objects as manifests), from the same recorder `make render` uses. `assert_has` matches a subset of
a resource's inputs, the way a test names only the properties under test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from llm_serving.stack.site import Site, StagingNodes
from stacks.config import ServingStackArgs, validate
from stacks.config.files import PROJECT_DIR, deep_merge, read_stack_file, resolve, stack_file_path
from stacks.offline.mocks import RenderMocks
from stacks.offline.render import RenderResult, record

DEFAULT_CLUSTER_VERSION = "1.34"
# A stack on a cluster that already runs GPU nodes (Karpenter), the device plugin, a DCGM exporter, an Envoy
# Gateway, KEDA and Prometheus: it takes every part as existing.
EXISTING_EVERYTHING: dict[str, Any] = {
    "environment": "dev",
    "cluster": {"name": "ml-platform"},
    "gpuNodeGroup": {"mode": "existing", "instanceType": "p5.4xlarge", "existing": {"maxNodes": 2}},
    "nodeAutoscaling": {"mode": "existing", "existing": "karpenter"},
    "addons": {"nvidiaDevicePlugin": {"mode": "existing"}, "dcgmExporter": {"mode": "existing"}},
    "weightsStorage": {"backend": "existingStorageClass",
                       "existingStorageClass": {"name": "efs-sc", "readMibPerSecond": 300}},
    "observability": {"prometheus": {"mode": "existing", "url": "http://prometheus-operated.monitoring.svc:9090"},
                      "runbookBaseUrl": "https://runbooks.example.com/llm"},
    "edge": {"host": "llm.example.com", "controller": "existing",
             "gateway": {"name": "shared", "namespace": "gateways", "listener": "https"}},
    "autoscaling": {"controller": "existing"},
    "models": [{"name": "llama-8b", "modelId": "meta-llama/Llama-3.1-8B-Instruct",
                "revision": "0e9e39f249a16976918f6564b8830bc894c89659", "maxModelLen": 8192,
                "storage": {"sizeGib": 40}}],
    "apiKey": "an-api-key-of-32-characters-----",
}



def run(build: Callable[[], Any], *, mocks: pulumi.runtime.Mocks | None = None, stack: str = "test") -> RenderResult:
    """Everything `build` registers under the mock runtime (data sources answer with the render's placeholders)."""
    return record(build, stack=stack, mocks=mocks or RenderMocks(DEFAULT_CLUSTER_VERSION))


def matches(actual: Any, expected: Any) -> bool:
    """Whether `expected` is a subset of `actual`: mappings by key, lists item by item, values equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and matches(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            matches(a, e) for a, e in zip(actual, expected, strict=True))
    return actual == expected


def find(result: RenderResult, type_: str, properties: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The resources of `type_` whose inputs include `properties`."""
    return [r for r in result.resources if r["type"] == type_ and matches(r["inputs"], properties or {})]


def assert_has(result: RenderResult, type_: str, properties: dict[str, Any]) -> dict[str, Any]:
    """The one resource of `type_` whose inputs include `properties` (fails naming what there was)."""
    found = find(result, type_, properties)
    assert len(found) == 1, (f"{len(found)} {type_} with {properties}; there are "
                             f"{[r['name'] for r in result.resources if r['type'] == type_]}")
    return found[0]


def stack_args(values: dict[str, Any], **overrides: Any) -> ServingStackArgs:
    """ServingStackArgs from stack-file values (camelCase), with top-level keys replaced."""
    return validate(ServingStackArgs, {**values, **overrides})


def committed_args(stack: str, **sections: Any) -> ServingStackArgs:
    """A committed stack's args (`extends` resolved), with top-level sections deep-merged as a stack file that
    extends it would (lists of named items by name). `stack` names a committed stack or an example
    (examples/Pulumi.<stack>.yaml)."""
    path = stack_file_path(stack)
    if not path.exists():
        path = stack_file_path(stack, PROJECT_DIR / "examples")
    values = resolve(read_stack_file(path), path.parent).values
    secrets = {key: "placeholder-secret-of-32-characters" for key in ("apiKey", "hfToken", "grafanaAdminPassword")
               if key in values}
    return validate(ServingStackArgs, deep_merge({**values, **secrets}, sections))


def site(args: ServingStackArgs) -> Site:
    """The cluster facts the platform parts are built on, as the render's placeholder cluster gives them."""
    return Site(vpc_id="vpc-0abc0000000000001", cluster_security_group_id="sg-0123456789abcdef0", region="us-east-1",
                subnets=[(s.id, s.availability_zone) for s in args.gpu_node_group.subnets], subnet_keys=(),
                staging=StagingNodes(None, (), {}))



def waits_for(result: RenderResult, key: str) -> set[str]:
    """Everything the resource `key` ("type::name") waits for on create, transitively: the engine creates a resource
    only after its dependencies, and destroy deletes in the reverse order."""
    seen: set[str] = set()
    todo = [key]
    while todo:
        for dependency in result.wiring[todo.pop()]["dependsOn"]:
            if dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen
