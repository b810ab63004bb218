"""The IAM evaluator of tests/support/iam_eval.py against the rules of the IAM user guide it cites, so a test that
asks it what a role may do cannot pass on an evaluator that ignores a condition."""

from __future__ import annotations

import pytest

from tests.support.iam_eval import allowed

OBJECT = "arn:aws:s3:::bucket/prefix/key"

# The S3 user guide's own example (conditional-writes-enforce.html, "Require If-None-Match"): an Allow of PutObject
# beside a Deny of any PutObject without the header.
ENFORCED = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::bucket/*"},
    {"Effect": "Deny", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::bucket/*",
     "Condition": {"Null": {"s3:if-none-match": "true"}}},
]}


def test_a_conditional_deny_applies_only_to_the_requests_it_matches():
    assert allowed(ENFORCED, "s3:PutObject", OBJECT, {"s3:if-none-match": "*"})
    assert not allowed(ENFORCED, "s3:PutObject", OBJECT)


def test_nothing_is_allowed_without_an_allow_for_the_action_and_resource():
    assert not allowed(ENFORCED, "s3:GetObject", OBJECT)
    assert not allowed(ENFORCED, "s3:PutObject", "arn:aws:s3:::other/key", {"s3:if-none-match": "*"})


def test_keys_are_anded_and_the_values_of_one_key_ored():
    policy = {"Statement": [{"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": "*", "Condition": {
        "Null": {"s3:if-match": "false"}, "StringEquals": {"s3:if-match": ['"a"', '"b"']}}}]}
    assert allowed(policy, "s3:DeleteObject", OBJECT, {"s3:if-match": '"b"'})
    assert not allowed(policy, "s3:DeleteObject", OBJECT, {"s3:if-match": '"c"'})
    assert not allowed(policy, "s3:DeleteObject", OBJECT)


def test_a_negated_operator_holds_on_an_absent_key_and_another_does_not():
    # reference_policies_elements_condition_operators.html: a missing key does not match, except for a negated
    # operator, whose condition is then true.
    negated = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*",
                              "Condition": {"StringNotEquals": {"s3:if-match": "*"}}}]}
    plain = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*",
                            "Condition": {"StringEquals": {"s3:if-match": "*"}}}]}
    assert allowed(negated, "s3:DeleteObject", OBJECT)
    assert not allowed(negated, "s3:DeleteObject", OBJECT, {"s3:if-match": "*"})
    assert not allowed(plain, "s3:DeleteObject", OBJECT)


def test_wildcards_are_iams_and_nothing_else():
    policy = {"Statement": [{"Effect": "Allow", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/p?/[x]*"}]}
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::b/p1/[x]y")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::b/p1/xy")  # `[x]` is literal, not a character class


def test_an_operator_outside_the_subset_is_refused():
    policy = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*",
                             "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]}
    with pytest.raises(ValueError, match="IpAddress is outside"):
        allowed(policy, "s3:GetObject", OBJECT, {"aws:SourceIp": "10.0.0.1"})
