"""ServingStackArgs: everything one environment of llm-serving is built from, the way a stack file says it.

The same type is the root of a stack file (`llm-serving:` keys of `Pulumi.<stack>.yaml`, camelCase), the
args of the ServingStack component in Python, and its inputs from TypeScript, Go, C# or YAML through the
package. Shapes and ranges are checked when it is constructed; relations between its parts are the rules
in llm_serving.stack.rules, which ServingStack runs before it creates anything.
"""

from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from llm_serving.cluster import ClusterArgs
from llm_serving.edge import EdgeArgs
from llm_serving.gpu import AddonsArgs, GpuNodeGroupArgs, NodeAutoscalingArgs
from llm_serving.observability import ObservabilityArgs
from llm_serving.platform.args import (
    IMAGE_DIGEST,
    IMAGE_REFERENCE,
    LABEL_KEY,
    LABEL_VALUE,
    Environment,
    StrInput,
    args_type,
    check_labels,
)
from llm_serving.scaling import AutoscalingArgs
from llm_serving.serving import ModelArgs, ServingArgs
from llm_serving.storage import WeightsStorageArgs
from llm_serving.verification import VerificationArgs


@args_type
class ClusterFacts:
    """What ServingStack needs to know about a cluster it cannot look up: one the same program creates in the same
    `pulumi up` (`cluster.mode: create`), whose attributes are outputs of the `Cluster` component."""

    vpc_id: StrInput
    """The cluster's VPC."""
    cluster_security_group_id: StrInput
    """The security group EKS gives every node and the control plane."""
    region: StrInput
    """The cluster's AWS region."""
    gpu_subnet_ids: dict[str, StrInput]
    """The private subnet of each GPU zone (`gpuNodeGroup.subnets[].availabilityZone` -> subnet id)."""
    staging_node_role_arn: StrInput | None = None
    """The role of the CPU nodes the staging Jobs run on (the only writer the weights' file-system policy admits);
    unset: `weightsStorage.efs.stagingNodeRoleArn`."""
    staging_node_security_group_id: StrInput | None = None
    """A security group of those nodes of their own, which the EFS mount targets admit NFS from; unset:
    `weightsStorage.efs.stagingNodeSecurityGroupIds`."""
    staging_node_selector: dict[str, str] = Field(default_factory=dict)
    """The labels of those nodes; empty: `weightsStorage.efs.stagingNodeSelector`."""

    _check_staging_node_selector = check_labels("staging_node_selector", LABEL_KEY, LABEL_VALUE)


def _check_secret(field: str, shortest: int) -> Any:
    """A secret given as a string is at least `shortest` characters; an Output is checked by nobody here."""

    def check(cls: type, value: Any) -> Any:
        if isinstance(value, str) and len(value) < shortest:
            raise PydanticCustomError("string_too_short", "too short", {"min_length": shortest})
        return value

    return field_validator(field)(check)

# The args that hold secrets (camelCase, as problems name them): a problem about one never shows its value.
SECRET_KEYS: tuple[str, ...] = ("apiKey", "grafanaAdminPassword", "hfToken")


@args_type
class ServingStackArgs:
    """Everything one stack (environment) of llm-serving is built from."""

    environment: Environment
    """`dev`, `staging` or `prod`: prod and staging must pin everything; prod protects data."""
    cluster: ClusterArgs
    """The EKS cluster, existing or created."""
    gpu_node_group: GpuNodeGroupArgs
    """The GPU node group."""
    node_autoscaling: NodeAutoscalingArgs = Field(default_factory=NodeAutoscalingArgs)
    """Who adds and removes GPU nodes."""
    weights_storage: WeightsStorageArgs = Field(default_factory=WeightsStorageArgs)
    """Where model weights are pre-staged."""
    addons: AddonsArgs = Field(default_factory=AddonsArgs)
    """Cluster add-ons."""
    observability: ObservabilityArgs
    """Metrics, alerts and runbooks."""
    serving: ServingArgs = Field(default_factory=ServingArgs)
    """Where the models run."""
    edge: EdgeArgs
    """The streaming-safe edge."""
    autoscaling: AutoscalingArgs = Field(default_factory=AutoscalingArgs)
    """The autoscaler shared by all models."""
    models: list[ModelArgs] = Field(min_length=1)
    """The served models, merged by `name` in clones."""
    verification: VerificationArgs = Field(default_factory=VerificationArgs)
    """The post-deploy verification Job and its gate."""
    chart_image_digests: dict[str, str] = Field(default_factory=dict)
    """Digests of the images the stack's charts run, and of the Envoy proxy, by `registry/repository:tag` as
    llm_serving/platform/versions.py lists them (`docker.io/envoyproxy/gateway:v1.9.0: sha256:...`). An image with a
    digest here is pulled by it; one without runs by the tag its chart names, which dev accepts and prod and staging
    previews refuse (policy images-digest-pinned). Empty by default: `python -m stacks pin-images <stack> --write`
    resolves each tag through its registry and writes this map; run it again after a chart bump. Only charts at their
    pinned versions take these digests, and an entry naming no image the stack runs is ignored (with a warning)."""
    adopt_retained_objects: bool = False
    """For the first `up` after a `pulumi destroy` that left this stack's retained Kubernetes objects in the cluster
    (weights claims, serving volumes and claims): adopt each by its name (Pulumi's `import` option) instead of failing
    on it with AlreadyExists. The up fails on an object whose live spec differs from the program's. Unset it after
    that up (an adopted object ignores it; a new one would fail to import). Default off: every object is created.
    ServingStack puts a transformation on its children for it (llm_serving/stack/adoption.py)."""
    api_key: StrInput = Field(repr=False)
    """Secret. API key clients must present (vLLM `--api-key`, from a Kubernetes Secret)."""
    hf_token: StrInput | None = Field(default=None, repr=False)
    """Secret. Hugging Face token for gated models, used only by the weight pre-staging Job."""
    grafana_admin_password: StrInput | None = Field(default=None, repr=False)
    """Secret. Grafana admin password for an installed Prometheus stack (required with
    `observability.prometheus.mode: install`; the chart's default password is public)."""
    cluster_facts: ClusterFacts | None = None
    """The created cluster's attributes, from the program that creates it (`cluster.mode: create`); unset: the
    cluster is looked up by `cluster.name`. Never in a stack file."""

    _check_api_key = _check_secret("api_key", 16)
    _check_hf_token = _check_secret("hf_token", 8)
    _check_grafana_admin_password = _check_secret("grafana_admin_password", 16)
    _check_chart_image_digests = check_labels("chart_image_digests", IMAGE_REFERENCE, IMAGE_DIGEST)

    @property
    def production_like(self) -> bool:
        return self.environment in (Environment.STAGING, Environment.PROD)
