"""The MiB/s one serving pod streams its weights from S3 at, from published figures (pure): the lowest of
the Run:ai Model Streamer's measured throughput at the pod's concurrency, the pod's share of its node's
network bandwidth, and its share of the prefix's GET request rate. None where a figure is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .buckets import S3_GET_REQUESTS_PER_SECOND_PER_PREFIX

MIB = 2**20

# The Run:ai Model Streamer reading S3 in the same region into a GPU (github.com/run-ai/runai-model-streamer
# @1e56c33e:docs/src/benchmarks.md, Appendix C: AWS g5.12xlarge, one A10G, streamer 0.6.0, Meta-Llama-3-8B
# "weighing 15 GB" in one safetensors file, at least two minutes between runs against S3-side caching):
# seconds to load the model to the GPU per `concurrency`. 64 was no faster than 32, so more concurrency
# than 32 is never planned faster. The "15 GB" is read as 15 x 10^9 bytes, the lower of its readings
# (the checkpoint is 16.1 x 10^9 bytes, so the figures below understate the measured rate by ~7 %).
STREAMER_BENCHMARK_BYTES = 15 * 10**9
STREAMER_S3_SECONDS = {4: 28.24, 16: 8.45, 32: 4.88, 64: 5.01}
STREAMER_SOURCE = ("run-ai/runai-model-streamer@1e56c33e:docs/src/benchmarks.md, S3 on a g5.12xlarge: "
                   "15 GB in 28.24 s at concurrency 4, 8.45 s at 16, 4.88 s at 32, 5.01 s at 64")

# The bandwidth a node's pods reach S3 through. Traffic within the region "can utilize the full network
# bandwidth available to the instance" (EC2 user guide, ec2-instance-network-bandwidth.html, multi-flow
# traffic), but only the ENA interface on network card 0 carries IP traffic here: the GPU launch template
# makes the other cards EFA-only (llm_serving/gpu/node_network.efa_interfaces), which carry no IP. One P5
# network card is 100 Gbps (EC2 instance types guide, ac.html network table: p5.4xlarge, 1 network card,
# "100 Gigabit"; p5.48xlarge and p5e.48xlarge, 32 network cards, "3200 Gigabit"). No per-card figure
# was found for the other catalog types: their S3 backend needs `readMibPerSecond`.
NODE_S3_GBPS = {"p5.4xlarge": 100, "p5.48xlarge": 100, "p5e.48xlarge": 100}
NODE_SOURCE = ("EC2 user guide ec2-instance-network-bandwidth.html: in-region traffic may use the instance's full "
               "bandwidth; ac.html: one P5 network card 100 Gigabit (p5.4xlarge), p5.48xlarge 32 cards, "
               "3200 Gigabit; IP traffic on card 0 only (the other cards are EFA-only)")
# A single flow outside a cluster placement group is limited to 5 Gbps (ec2-instance-network-bandwidth.html);
# each streamer connection is one flow, and the benchmark's busiest one moved 15 GB / 4.88 s / 32 = 0.77
# Gbps, so this limit never binds and is not a term.
SINGLE_FLOW_GBPS = 5

# S3's GET rate per prefix (buckets.S3_GET_REQUESTS_PER_SECOND_PER_PREFIX, 5,500). The streamer reads object
# storage in ranged GETs of RUNAI_STREAMER_CHUNK_BYTESIZE, 8 MiB by default for S3
# (run-ai/runai-model-streamer@0011b07a:docs/src/env-vars.md), and every replica of a model reads the same
# `<model>/<revision>/` prefix.
STREAMER_S3_CHUNK_BYTES = 8 * MIB
PREFIX_SOURCE = ("S3 user guide optimizing-performance.html: 5,500 GET/s per prefix; runai-model-streamer "
                 "env-vars.md: 8 MiB ranged GETs (RUNAI_STREAMER_CHUNK_BYTESIZE)")


def streamer_mib_per_second(concurrency: int) -> float:
    """The streamer's measured S3 throughput at the largest benchmarked concurrency not above `concurrency`
    (below the smallest, its per-connection rate times `concurrency`): never faster than measured."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    measured = {c: STREAMER_BENCHMARK_BYTES / seconds / MIB for c, seconds in STREAMER_S3_SECONDS.items()}
    smallest = min(measured)
    if concurrency < smallest:
        return measured[smallest] * concurrency / smallest
    return measured[max(c for c in measured if c <= concurrency)]


def _streamer_why(concurrency: int) -> str:
    smallest = min(STREAMER_S3_SECONDS)
    point = smallest if concurrency < smallest else max(c for c in STREAMER_S3_SECONDS if c <= concurrency)
    measured = f"15 GB in {STREAMER_S3_SECONDS[point]} s at concurrency {point}"
    if concurrency < smallest:
        return f"{measured}, scaled to {concurrency}"
    return measured if point == concurrency else f"{measured}, the measured point below {concurrency}"


@dataclass(frozen=True)
class S3ReadTerm:
    name: str
    mib_per_second: float
    why: str  # how this figure was reached, with its inputs
    source: str


@dataclass(frozen=True)
class S3ReadEstimate:
    terms: tuple[S3ReadTerm, ...]

    @property
    def binding(self) -> S3ReadTerm:
        return min(self.terms, key=lambda term: term.mib_per_second)

    @property
    def mib_per_second(self) -> float:
        return round(self.binding.mib_per_second, 1)


def s3_read_estimate(instance_type: str, *, concurrency: int, replicas_per_node: int,
                     replicas_reading_prefix: int) -> S3ReadEstimate | None:
    """One pod's S3 read rate as the lowest of three cited bounds, or None when the instance type's
    S3 bandwidth is not known. `replicas_per_node` share the node's card; `replicas_reading_prefix` (a
    model's maximum replicas, all cold-starting at once at worst) share the prefix's request rate."""
    gbps = NODE_S3_GBPS.get(instance_type)
    if gbps is None:
        return None
    if replicas_per_node < 1 or replicas_reading_prefix < 1:
        raise ValueError("replica counts must be at least 1")
    node = gbps * 10**9 / 8 / MIB
    prefix = S3_GET_REQUESTS_PER_SECOND_PER_PREFIX * STREAMER_S3_CHUNK_BYTES / MIB
    return S3ReadEstimate((
        S3ReadTerm("streamer", streamer_mib_per_second(concurrency), _streamer_why(concurrency), STREAMER_SOURCE),
        S3ReadTerm("node bandwidth", node / replicas_per_node,
                   f"{gbps} Gbps of {instance_type}'s card 0 shared by {replicas_per_node} replica(s) on the node",
                   NODE_SOURCE),
        S3ReadTerm("prefix requests", prefix / replicas_reading_prefix,
                   f"{S3_GET_REQUESTS_PER_SECOND_PER_PREFIX:,} GET/s x 8 MiB shared by "
                   f"{replicas_reading_prefix} replica(s) reading the revision at once", PREFIX_SOURCE),
    ))
