"""`python -m stacks clone <from> <to> --set key.path=value [--keep key.path]`: a new stack file that extends another.

The new file holds `extends`, the overrides, the keys the Pulumi CLI needs in the stack's own file
(required declarations such as `llm-serving:environment`, provider keys such as `aws:region`) and a
placeholder per secret, so it stays a clone: later changes to the base reach it. It is validated,
against our models and the CLI's own rules (stacks/config/keys.py), before it is written, and an
existing file is never overwritten. A provider key is checked against its pinned provider's config keys
(stacks/config/providers.py); a clone into another region must set or `--keep` each value bound to the base's
region (stacks/config/regions.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stacks import environment
from stacks.config import ServingStackArgs, files, keys, overrides, providers, regions
from stacks.config.problems import ConfigError, Problem, show


def parse_override(text: str) -> overrides.Override:
    """`gpuNodeGroup.scaling.maxNodes=2`, `models[llama-70b].replicas=1`, or a provider key written
    as the CLI spells it (`aws:region=eu-west-1`); `llm-serving:cluster.name=x` is our own key."""
    key = text.partition("=")[0].strip()
    if ":" in key and keys.parse_key(key.partition(".")[0]) is None:
        raise ConfigError([Problem("--set", "the Pulumi CLI cannot parse this config key", key,
                                   "key.path=value, or <namespace>:<name>=value such as aws:region=eu-west-1")])
    return overrides.parse(text)


def clone_document(
    base: str,
    texts: list[str],
    base_other: dict[str, Any] | None = None,
    required: dict[str, Any] | None = None,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    """The YAML document of the new stack file.

    Provider keys (aws:region) are copied from the base and keys `Pulumi.yaml` requires are written
    from the base's resolved values (`required`, e.g. environment): the CLI reads only the clone's
    own file, so neither can be inherited. Each secret gets the placeholder the render accepts and
    `make preview` refuses.
    """
    values: dict[str, Any] = dict(required or {})
    other: dict[str, Any] = dict(base_other or {})
    for text in texts:
        override = parse_override(text)
        if override.namespace is not None:
            top = override.path[0].key
            nested = overrides.apply({}, dataclasses.replace(override, namespace=None), create_items=False)[top]
            key = f"{override.namespace}:{top}"
            other[key] = files.deep_merge(other.get(key), nested) if isinstance(other.get(key), dict) else nested
            continue
        if override.path[0].key == "extends":
            raise ConfigError([Problem("extends", "set by clone itself", text, "no --set extends")])
        # A named item (models[llama-70b]) is written as {name: ...}: merged by name over the base.
        values = overrides.apply(values, override, create_items=True)
    config: dict[str, Any] = {**other, f"{files.PROJECT}:extends": base}
    for key in sorted(values):
        config[f"{files.PROJECT}:{key}"] = values[key]
    for key in sorted(secrets or []):
        config[f"{files.PROJECT}:{key}"] = dict(keys.PLACEHOLDER_SECRET)
    return {"config": config}


def created_cluster_name(new: str) -> str:
    """The cluster a `--create-cluster` clone creates: named after the clone, never the base's (whose cluster
    exists, in another account or region or beside it), within the created-cluster name limit."""
    from llm_serving.cluster import MAX_CLUSTER_NAME_LENGTH

    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"llm-{new}")[:MAX_CLUSTER_NAME_LENGTH].rstrip("-_")
    return name


def create_cluster_overrides(base_values: dict[str, Any], zones: list[str], new: str = "") -> list[str]:
    """`clone --create-cluster a,b,c`: the overrides that turn a clone into a stack creating its own
    cluster over these zones (a new account or region has no cluster to attach to), named after the clone
    (`created_cluster_name`). The GPU nodes keep as many zones as the base gave them (one for a placement group
    or capacity block), now the first of the new zones, in the created subnets; every other cluster.create key
    keeps its default, and the base's staging-node role, security groups and node selector are unset (the created
    CPU nodes' stand in). A `--set cluster.name=...` given with it wins (it comes later)."""
    if not 2 <= len(zones) <= 3 or len(set(zones)) != len(zones):
        raise ConfigError([Problem("--create-cluster", "two or three distinct availability zones", ",".join(zones),
                                   "e.g. eu-west-1a,eu-west-1b,eu-west-1c")])
    subnets = base_values.get("gpuNodeGroup", {}).get("subnets", [])
    gpu_zones = max(1, min(len({s.get("availabilityZone") for s in subnets}), len(zones)))
    # The base's staging nodes are its cluster's CPU nodes: the created cluster's own stand in where the file is
    # silent (stacks/program.py created_facts), so their role and security groups are unset here. A group of the
    # base's VPC cannot guard a mount target of the created one (EFS: a mount target's groups are its VPC's).
    efs = base_values.get("weightsStorage", {}).get("efs", {})
    staging = [*(["weightsStorage.efs.stagingNodeRoleArn=null"] if efs.get("stagingNodeRoleArn") else []),
               *(["weightsStorage.efs.stagingNodeSecurityGroupIds=[]"] if efs.get("stagingNodeSecurityGroupIds")
                 else []),
               # A null drops the base's selector (stacks/config/files.py deep_merge): its labels are its
               # cluster's CPU nodes', which the created cluster does not have.
               *(["weightsStorage.efs.stagingNodeSelector=null"] if efs.get("stagingNodeSelector") else [])]
    return [
        "cluster.mode=create",
        *([f"cluster.name={created_cluster_name(new)}"] if new else []),
        f"cluster.create.zones=[{', '.join(zones)}]",
        "gpuNodeGroup.subnets=[" + ", ".join(f"{{availabilityZone: {z}}}" for z in zones[:gpu_zones]) + "]",
        *staging,
    ]


@dataclass(frozen=True)
class Cloned:
    """What `clone` wrote: the file, the secrets it must set itself, and what looks unintended."""

    path: Path
    secrets: list[str]
    warnings: list[str]
    kept: list[str] = field(default_factory=list)  # region-bound values kept from a base of another region (--keep)


def clone(
    base: str, new: str, settings: list[str], project_dir: Path, create_zones: list[str] | None = None,
    keep: Collection[str] = (),
) -> Cloned:
    """Write the clone; refuse it when it would silently inherit prod's environment, or, in another region than
    its base's, a value bound to the base's region that it neither sets nor `keep`s. With `create_zones` the clone
    creates its own cluster there (`create_cluster_overrides`), before the `settings`, which win."""
    target = files.stack_file_path(new, project_dir)
    if not files.STACK_FILE.match(target.name):
        raise ConfigError([Problem("stack", "not a valid stack name", new, "letters, digits, - _ .")])
    if target.exists():
        raise ConfigError([Problem("stack", f"{target.name} already exists; not overwriting it", new,
                                   "the name of a new stack")])
    if not files.stack_file_path(base, project_dir).is_file():
        raise ConfigError([Problem("extends", "no such stack to clone", base, "an existing stack file")])
    base_file = files.read_stack_file(files.stack_file_path(base, project_dir))
    project = keys.load_project(project_dir)
    base_resolved = files.resolve(base_file, project_dir)
    if create_zones is not None:
        settings = [*create_cluster_overrides(base_resolved.values, create_zones, new), *settings]
    parsed = [parse_override(text) for text in settings]
    provider_problems = [p for o in parsed if o.namespace is not None
                         for p in providers.key_problems(o.namespace, o.path[0].key, o.option)]
    if provider_problems:
        raise ConfigError(provider_problems)
    _unknown_model_problems(parsed, base, base_resolved.values)
    own_keys = {o.key for o in parsed if o.namespace is None}
    # A clone of prod that says nothing is prod: protected data, pinned digests, paging alerts, all
    # aimed at whatever cluster it names. Make the clone say which environment it is.
    if base_resolved.values.get("environment") == "prod" and "environment" not in own_keys:
        raise ConfigError([Problem("environment", f"a clone of {base} would inherit environment prod", "prod",
                                   "--set environment=staging (or dev; prod only when meant: "
                                   "--set environment=prod)")])
    required = {}
    for key in keys.required_keys(project):
        namespace, name = key.split(":", 1)
        if namespace == files.PROJECT and name in base_resolved.values:
            required[name] = base_resolved.values[name]
    # Secrets are never inherited: the clone gets a placeholder for each secret its base chain has.
    first = clone_document(base, settings, base_file.other, required)
    secrets = sorted(files.resolve(files.split_config(new, target, first["config"]), project_dir).uninherited_secrets)
    document = clone_document(base, settings, base_file.other, required, secrets)
    problems = keys.stack_file_problems(document, project, target.name)
    if problems:
        raise ConfigError(problems)
    own = files.split_config(new, target, document["config"])
    resolved = files.resolve(own, project_dir)
    kept = _region_check(base, base_file.other.get("aws:region"), document["config"].get("aws:region"),
                         resolved.values, own.values, keep)
    # Validates everything (raises ConfigError on any problem: nothing written).
    config = environment.validate(resolved)
    region = document["config"].get("aws:region")
    header = (
        f"# Clone of {base}: values here deep-merge over Pulumi.{base}.yaml.\n"
        f"# Secrets are not inherited: replace each placeholder with "
        f"`pulumi config set --secret <key> <value> -s {new}`.\n"
        + (f"# Kept from {base} on purpose (clone --keep), though {base} is in another region: "
           f"{', '.join(kept)}.\n" if kept else "")
    )
    target.write_text(header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
    warnings = _warnings(base, config, own_keys, region, set(keep), base_resolved.values)
    return Cloned(target, secrets, [*warnings, *_price_warnings(config, region)], kept)


def _region_check(base: str, base_region: object, region: object, values: dict[str, Any], own: dict[str, Any],
                  keep: Collection[str]) -> list[str]:
    """Refuses a `--keep` that names no region-bound key, and a clone into another region than its base's that
    inherits a value of the base's region without `--set` or `--keep` (stacks/config/regions.py). Returns the
    values kept."""
    problems = regions.keep_problems(keep, values, own)
    if problems:
        raise ConfigError(problems)
    if not isinstance(region, str) or region == base_region:
        return []
    check = regions.region_problems(base, base_region, region, values, own, keep)
    if check.problems:
        raise ConfigError(check.problems)
    return check.kept


def _unknown_model_problems(parsed: list[overrides.Override], base: str, base_values: dict[str, Any]) -> None:
    """A `models[<name>]` override naming no model of the base, without the modelId a new model needs: a typo,
    named as such with the base's models (validation would only say a required key is missing)."""
    known = [m.get("name") for m in base_values.get("models") or [] if isinstance(m, dict)]
    named: dict[str, set[str]] = {}
    for override in parsed:
        if override.namespace is None and override.path[0].key == "models" and override.path[0].name:
            keys_set = named.setdefault(override.path[0].name, set())
            if len(override.path) > 1:
                keys_set.add(override.path[1].key)
    problems = [Problem(f"models[{name}]", f"no model of that name in {base}", name,
                        f"one of {', '.join(str(k) for k in known)}, or a new model with models[{name}].modelId")
                for name, given in named.items() if name not in known and "modelId" not in given]
    if problems:
        raise ConfigError(problems)


def _warnings(base: str, config: ServingStackArgs, own_keys: set[str], region: object, keep: set[str],
              base_values: dict[str, Any]) -> list[str]:
    """What a valid clone probably did not mean: another environment's cluster (unless kept with --keep), zones in
    another region than the provider's, or a created cluster whose staging Job selects the base's nodes."""
    found = []
    if not any(key == "cluster" or key.startswith("cluster.") for key in own_keys) and "cluster.name" not in keep:
        found.append(f"cluster.name is {config.cluster.name}, inherited from {base}: this stack deploys into "
                     f"{base}'s cluster; set --set cluster.name=<cluster> unless that is meant (then "
                     "--keep cluster.name says so)")
    selector = base_values.get("weightsStorage", {}).get("efs", {}).get("stagingNodeSelector")
    if config.cluster.create is not None and selector and "weightsStorage.efs.stagingNodeSelector" not in own_keys:
        # Set cluster.mode create by hand (not --create-cluster, which drops it): the created CPU nodes
        # (stacks/program.py created_facts) carry none of the base's labels.
        found.append(f"weightsStorage.efs.stagingNodeSelector is {show(selector)}, inherited from {base}: it selects "
                     f"{base}'s CPU nodes, which the created cluster does not have, so the weights staging Job would "
                     "never be scheduled; --set weightsStorage.efs.stagingNodeSelector=null drops it (the created "
                     "CPU nodes stand in)")
    if isinstance(region, str):
        foreign = sorted({s.availability_zone for s in config.gpu_node_group.subnets
                          if not s.availability_zone.startswith(region)})
        if foreign:
            found.append(f"gpuNodeGroup.subnets are in {', '.join(foreign)}, not in aws:region {region}: set the "
                         "new region's subnets with --set 'gpuNodeGroup.subnets=[{id: subnet-..., "
                         "availabilityZone: ...}]'")
    return found


def _price_warnings(config: ServingStackArgs, region: object) -> list[str]:
    """The planner prices one region (llm_serving/gpu/prices.json): render and plan show those prices for a stack
    in another, so the clone says whose they are."""
    from llm_serving.gpu import instance_price

    price = instance_price(config.gpu_node_group.instance_type)
    if not isinstance(region, str) or price is None or price.usd_per_hour is None or price.region == region:
        return []
    return [f"the $/hour that render and plan show for this stack are {price.region}'s On-Demand prices "
            f"(llm_serving/gpu/prices.json holds no other region's); {region}'s differ"]
