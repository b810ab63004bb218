"""The images a stack's charts run (pure): which Helm releases ServingStack installs with these args, at which
chart versions, and the images each runs there as llm_serving/platform/versions.py lists them, the Envoy proxy
included. `python -m stacks pin-images` resolves these images' digests; ServingStack warns about an entry of
`chartImageDigests` that none of them is. tests/stacks/test_chart_images.py holds this list to the renders.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_serving import gpu
from llm_serving.edge import ControllerMode, EdgeMode, EdgeRouting
from llm_serving.gpu import NodeAutoscalingMode
from llm_serving.observability import PrometheusMode
from llm_serving.platform import versions
from llm_serving.platform.args import InstallMode
from llm_serving.platform.chart_images import runs
from llm_serving.platform.versions import ChartImage, ChartPin
from llm_serving.scaling import AutoscalingMode
from llm_serving.serving import RoutingMode
from llm_serving.stack import planning
from llm_serving.stack.args import ServingStackArgs


@dataclass(frozen=True)
class InstalledChart:
    """A Helm release the stack installs, and the images it runs."""

    pin: ChartPin
    version: str  # the stack's chart version (its `chartVersion` key, or the pin)
    images: tuple[ChartImage, ...]  # () for a chart of CRDs only, or at a version versions.py does not describe

    @property
    def known(self) -> bool:
        """Whether versions.py describes the images of the chart at this version (its pinned one)."""
        return self.version == self.pin.version


def _chart(pin: ChartPin, version: str, *extra: ChartImage) -> InstalledChart:
    """`pin`'s chart at `version`; `extra`: images its controller runs from objects of ours (at the pinned version)."""
    images = runs(pin, version)
    return InstalledChart(pin, version, (*images, *extra) if images else ())


def installed_charts(args: ServingStackArgs) -> tuple[InstalledChart, ...]:
    """Every Helm release ServingStack creates for `args`, in the order it creates them."""
    found = []
    autoscaling = args.node_autoscaling
    if autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        # One image per pinned minor: the release runs its cluster's (parts.cluster_autoscaler).
        tag = gpu.image_tag_for(args.cluster.kubernetes_version, versions.CLUSTER_AUTOSCALER_IMAGE_TAGS)
        chart = _chart(versions.CLUSTER_AUTOSCALER, autoscaling.chart_version)
        found.append(InstalledChart(chart.pin, chart.version, tuple(i for i in chart.images if i.tag == tag)))
    prometheus = args.observability.prometheus
    if prometheus.mode is PrometheusMode.INSTALL:
        found.append(_chart(versions.KUBE_PROMETHEUS_STACK, prometheus.chart_version))
    addons = args.addons
    if addons.nvidia_device_plugin.mode is InstallMode.INSTALL:
        found.append(_chart(versions.NVIDIA_DEVICE_PLUGIN, addons.nvidia_device_plugin.chart_version))
    if args.gpu_node_group.efa_interfaces:
        found.append(_chart(versions.EFA_DEVICE_PLUGIN, versions.EFA_DEVICE_PLUGIN.version))
    if any(planning.model_plan(args, m).pipeline_parallel_size > 1 for m in args.models):
        found.append(_chart(versions.LWS, versions.LWS.version))
    if addons.dcgm_exporter.mode is InstallMode.INSTALL:
        found.append(_chart(versions.DCGM_EXPORTER, addons.dcgm_exporter.chart_version))
    scaling = args.autoscaling
    if scaling.controller is InstallMode.INSTALL:
        found.append(_chart(versions.KEDA, scaling.keda_chart_version) if scaling.mode is AutoscalingMode.KEDA
                     else _chart(versions.PROMETHEUS_ADAPTER, scaling.prometheus_adapter_chart_version))
    return (*found, *_edge_charts(args))


def _edge_charts(args: ServingStackArgs) -> list[InstalledChart]:
    """The edge's releases (edge.Edge): the load balancer controller, Envoy Gateway with its proxy, AI Gateway."""
    edge = args.edge
    found = []
    install = edge.controller is ControllerMode.INSTALL
    if planning.installs_load_balancer_controller(args) or (install and edge.mode is EdgeMode.ALB):
        found.append(_chart(versions.AWS_LOAD_BALANCER_CONTROLLER, edge.alb_controller_chart_version))
    if install and edge.mode is EdgeMode.GATEWAY:
        # The proxy runs from the EnvoyProxy of the stack's own Gateway (edge/objects.py envoy_proxy_image).
        proxy = (versions.ENVOY_PROXY_IMAGE,) if edge.gateway is None else ()
        found.append(_chart(versions.ENVOY_GATEWAY, edge.envoy_gateway_chart_version, *proxy))
        if any(planning.routing_mode(args, m) is RoutingMode.INFERENCE_POOL for m in args.models):
            routing = edge.inference_routing
            found.append(_chart(versions.AI_GATEWAY_CRDS, routing.ai_gateway_crds_chart_version))
            # byModel: the controller's webhook runs the ext_proc sidecar in every Envoy pod.
            sidecar = (versions.AI_GATEWAY_EXTPROC_IMAGE,) if edge.routing is EdgeRouting.BY_MODEL else ()
            found.append(_chart(versions.AI_GATEWAY, routing.ai_gateway_chart_version, *sidecar))
    return found


def chart_images(args: ServingStackArgs) -> tuple[ChartImage, ...]:
    """Every image the stack's releases run (each once), for which `chartImageDigests` may hold a digest."""
    seen: dict[str, ChartImage] = {}
    for chart in installed_charts(args):
        for image in chart.images:
            seen.setdefault(image.reference, image)
    return tuple(seen.values())


def unused_digests(args: ServingStackArgs) -> list[str]:
    """The entries of `chartImageDigests` that name no image the stack runs (a stale or mistyped reference)."""
    running = {image.reference for image in chart_images(args)}
    return sorted(reference for reference in args.chart_image_digests if reference not in running)
