"""Provider keys (`aws:region`) are checked against the config keys of the providers requirements.txt pins, read
from their installed SDKs: a typo is one line with the key it meant, never a key written to a stack file."""

from __future__ import annotations

import inspect

import pytest

from stacks.config import providers


@pytest.mark.parametrize("key", ["aws:region", "aws:profile", "aws:allowedAccountIds", "aws:defaultTags",
                                 "kubernetes:kubeconfig", "kubernetes:context", "kubernetes:enableServerSideApply"])
def test_well_known_provider_keys_are_accepted_as_the_cli_spells_them(key):
    namespace, name = key.split(":")
    assert providers.key_problems(namespace, name) == []


def test_a_misspelt_provider_key_names_the_key_it_meant():
    assert [p.line() for p in providers.key_problems("aws", "regin")] == [
        f"llm-serving:--set: the aws provider (pulumi-aws {providers.pinned_providers()['aws'].version}, as pinned) "
        'has no config key regin; did you mean "aws:region"? (got "aws:regin"; expected aws:region)']
    # Case and snake_case slips find their key too.
    assert [p.expected for p in providers.key_problems("kubernetes", "kubeConfig")] == ["kubernetes:kubeconfig"]
    assert [p.expected for p in providers.key_problems("aws", "allowed_account_ids")] == ["aws:allowedAccountIds"]


def test_a_key_like_none_of_them_lists_every_key_the_provider_has():
    (problem,) = providers.key_problems("aws", "zzz")  # aws's SDK lists every config variable (config/vars.py)
    keys = sorted(providers.pinned_providers()["aws"].keys)
    assert problem.expected == "one of " + ", ".join(f"aws:{k}" for k in keys)


def test_the_providers_are_requirements_pins_and_their_keys_the_sdks_own():
    # The test may import the SDKs (the config layer may not: pyproject.toml's pure-modules contract).
    import pulumi_aws.config
    import pulumi_kubernetes.provider

    pinned = providers.pinned_providers()
    assert {"aws", "kubernetes"} <= set(pinned)
    assert f"{pinned['aws'].distribution}=={pinned['aws'].version}" in providers.REQUIREMENTS.read_text()
    # pulumi_aws.config makes itself an instance of its vars' _ExportableConfig (once loaded: the SDK's modules are
    # lazy until an attribute is read): one property per key, each reading the key by name.
    assert pulumi_aws.config.profile is None or isinstance(pulumi_aws.config.profile, str)
    exported = type(pulumi_aws.config)
    aws_properties = [n for n, v in vars(exported).items() if isinstance(v, property)]
    source = inspect.getsource(exported)
    assert len(pinned["aws"].keys) == len(aws_properties)
    assert all("__config__.get" in source and f"('{key}')" in source for key in pinned["aws"].keys)
    # pulumi-kubernetes ships no config module: its Provider's inputs are the keys.
    kubernetes_properties = [n for n, v in vars(pulumi_kubernetes.provider.ProviderArgs).items()
                             if isinstance(v, property)]
    assert len(pinned["kubernetes"].keys) == len(kubernetes_properties)


def test_a_namespace_of_no_pinned_provider_is_not_checked():
    # The CLI stores any namespace (`pulumi:tags`, an ESC or policy pack's); only our providers' keys are known.
    assert providers.key_problems("gcp", "projet") == []
    assert providers.key_problems("pulumi", "tags") == []


def test_a_kubernetes_key_the_sdk_cannot_list_is_accepted_and_a_near_miss_of_a_listed_one_refused():
    # pulumi-kubernetes' Python SDK has no config/vars.py; kubernetes:strictMode is a schema config variable only
    # (its Go SDK's config.GetStrictMode), so an unknown key there is refused only when it is close to a known one.
    assert providers.key_problems("kubernetes", "strictMode") == []
    assert providers.key_problems("kubernetes", "contxt")
