"""The S3 backend's pure pieces: the bucket's name, the revision prefixes and the streamer's settings."""

from __future__ import annotations

import pytest

from llm_serving import serving
from llm_serving.storage import buckets


def test_the_bucket_name_is_the_cluster_account_and_region_within_63_characters():
    assert buckets.bucket_name("llm-prod", "123456789012", "us-east-1") == "llm-prod-weights-123456789012-us-east-1"
    long = buckets.bucket_name("a-very-long-cluster-name-for-the-platform-team", "123456789012", "ap-southeast-2")
    assert long == "a-very-long-cluster-name-fo-weights-123456789012-ap-southeast-2"
    assert len(long) == 63
    # Cut where a hyphen would end the cluster part: no "--" in the name.
    assert buckets.bucket_name("abcdefghijklmnopqrstuvwxyz-abc", "123456789012", "ap-southeast-2") == \
        "abcdefghijklmnopqrstuvwxyz-weights-123456789012-ap-southeast-2"


def test_each_revision_has_its_own_prefix_and_uri():
    assert buckets.model_prefix("org/model", "abc123") == "org/model/abc123/"
    assert buckets.model_uri("b", "org/model", "abc123") == "s3://b/org/model/abc123/"
    assert serving.s3_model_prefix("org/model", "abc123") == buckets.model_prefix("org/model", "abc123")
    assert serving.s3_tokenizer_prefix("org/model", "def456") == "org/model/tokenizer-def456/"


def test_refuses_a_prefix_without_a_revision_or_with_a_slash_in_it():
    with pytest.raises(ValueError, match="a model prefix needs"):
        buckets.model_prefix("org/model", "")
    with pytest.raises(ValueError, match="a model prefix needs"):
        buckets.model_prefix("org/model", "refs/pr/1")


def test_roles_need_a_prefix():
    with pytest.raises(ValueError, match="a reader needs at least one prefix"):
        buckets.reader_policy("arn:aws:s3:::b", [])
    with pytest.raises(ValueError, match="a writer needs at least one prefix"):
        buckets.writer_policy("arn:aws:s3:::b", [])


def test_the_streamer_settings_are_one_json_object_in_bytes():
    assert serving.streamer_extra_config(16, 8) == '{"concurrency":16,"memory_limit":8589934592}'
    with pytest.raises(ValueError, match="must be positive"):
        serving.streamer_extra_config(0, 8)
