"""The root of one stack's configuration (`llm-serving:*` keys of `Pulumi.<stack>.yaml`),
composed from the domain sections, and the keys the file reader handles itself.
pydantic checks shapes; stacks/checks/ checks relations before any resource is registered.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from stacks.config.base import ConfigModel, Environment
from stacks.config.cluster import ClusterConfig, NodeAutoscalingConfig
from stacks.config.edge import EdgeConfig
from stacks.config.gpu import AddonsConfig, GpuNodeGroupConfig
from stacks.config.models import AutoscalingConfig, ModelConfig, ServingConfig
from stacks.config.observability import ObservabilityConfig
from stacks.config.storage import WeightsBackendConfig
from stacks.config.verification import VerificationConfig


class StackConfig(ConfigModel):
    """Everything one stack (environment) of llm-serving is built from."""

    environment: Environment = Field(
        description="`dev`, `staging` or `prod`: prod and staging must pin everything; prod protects data."
    )
    cluster: ClusterConfig = Field(description="The EKS cluster, existing or created.")
    gpu_node_group: GpuNodeGroupConfig = Field(description="The GPU node group.")
    node_autoscaling: NodeAutoscalingConfig = Field(
        default_factory=NodeAutoscalingConfig, description="Who adds and removes GPU nodes."
    )
    weights_storage: WeightsBackendConfig = Field(
        default_factory=WeightsBackendConfig, description="Where model weights are pre-staged."
    )
    addons: AddonsConfig = Field(default_factory=AddonsConfig, description="Cluster add-ons.")
    observability: ObservabilityConfig = Field(description="Metrics, alerts and runbooks.")
    serving: ServingConfig = Field(default_factory=ServingConfig, description="Where the models run.")
    edge: EdgeConfig = Field(description="The streaming-safe edge.")
    autoscaling: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="The autoscaler shared by all models."
    )
    models: list[ModelConfig] = Field(min_length=1, description="The served models, merged by `name` in clones.")
    verification: VerificationConfig = Field(
        default_factory=VerificationConfig, description="The post-deploy verification Job and its gate."
    )
    api_key: SecretStr = Field(
        min_length=16,
        description="Secret. API key clients must present (vLLM `--api-key`, from a Kubernetes Secret).",
    )
    hf_token: SecretStr | None = Field(
        default=None,
        min_length=8,
        description="Secret. Hugging Face token for gated models, used only by the weight pre-staging Job.",
    )
    grafana_admin_password: SecretStr | None = Field(
        default=None,
        min_length=16,
        description=(
            "Secret. Grafana admin password for an installed Prometheus stack (required with "
            "`observability.prometheus.mode: install`; the chart's default password is public)."
        ),
    )

    @property
    def production_like(self) -> bool:
        return self.environment in (Environment.STAGING, Environment.PROD)


# Keys handled by the loader rather than the model.
LOADER_KEYS = ("extends",)


# Top-level keys that hold secrets: never inherited through `extends`, always `secure:` values.
SECRET_KEYS: tuple[str, ...] = ("apiKey", "grafanaAdminPassword", "hfToken")
