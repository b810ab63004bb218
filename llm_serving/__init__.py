"""The program's building blocks, one package per domain; `serving_stack.ServingStack` composes them.

platform/       Kubernetes provider, Helm and manifest helpers, pinned versions, Prometheus shapes
gpu/            GPU node group, device plugin, DCGM exporter and counters, GPU alerts, GPU catalog
serving/        vLLM Deployment, engine args, pre-staged weights, model catalog, capacity planner
edge/           the streaming-safe edge: Envoy Gateway, ALB or ingress-nginx, NetworkPolicies
scaling/        KEDA or prometheus-adapter autoscaling of each model on queue depth and KV cache
observability/  kube-prometheus-stack, scraping, serving alerts and Grafana dashboards

Each package exports its public names from its __init__.py; its modules are private to it. The
layering (checked by import-linter, see pyproject.toml) is: serving_stack -> domain packages ->
platform; domain packages never import each other.
"""
