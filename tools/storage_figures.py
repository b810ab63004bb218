"""The weights-storage figures of the docs (tools/doc_figures.py registers GENERATORS): the read speed and
cold start per backend, S3's cited read bounds, and adding a replica of prod's model term by term on EFS,
FSx for Lustre and S3, with what keeps S3 above the 3-minute goal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from stacks.config.files import PROJECT_DIR
from tools.doc_facts import Facts

S3_EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml"


def _backend_plan(facts: Facts, mib_per_second: float) -> dict[str, Any]:
    """Prod's model with its own settings, planned on another read speed."""
    model, plan = facts.prod_model, facts.stack_plan()
    return facts.plan("--model", model.model_id, "--gpu", plan["gpu"], "--max-model-len", str(model.max_model_len),
                      "--tp", str(plan["tensor_parallel_size"]), "--gpu-memory-utilization",
                      f"{model.gpu_memory_utilization:g}", "--storage-read-mib-per-second", f"{mib_per_second:g}")


def fsx_default_read(facts: Facts) -> str:
    from llm_serving import storage
    from stacks.config import FsxLustreArgs

    capacity = FsxLustreArgs().storage_capacity_gib
    unit = FsxLustreArgs().per_unit_storage_throughput
    speed = storage.lustre_read_mib_per_second(capacity, unit)
    return (f"{capacity} GiB × {unit} MB/s/TiB = {speed:,.0f} MiB/s (prod's 70B: "
            f"{_backend_plan(facts, speed)['cold_start_seconds']:,} s)")


# (label, capacity GiB, MB/s per TiB, source) of the FSx rows in capacity-planner.md's backend table.
FSX_ROWS = (
    (2400, 500, "FSx Lustre guide (ssd-storage.html): disk throughput = TiB × per-unit throughput"),
    (1200, 125, "same"),
)


def cold_start_by_backend(facts: Facts) -> str:
    from llm_serving import storage

    lines = ["", "| backend | read speed planned | source | cold start | startup budget |", "|---|---|---|---|---|"]
    efs = _backend_plan(facts, storage.EFS_READ_MIB_PER_SECOND)
    lines.append(f"| `efs` (default) | {storage.EFS_READ_MIB_PER_SECOND:,.0f} MiB/s | EFS guide (performance.html): "
                 "500 MiBps per client outside the ≤ 1 ms fast path, 1,500 MiBps with it | "
                 f"{efs['cold_start_seconds']:,} s | {efs['startup_budget_seconds']:,} s |")
    for capacity, unit, source in FSX_ROWS:
        speed = storage.lustre_read_mib_per_second(capacity, unit)
        row = _backend_plan(facts, speed)
        lines.append(f"| `fsxLustre`, {capacity} GiB × {unit} MB/s/TiB | {speed:,.0f} MiB/s | {source} | "
                     f"{row['cold_start_seconds']:,} s | {row['startup_budget_seconds']:,} s |")
    s3 = facts.config(S3_EXAMPLE)
    speed = _s3_speed(s3)
    row = _backend_plan(facts, speed)
    concurrency = s3.weights_storage.s3.streamer_concurrency
    lines.append(f"| `s3`, {s3.gpu_node_group.instance_type}, `streamerConcurrency` {concurrency} | {speed:,.0f} "
                 "MiB/s | the lowest of three cited bounds ([below](#s3s-read-figure)) | "
                 f"{row['cold_start_seconds']:,} s | {row['startup_budget_seconds']:,} s |")
    lines += ["| `existingStorageClass` | `readMibPerSecond` | the operator | — | — |", ""]
    return "\n".join(lines)


def _s3_speed(config: Any) -> float:
    from llm_serving.stack import planning

    return planning.storage_read_mib_per_second(config, config.models[0])


def s3_read_bounds(facts: Facts) -> str:
    """The three bounds of S3's per-pod read figure for the prod-s3 example's model, each with its source."""
    from llm_serving.stack import planning

    config = facts.config(S3_EXAMPLE)
    estimate = planning.s3_read_estimate(config, config.models[0])
    assert estimate is not None  # p5.48xlarge has a cited figure
    lines = ["", "| bound | MiB/s per pod | how | source |", "|---|---:|---|---|"]
    for term in estimate.terms:
        mark = "**" if term is estimate.binding else ""
        lines.append(f"| {mark}{term.name}{mark} | {mark}{term.mib_per_second:,.0f}{mark} | {term.why} | "
                     f"{term.source} |")
    return "\n".join([*lines, ""])


def s3_goal(facts: Facts) -> str:
    """S3 with a warm node (image pre-pulled) and a compile-cache hit, against issue 29's 3-minute goal."""
    from llm_serving.stack import planning

    config = facts.config(S3_EXAMPLE)
    model = config.models[0]
    plan = planning.model_plan(config, model)
    free, _ = planning.cold_starts(config, model, plan)
    terms = dict(free.terms())
    terms["compile"] = plan.compile_cached_seconds
    total = sum(terms.values())
    goal = 180
    parts = " + ".join(f"{name} {seconds} s" for name, seconds in terms.items() if seconds)
    verdict = (f"{total - goal} s above the 3-minute goal: engine init alone ({terms['engine init']} s: the "
               "engine's start-up and the CUDA-graph capture, which no cache shortens) takes "
               f"{terms['engine init'] * 100 // goal} % of it" if total > goal else "within the 3-minute goal")
    return f"{parts} = {total} s, {verdict}"


def add_replica_cell(index: int) -> Callable[[Facts], str]:
    """README's backends table: adding a replica of prod's 70B on backend `index` of _backend_variants."""
    def cell(facts: Facts) -> str:
        from llm_serving.stack import planning

        _, config = _backend_variants(facts)[index]
        model = config.models[0]
        free, new = planning.cold_starts(config, model, planning.model_plan(config, model))
        return f"{free.total_seconds:,} s / {new.total_seconds:,} s"
    return cell


def _backend_variants(facts: Facts) -> list[tuple[str, Any]]:
    """Prod as it is (EFS), prod on the default FSx for Lustre file system, and examples/Pulumi.prod-s3.yaml."""
    from stacks.config import StorageBackend

    prod = facts.prod
    fsx = replace(prod, weights_storage=replace(prod.weights_storage, backend=StorageBackend.FSX_LUSTRE))
    return [("`efs` (prod)", prod), ("`fsxLustre` (defaults)", fsx),
            ("`s3` ([prod-s3](../examples/Pulumi.prod-s3.yaml))", facts.config(S3_EXAMPLE))]


def add_replica_by_backend(facts: Facts) -> str:
    """Adding one replica of prod's 70B on each backend, term by term (stacks/checks/planning.cold_starts), and
    what follows from it: the startup probe, the scale-down window and the rollout's await."""
    from llm_serving.stack import planning, timing

    lines = ["", "| backend | read speed | node | image pull | weights | engine init | compile | ready | free node "
             "| new node | startup budget | scale-down window | rollout await |", "|---|" + "---:|" * 12]
    for label, config in _backend_variants(facts):
        model = config.models[0]
        plan = planning.model_plan(config, model)
        free, new = planning.cold_starts(config, model, plan)
        terms = dict(new.terms())
        lines.append(
            f"| {label} | {planning.storage_read_mib_per_second(config):,.0f} MiB/s | {terms['node']} s | "
            f"{terms['image pull']} s | {terms['weights']} s | {terms['engine init']} s | {terms['compile']} s | "
            f"{terms['ready']} s | {free.total_seconds:,} s | {new.total_seconds:,} s | "
            f"{plan.startup_budget_seconds:,} s | {planning.scale_down_window(config, model, plan):,} s | "
            f"{timing.rollout_await_seconds(config, model):,} s |")
    return "\n".join([*lines, ""])


def nat_cold_start(facts: Facts) -> str:
    """What one cold start of prod's model costs through a NAT gateway instead of an S3 gateway endpoint."""
    from stacks.preflight import s3_checks

    gb = _weights_gb(facts)
    price = s3_checks.NAT_USD_PER_GB_PROCESSED
    return f"{gb:,.0f} GB at ${price} per GB processed, ${gb * price:,.2f} a cold start"


def _weights_gb(facts: Facts) -> float:
    from llm_serving.stack import planning

    architecture = planning.model_architecture(facts.prod_model)
    assert architecture is not None
    return architecture.weight_bytes / 1e9


def efs_policy_ceiling(facts: Facts) -> str:
    """How many models prod's weights file system policy holds within EFS's 20,000 characters (the preview's rule,
    llm_serving/stack/rules/platform.py efs_policy_rules)."""
    from llm_serving.stack.rules import platform

    with_caches = platform.efs_policy_ceiling(facts.prod, with_caches=True)
    without = platform.efs_policy_ceiling(facts.prod, with_caches=False)
    return f"{with_caches} models with a shared compile cache each, {without} without one"


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "s3-nat-cold-start": nat_cold_start,
    "efs-policy-ceiling": efs_policy_ceiling,
    "fsx-default-read": fsx_default_read,
    "cold-start-by-backend": cold_start_by_backend,
    "add-replica-by-backend": add_replica_by_backend,
    "s3-read-bounds": s3_read_bounds,
    "s3-goal": s3_goal,
    "s3-read-figure": lambda facts: f"{_s3_speed(facts.config(S3_EXAMPLE)):,.0f} MiB/s",
    "readme-add-efs": add_replica_cell(0),
    "readme-add-fsx": add_replica_cell(1),
    "readme-add-s3": add_replica_cell(2),
}
