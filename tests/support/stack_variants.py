"""Variants of prod that several test modules render: written here, byte for byte the same for each.

Each writer takes a directory holding copies of the project's stack files and returns the path of the
variant it wrote there. Written into the session's `variants_dir` (tests/conftest.py), a variant two modules
use is one path, and `render_file` renders it once per test process.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

# Placeholders only the offline render accepts, as in the committed stack files.
SECRETS = {f"llm-serving:{key}": {"secure": "v1:x"} for key in ("apiKey", "hfToken")}

# prod behind an ALB: the controller's IAM role for its service account, the ALB's two subnets and an
# ACM certificate instead of cert-manager's.
ALB_EDGE: dict[str, Any] = {
    "mode": "alb",
    "namespace": "kube-system",
    "albControllerRoleArn": "arn:aws:iam::123456789012:role/alb-controller",
    "loadBalancerSubnetIds": ["subnet-0aaa1111", "subnet-0bbb2222"],
    "tls": {"certManagerIssuer": None, "acmCertificateArn":
            "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0000-4000-8000-000000000000"},
}


def write(directory: Path, name: str, config: dict[str, Any], extends: str = "prod") -> Path:
    """`Pulumi.<name>.yaml` in `directory`: `extends` with the placeholder secrets and `config`'s keys
    (without their `llm-serving:` prefix)."""
    path = directory / f"Pulumi.{name}.yaml"
    own = {"aws:region": "us-east-1", "llm-serving:extends": extends, **SECRETS,
           **{f"llm-serving:{key}": value for key, value in config.items()}}
    path.write_text(yaml.safe_dump({"config": own}))
    return path


def dev_awake(directory: Path) -> Path:
    """dev with its model kept at one replica (no scale to zero): it routes through its Service, no picker."""
    return write(directory, "dev-awake", {
        "grafanaAdminPassword": {"secure": "v1:x"},
        "models": [{"name": "llama-8b", "autoscaling": {"minReplicas": None, "maxReplicas": None,
                                                        "scaleToZero": None}}]}, extends="dev")


def prod_on_fsx(directory: Path) -> Path:
    """prod with its weights on FSx for Lustre."""
    return write(directory, "prod-fsx", {"weightsStorage": {"backend": "fsxLustre"}})


def prod_behind_an_alb(directory: Path) -> Path:
    """prod with the ALB edge (ALB_EDGE)."""
    return write(directory, "prod-alb", {"edge": ALB_EDGE})


def fake_digest(reference: str) -> str:
    """A digest for a test only (no registry is reachable here): the sha256 of the reference's own name."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


def pinned(directory: Path, base: str) -> Path:
    """`base` as it is once `python -m stacks pin-images <base> --write` has run: every model's image and every image
    its charts run carry a digest (made up: see fake_digest)."""
    from llm_serving.stack import chart_images
    from stacks.environment import load_stack_file

    config = load_stack_file(directory / f"Pulumi.{base}.yaml")[1]
    digests = {image.reference: fake_digest(image.reference) for image in chart_images.chart_images(config)}
    models = [{"name": m.name, "image": {"digest": fake_digest(f"{m.image.repository}:{m.image.tag}")}}
              for m in config.models]
    return write(directory, f"{base}-pinned", {"chartImageDigests": digests, "models": models}, extends=base)


# Room for two models' replicas and their compile-cache producers (serving.producer_room).
# The accuracy gate prod requires of a revision with new weights (llm_serving/stack/rules/evals.py): one task, its
# files pinned by placeholders only the offline render reads.
EVAL: dict[str, Any] = {"limit": 50, "tasks": [{
    "name": "gsm8k", "dataset": "openai/gsm8k", "revision": "4" * 40, "filter": "strict-match", "numFewshot": 0,
    "files": [{"split": "test", "path": "main/test-00000-of-00001.parquet", "sha256": "5" * 64}]}]}
ROOM_FOR_TWO = {"scaling": {"minNodes": 2, "maxNodes": 8, "desiredNodes": 2}}


def prod_s3_with_twin_models(directory: Path) -> Path:
    """prod on S3 serving llama-70b twice under two names with every input of the compile cache's key alike."""
    twin = {"name": "llama-70b-canary", "modelId": "meta-llama/Llama-3.1-70B-Instruct",
            "revision": "1605565b47bb9346c5515c34102e054115b4f98b", "replicas": 1, "maxModelLen": 16384,
            "gpuMemoryUtilization": 0.92, "tensorParallelSize": "auto", "maxNumSeqs": 256,
            "maxNumBatchedTokens": 8192, "slo": {"ttftP95Seconds": 2, "itlP95Seconds": 0.1},
            "route": {"pathPrefix": "/canary"}}
    return write(directory, "prod-s3-twins", {"weightsStorage": {"backend": "s3"}, "gpuNodeGroup": ROOM_FOR_TWO,
                                               "models": [twin]})


# Two LoRA adapters on a model, two versions of one fine-tune behind an alias the clients call, for the component
# tier and the planner (the stack tier renders examples/Pulumi.multi-model.yaml). The repositories and commits
# are made up (no Hub is reachable from the tests); the staging Job checks real ones.
ADAPTER_REVISIONS = ("1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222")
DEV_LORA: dict[str, Any] = {
    "maxLoras": 2, "maxLoraRank": 16, "maxCpuLoras": 4,
    "adapters": [{"name": "sql-v1", "modelId": "example-org/llama-3.1-8b-sql-lora", "revision": ADAPTER_REVISIONS[0]},
                 {"name": "sql-v2", "modelId": "example-org/llama-3.1-8b-sql-lora", "revision": ADAPTER_REVISIONS[1]}],
    "aliases": [{"name": "sql", "targets": [{"adapter": "sql-v1", "weight": 90}, {"adapter": "sql-v2", "weight": 10}]}],
}



# A second revision of prod's model (made-up commit: no Hub is reachable from the tests; the staging Job checks real
# ones), beside the first at 90/10.
CANARY_REVISION = "3333333333333333333333333333333333333333"


def prod_with_two_revisions(directory: Path) -> Path:
    """prod serving llama-70b as two revisions side by side (`models[].revisions`): the stable one at 90 %, a canary
    of a new weights revision at 10 %, with the node group grown so both fit."""
    return write(directory, "prod-revisions", {"gpuNodeGroup": ROOM_FOR_TWO, "models": [{
        "name": "llama-70b", "revisions": [{"name": "stable", "weight": 90},
                                           {"name": "canary", "weight": 10, "revision": CANARY_REVISION}],
        "eval": EVAL}]})
