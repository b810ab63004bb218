"""What a stack says about the autoscaler every model shares: KEDA (default) or prometheus-adapter with an
HPA, and where it runs. Each model's own targets are its `autoscaling` (llm_serving.serving.args)."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform import versions
from llm_serving.platform.args import CHART_VERSION, DNS_LABEL, InstallMode, args_type


class AutoscalingMode(StrEnum):
    """KEDA with Prometheus triggers, or an HPA on prometheus-adapter metrics."""

    KEDA = "keda"
    PROMETHEUS_ADAPTER = "prometheus-adapter"


@args_type
class AutoscalingArgs:
    """The autoscaler installation shared by all models."""

    mode: AutoscalingMode = AutoscalingMode.KEDA
    """`keda` or `prometheus-adapter`."""
    controller: InstallMode = InstallMode.INSTALL
    """`install`: the stack installs KEDA (or prometheus-adapter) from its chart into `namespace`; `existing`: the
    cluster runs it already (its CRDs, or the custom metrics API), and the stack creates only each model's
    ScaledObject (or HPA)."""
    namespace: str = Field(default="keda", **DNS_LABEL)
    """Namespace of KEDA or prometheus-adapter (the installed one's, or where the existing one runs)."""
    keda_chart_version: str = Field(default=versions.KEDA.version, **CHART_VERSION)
    """KEDA chart version."""
    prometheus_adapter_chart_version: str = Field(default=versions.PROMETHEUS_ADAPTER.version, **CHART_VERSION)
    """prometheus-adapter chart version."""
