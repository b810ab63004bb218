"""One model on a cluster that already runs everything around it: GPU nodes from Karpenter (with the NVIDIA device
plugin and a DCGM exporter), an Envoy Gateway named `shared`, KEDA and a Prometheus Operator. This program creates
none of those: only the model's namespace, weights, workload, route, scaling object, alerts and deploy gate."""

import pulumi
import pulumi_kubernetes as k8s

import llm_serving as ls

config = pulumi.Config()
existing = ls.InstallMode.EXISTING

stack = ls.ServingStack(
    "llm",
    ls.ServingStackArgs(
        environment=ls.Environment.DEV,
        cluster=ls.ClusterArgs(name="ml-platform"),
        gpu_node_group=ls.GpuNodeGroupArgs(
            mode=ls.GpuNodesMode.EXISTING, instance_type="p5.4xlarge", existing=ls.ExistingGpuNodesArgs(max_nodes=2)),
        node_autoscaling=ls.NodeAutoscalingArgs(mode=ls.NodeAutoscalingMode.EXISTING,
                                                existing=ls.ExistingAutoscaler.KARPENTER),
        addons=ls.AddonsArgs(nvidia_device_plugin=ls.DevicePluginAddonArgs(mode=existing),
                             dcgm_exporter=ls.DcgmExporterAddonArgs(mode=existing)),
        weights_storage=ls.WeightsStorageArgs(
            backend=ls.StorageBackend.EXISTING_STORAGE_CLASS,
            existing_storage_class=ls.ExistingStorageClassArgs(name="efs-sc", read_mib_per_second=300)),
        observability=ls.ObservabilityArgs(
            prometheus=ls.PrometheusArgs(mode=ls.PrometheusMode.EXISTING,
                                         url="http://prometheus-operated.monitoring.svc:9090"),
            runbook_base_url="https://runbooks.example.com/llm"),
        edge=ls.EdgeArgs(host="llm.example.com", controller=ls.ControllerMode.EXISTING,
                         gateway=ls.ExistingGatewayArgs(name="shared", namespace="gateways", listener="https")),
        autoscaling=ls.AutoscalingArgs(controller=existing),
        models=[ls.ModelArgs(name="llama-8b", model_id="meta-llama/Llama-3.1-8B-Instruct",
                             revision="0e9e39f249a16976918f6564b8830bc894c89659", max_model_len=8192,
                             storage=ls.ModelStorageArgs(size_gib=40))],
        api_key=config.require_secret("apiKey"),
        hf_token=config.require_secret("hfToken"),
    ),
    # The cluster's provider, as the program already has it (here: the current kubeconfig context).
    pulumi.ResourceOptions(providers={"kubernetes": k8s.Provider("cluster")}),
)

pulumi.export("endpoints", stack.endpoints)
pulumi.export("urls", stack.urls)
pulumi.export("plan", stack.models)
