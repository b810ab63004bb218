"""The S3 read estimate: each published figure becomes its bound, and the lowest one is planned on."""

from __future__ import annotations

import pytest

from llm_serving.storage import s3_read_estimate, streamer_mib_per_second


@pytest.mark.parametrize(("concurrency", "mib_per_second"), [
    (1, 126.6),  # a quarter of the rate measured at 4
    (4, 506.6),  # 15 GB in 28.24 s
    (8, 506.6),  # not measured: planned at 4's rate, never interpolated upwards
    (16, 1692.9),  # 15 GB in 8.45 s
    (32, 2931.4),  # 15 GB in 4.88 s
    (48, 2931.4),
    (64, 2855.3),  # 15 GB in 5.01 s: no faster than 32
    (256, 2855.3),
])
def test_streamer_rate_is_the_benchmark_at_or_below_the_concurrency(concurrency, mib_per_second):
    assert round(streamer_mib_per_second(concurrency), 1) == mib_per_second


def test_rejects_a_concurrency_below_one():
    with pytest.raises(ValueError, match="concurrency must be at least 1, got 0"):
        streamer_mib_per_second(0)


def test_two_replicas_on_a_p5_share_card_zero_and_the_streamer_binds():
    estimate = s3_read_estimate("p5.48xlarge", concurrency=32, replicas_per_node=2, replicas_reading_prefix=4)
    assert [(t.name, round(t.mib_per_second, 1)) for t in estimate.terms] == [
        ("streamer", 2931.4), ("node bandwidth", 5960.5), ("prefix requests", 11000.0)]
    assert (estimate.binding.name, estimate.mib_per_second) == ("streamer", 2931.4)
    assert estimate.binding.why == "15 GB in 4.88 s at concurrency 32"
    between = s3_read_estimate("p5.48xlarge", concurrency=24, replicas_per_node=2, replicas_reading_prefix=4)
    assert between.binding.why == "15 GB in 8.45 s at concurrency 16, the measured point below 24"


def test_eight_single_gpu_replicas_on_a_node_are_bound_by_its_bandwidth():
    estimate = s3_read_estimate("p5.48xlarge", concurrency=32, replicas_per_node=8, replicas_reading_prefix=8)
    assert (estimate.binding.name, estimate.mib_per_second) == ("node bandwidth", 1490.1)
    assert estimate.binding.why == "100 Gbps of p5.48xlarge's card 0 shared by 8 replica(s) on the node"


def test_many_replicas_reading_one_revision_are_bound_by_the_prefix_request_rate():
    estimate = s3_read_estimate("p5.48xlarge", concurrency=32, replicas_per_node=1, replicas_reading_prefix=16)
    assert (estimate.binding.name, estimate.mib_per_second) == ("prefix requests", 2750.0)


def test_no_estimate_for_an_instance_type_without_a_cited_s3_bandwidth():
    assert s3_read_estimate("p5en.48xlarge", concurrency=32, replicas_per_node=2, replicas_reading_prefix=4) is None
    assert s3_read_estimate("g6e.12xlarge", concurrency=16, replicas_per_node=1, replicas_reading_prefix=1) is None


def test_rejects_a_replica_count_below_one():
    with pytest.raises(ValueError, match="replica counts must be at least 1"):
        s3_read_estimate("p5.48xlarge", concurrency=32, replicas_per_node=0, replicas_reading_prefix=1)
