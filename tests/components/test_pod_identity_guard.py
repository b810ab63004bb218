"""No pod of a Pod Identity service account is admitted without the credentials EKS injects, every workload
under such an account starts after the guard that says so, and the guard of a role's association comes after the
association, so a create that fails leaves none behind (llm_serving/platform/pod_identity.py).

The policies are walked as the API server would (tests/support/admission.py, its expressions evaluated by
cel-python). The pods are the rendered workloads' own templates, before and after the EKS Pod Identity
webhook mutates them (aws/amazon-eks-pod-identity-webhook v0.6.17, pkg/handler/handler.go `addEnvToContainer`).
"""

from __future__ import annotations

from typing import Any

import pytest

from llm_serving.platform.pod_identity import CREDENTIALS_ENV, admission_guard, guard_name
from stacks.config.files import PROJECT_DIR
from tests.conftest import STACK_FILES, render_file
from tests.support.admission import BINDING, INJECTED, denials, mutated
from tests.support.components import waits_for

ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
RELEASE = "kubernetes:helm.sh/v3:Release"
# The committed stacks and the examples: between them every user of Pod Identity (the Cluster Autoscaler and
# the EFS CSI add-on; the load balancer controller of a created cluster; the S3 staging Job, serving pods and
# compile cache producer).
STACKS = [*STACK_FILES, *(PROJECT_DIR / "examples" / f"Pulumi.{name}.yaml" for name in ("prod-s3", "sandbox"))]
# The service account each Helm release's pods run as, where its values name it.
RELEASE_ACCOUNTS = {
    "aws-load-balancer-controller": lambda values: ("kube-system", values["serviceAccount"]["name"]),
    "cluster-autoscaler": lambda values: ("kube-system", values["rbac"]["serviceAccount"]["name"]),
}


def _key(resource: dict[str, Any]) -> str:
    return f"{resource['type']}::{resource['name']}"




def _associations(result) -> list[tuple[str, str, str]]:
    """(resource key, namespace, service account) of every association, standalone or an add-on's."""
    found = [(_key(r), r["inputs"]["namespace"], r["inputs"]["serviceAccount"])
             for r in result.resources if r["type"] == ASSOCIATION]
    for addon in (r for r in result.resources if r["type"] == ADDON):
        # EKS installs the add-ons' controllers in kube-system.
        found += [(_key(addon), "kube-system", a["serviceAccount"])
                  for a in addon["inputs"].get("podIdentityAssociations", [])]
    return found


def _pod(service_account: str | None, containers: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": "registry.example/app:1"}
                                           for i in range(containers)]}
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _templates(result) -> list[tuple[str, str, dict[str, Any]]]:
    """(resource key, namespace, pod) for every rendered object that makes pods: Deployments, DaemonSets,
    StatefulSets, Jobs and LeaderWorkerSets' leader and worker templates."""
    found = []
    for resource in result.resources:
        inputs = resource["inputs"]
        spec = inputs.get("spec") if isinstance(inputs.get("spec"), dict) else {}
        templates = [spec.get("template")]
        group = spec.get("leaderWorkerTemplate", {})
        templates += [group.get("leaderTemplate"), group.get("workerTemplate")]
        for template in (t for t in templates if isinstance(t, dict) and "spec" in t):
            namespace = inputs["metadata"].get("namespace", "default")
            found.append((_key(resource), namespace, {"apiVersion": "v1", "kind": "Pod",
                                                      "metadata": template.get("metadata", {}),
                                                      "spec": template["spec"]}))
    return found


@pytest.fixture(scope="module", params=STACKS, ids=lambda p: p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
def render(request):
    return render_file(request.param)


def test_each_association_has_a_guard_that_refuses_its_pods_until_eks_injects_credentials(render):
    associations = _associations(render)
    assert associations, f"{render.stack} uses no Pod Identity"
    for _, namespace, account in associations:
        refused = denials(render.manifests, namespace, _pod(account))
        assert len(refused) == 1, (namespace, account, refused)
        assert CREDENTIALS_ENV in refused[0] and f"{namespace}/{account}" in refused[0]
        # The same pod as EKS admits it once the association is in effect, whatever else it runs.
        assert denials(render.manifests, namespace, mutated(_pod(account, containers=3))) == []
        # Another account of the namespace, and the same account's name in another namespace, are not its.
        assert denials(render.manifests, namespace, _pod(f"{account}-other")) == []
        assert denials(render.manifests, namespace, _pod(None)) == []
        assert denials(render.manifests, f"{namespace}-other", _pod(account)) == []


def test_the_rendered_workloads_are_refused_only_when_their_account_has_an_association(render):
    associated = {(namespace, account) for _, namespace, account in _associations(render)}
    guarded = 0
    for key, namespace, pod in _templates(render):
        account = pod["spec"].get("serviceAccountName", "default")
        refused = denials(render.manifests, namespace, pod)
        assert bool(refused) == ((namespace, account) in associated), (key, refused)
        assert denials(render.manifests, namespace, mutated(pod)) == [], key
        guarded += bool(refused)
    # The example on S3 runs its staging Job, its serving pods and its compile cache producer under roles.
    if render.stack == "prod-s3":
        assert guarded >= 3


def _holders(render) -> dict[tuple[str, str], list[str]]:
    """What creates pods as each (namespace, service account): rendered pod templates and the Helm releases."""
    holders: dict[tuple[str, str], list[str]] = {}
    for key, namespace, pod in _templates(render):
        holders.setdefault((namespace, pod["spec"].get("serviceAccountName", "default")), []).append(key)
    for release in (r for r in render.resources if r["type"] == RELEASE and r["inputs"]["chart"] in RELEASE_ACCOUNTS):
        holders.setdefault(RELEASE_ACCOUNTS[release["inputs"]["chart"]](release["inputs"]["values"]), []).append(
            _key(release))
    return holders


def _bindings(render) -> dict[str, str]:
    return {r["inputs"]["spec"]["policyName"]: _key(r) for r in render.resources
            if r["type"].endswith(f":{BINDING}")}


def test_a_roles_guard_is_enforced_before_its_association_and_its_workloads_come_after_both(render):
    """On create: the role, its policy, the guard, the association, then what runs under it. The guard is in force
    (the API server's next policy refresh) before the association can take effect, so no pod of the account is
    ever admitted without credentials; a workload starts only once both exist."""
    bindings, holders = _bindings(render), _holders(render)
    standalone = [a for a in _associations(render) if a[0].startswith(ASSOCIATION)]
    if render.stack == "prod-s3":
        assert len(standalone) >= 4  # the autoscaler's and, per model, the staging, serving and producer roles
    for association, namespace, account in standalone:
        prefix = association.rsplit("::", 1)[1].removesuffix("-pod-identity")
        role, policy = f"{ROLE}::{prefix}-role", f"{ROLE_POLICY}::{prefix}-policy"
        binding = bindings[guard_name(namespace, account)]
        guard = {binding, f"{binding.split('::')[0].removesuffix('Binding')}::{prefix}-admission-policy"}
        assert {role, policy} <= waits_for(render, association), association
        assert role in waits_for(render, policy)
        assert guard <= waits_for(render, association), association
        assert policy in waits_for(render, binding) and association not in waits_for(render, binding), binding
        workloads = holders.get((namespace, account), [])
        assert workloads, f"nothing runs as {namespace}/{account}"
        for workload in workloads:
            assert guard | {association, policy} <= waits_for(render, workload), workload


def test_an_addon_association_is_guarded_before_the_addon_that_makes_it_and_its_pods(render):
    """The EFS CSI add-on makes its association and its controller's pods in one CreateAddon call: the guard
    comes first, then the role, then the add-on."""
    bindings = _bindings(render)
    for addon, namespace, account in (a for a in _associations(render) if a[0].startswith(ADDON)):
        binding = bindings[guard_name(namespace, account)]
        assert binding in waits_for(render, addon), addon
        # `<prefix>-driver` and its `<prefix>-role` (llm_serving/storage/efs.py).
        role = f"{ROLE}::{addon.rsplit('::', 1)[1].removesuffix('-driver')}-role"
        assert role in waits_for(render, addon) and binding in waits_for(render, role), addon


def test_the_guard_matches_one_namespace_and_account_and_refuses_a_pod_whose_webhook_did_nothing():
    policy, binding = admission_guard("llm", "llama-70b-vllm")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "pod-identity.llm.llama-70b-vllm"
    # A container whose env lists other variables and one with an empty env: refused.
    pod = _pod("llama-70b-vllm", containers=2)
    pod["spec"]["containers"][0]["env"] = [{"name": "AWS_REGION", "value": "us-east-1"}]
    pod["spec"]["containers"][1]["env"] = []
    assert len(denials([policy, binding], "llm", pod)) == 1
    # The webhook skips containers named in eks.amazonaws.com/skip-containers: one injected container is enough.
    pod["spec"]["containers"][1]["env"] = INJECTED
    assert denials([policy, binding], "llm", pod) == []
    # Without its binding a policy enforces nothing: the binding is what the program must create.
    assert denials([policy], "llm", _pod("llama-70b-vllm")) == []


def test_guard_names_are_one_per_namespace_and_account_and_refuse_what_kubernetes_would():
    assert guard_name("a-b", "c") != guard_name("a", "b-c")
    for namespace, account in (("kube.system", "x"), ("llm", "X"), ("llm", "a" * 240)):
        with pytest.raises(ValueError, match="not a DNS subdomain"):
            guard_name(namespace, account)
