"""Models that cannot work are rejected at preview, with the numbers, instead of crash-looping."""

from __future__ import annotations

from typing import Any

from llm_serving.platform.args import validate
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE

SHA = "1605565b47bb9346c5515c34102e054115b4f98b"
LLAMA_70B = {
    "name": "llama-70b",
    "modelId": "meta-llama/Llama-3.1-70B-Instruct",
    "revision": SHA,
    "maxModelLen": 16384,
    "replicas": 2,
}


def lines(environment: str = "prod", max_nodes: int = 2, stack: dict[str, Any] | None = None,
          **model: Any) -> list[str]:
    """The problems of prod's llama-70b with `model`'s keys, and the stack's `stack` keys."""
    group = {**BASE["gpuNodeGroup"], "scaling": {"minNodes": 1, "maxNodes": max_nodes, "desiredNodes": 1}}
    config = validate(ServingStackArgs,
        {**BASE, "environment": environment, "gpuNodeGroup": group, "models": [{**LLAMA_70B, **model}],
         **(stack or {})}
    )
    return [p.line() for p in checks.check(config)]


def test_prod_model_plans_cleanly():
    assert lines() == []


PREFIX = "llm-serving:models[llama-70b]: cannot serve on p5.48xlarge: "


def rejected(tp, mml):
    return (
        f' (got "tensorParallelSize={tp} maxModelLen={mml} gpuMemoryUtilization=0.92 kvCacheDtype=auto"; '
        "expected settings whose weights and one max-length request fit (see python -m stacks plan))"
    )


def test_rejects_max_model_len_above_the_models_context():
    assert lines(maxModelLen=200_000) == [
        PREFIX + "--max-model-len 200000 exceeds meta-llama/Llama-3.1-70B-Instruct's context of 131072 tokens "
        "(max_position_embeddings); lower it" + rejected("auto", 200000)
    ]


def test_rejects_tp_that_is_not_a_node_divisor():
    assert lines(tensorParallelSize=3) == [
        PREFIX + "--tensor-parallel-size 3 is not one of 1, 2, 4, 8" + rejected(3, 16384)
    ]


def test_rejects_weights_that_do_not_fit():
    assert lines(tensorParallelSize=1) == [
        PREFIX + "meta-llama/Llama-3.1-70B-Instruct needs 131.42 GiB of weights per GPU at "
        "--tensor-parallel-size 1, but 79.20 GiB x --gpu-memory-utilization 0.92 leaves 72.87 GiB; raise "
        "--tensor-parallel-size, use an FP8 checkpoint or a GPU with more memory" + rejected(1, 16384)
    ]


def test_rejects_kv_cache_that_cannot_hold_one_request():
    assert lines(tensorParallelSize=2, maxModelLen=131072) == [
        PREFIX + "KV cache holds 7,472 tokens but one request at --max-model-len 131072 needs 131,072; lower "
        "--max-model-len, raise --tensor-parallel-size, or use --kv-cache-dtype fp8" + rejected(2, 131072)
    ]


def test_rejects_branch_revision_in_prod_but_not_in_dev():
    assert lines(revision="main") == [
        'llm-serving:models[llama-70b].revision: prod needs a pinned commit, not a branch or tag (a silent '
        'upstream change would change outputs) (got "main"; expected a 40-character commit SHA)'
    ]
    assert lines(environment="dev", revision="main") == []


def test_rejects_unpinned_tokenizer_revision_in_staging():
    (line,) = lines(environment="staging", tokenizerRevision="v1")
    assert line.startswith("llm-serving:models[llama-70b].tokenizerRevision: staging needs a pinned commit")


def test_rejects_moving_image_tag():
    assert lines(environment="dev", image={"tag": "latest"}) == [
        'llm-serving:models[llama-70b].image.tag: a moving tag; pin the engine version (got "latest"; '
        "expected a release tag like v0.33.0)"
    ]


# One task whose files are pinned (placeholders only the offline checks read).
GSM8K = {"name": "gsm8k", "dataset": "openai/gsm8k", "revision": "4" * 40, "filter": "strict-match",
         "files": [{"split": "test", "path": "main/test-00000-of-00001.parquet", "sha256": "5" * 64}]}


def test_rejects_fp8_kv_cache_in_prod_without_an_eval():
    assert lines(kvCacheDtype="fp8") == [
        "llm-serving:models[llama-70b].eval: kvCacheDtype fp8 in prod needs an eval that runs and can fail the up, "
        "not a reference (got null; expected an eval with a pinned task set (docs/verification.md))"
    ]
    assert lines(environment="staging", kvCacheDtype="fp8") == []


def test_an_eval_of_one_revision_needs_a_floor_on_every_task_to_be_able_to_fail():
    assert lines(kvCacheDtype="fp8", eval={"tasks": [GSM8K]}) == [
        "llm-serving:models[llama-70b].eval.tasks[gsm8k].minScore: with one revision the eval compares against "
        "nothing, so a task without a floor could never fail (got null; expected the lowest acceptable score, 0-1)"
    ]
    assert lines(kvCacheDtype="fp8", eval={"tasks": [{**GSM8K, "minScore": 0.8}]}) == []


def test_rejects_quantization_in_prod_without_an_eval():
    (line,) = lines(quantization="fp8")
    assert line.startswith("llm-serving:models[llama-70b].eval: quantization fp8 in prod needs an eval")


def test_prod_needs_the_eval_to_gate_not_report():
    found = lines(kvCacheDtype="fp8", eval={"tasks": [{**GSM8K, "minScore": 0.8}]},
                  stack={"verification": {"mode": "report"}})
    assert [line for line in found if line.startswith(
        "llm-serving:verification.mode: lets models[llama-70b]'s eval pass whatever it scores")]


def test_an_eval_without_a_volume_to_stage_on_is_refused():
    (line,) = [line for line in lines(eval={"tasks": [{**GSM8K, "minScore": 0.8}]},
                                      stack={"weightsStorage": {"backend": "s3"}}) if ".eval:" in line]
    assert line.startswith("llm-serving:models[llama-70b].eval: stages its task set and harness on the weights volume")


def test_rejects_extra_args_that_override_typed_settings():
    assert lines(extraArgs=["--max-model-len=4096", "--enable-log-requests"]) == [
        'llm-serving:models[llama-70b].extraArgs: sets flags that typed keys own (got ["--max-model-len=4096"]; '
        "expected only flags without a key of their own)"
    ]


def test_rejects_more_replicas_at_peak_than_the_node_group_packs():
    # Three TP4 replicas need 12 GPUs, in groups of 4 on one node each: one 8-GPU node holds two.
    assert lines(max_nodes=1, replicas=3, autoscaling={"maxReplicas": 3}) == [
        "llm-serving:gpuNodeGroup.scaling.maxNodes: at peak the models need 2 nodes (llama-70b 3 x TP4 = 12 GPUs, "
        "each replica on one node) but the node group supplies 1 x p5.48xlarge (8 GPUs each; maxNodes, with a node "
        "autoscaler) (got 1; expected >= 2)"
    ]


def test_two_replicas_without_room_for_a_surge_roll_one_at_a_time():
    # Two TP4 replicas fill one node: no surge, but one replica keeps serving while the other rolls.
    assert lines(max_nodes=1) == []


def test_rejects_a_single_replica_that_would_stop_serving_during_a_rollout_outside_dev():
    single = {"replicas": 1, "autoscaling": {"minReplicas": 1, "maxReplicas": 1}, "maxModelLen": 16384}
    assert lines(max_nodes=1, tensorParallelSize=8, **single) == [
        "llm-serving:gpuNodeGroup.scaling.maxNodes: llama-70b: a rollout would stop serving for a cold start (no "
        "room for a surge replica at peak and a single replica; at peak llama-70b 1 x TP8 on 1 x p5.48xlarge (8 "
        "GPUs each; maxNodes, with a node autoscaler)); give it room for one more TP8 replica or run at least 2 "
        "replicas (got 1; expected >= 2)"
    ]
    # dev accepts the outage: it rolls with Recreate.
    assert lines(environment="dev", max_nodes=1, tensorParallelSize=8, **single) == []


def test_rejects_read_write_once_weights_for_several_replicas_and_on_efs():
    assert lines(storage={"accessMode": "ReadWriteOnce"}) == [
        'llm-serving:models[llama-70b].storage.accessMode: replicas on several nodes cannot share a '
        'ReadWriteOnce volume (got "ReadWriteOnce"; expected ReadWriteMany, or replicas and '
        "autoscaling.maxReplicas 1)",
        'llm-serving:models[llama-70b].storage.accessMode: EFS claims are ReadWriteMany (got "ReadWriteOnce"; '
        "expected ReadWriteMany, or weightsStorage.backend existingStorageClass with an EBS class)",
    ]


def test_rejects_unknown_model_without_architecture():
    assert lines(modelId="acme/secret-model") == [
        'llm-serving:models[llama-70b].modelId: not in the model catalog; give its facts in architecture '
        '(`python -m stacks plan --model <id> --model-config <config.json>` prints them) '
        '(got "acme/secret-model"; expected a catalog model or an architecture block)'
    ]


def test_a_misspelt_catalog_id_is_answered_with_the_near_id():
    assert lines(modelId="meta-llama/Llama-3.1-70B-Instruc") == [
        "llm-serving:models[llama-70b].modelId: not in the model catalog (did you mean "
        "meta-llama/Llama-3.1-70B-Instruct?); or, for another model, give its facts in architecture "
        '(got "meta-llama/Llama-3.1-70B-Instruc"; expected a catalog model or an architecture block)'
    ]


def test_accepts_unknown_model_with_architecture():
    architecture = {"parametersBillion": 8, "numLayers": 32, "numAttentionHeads": 32, "numKvHeads": 8,
                    "headDim": 128, "hiddenSize": 4096, "weightGib": 15, "maxContextTokens": 32768}
    assert lines(modelId="acme/secret-model", architecture=architecture, maxModelLen=8192) == []


def test_rejects_utilisation_outside_the_allowed_range():
    from pydantic import ValidationError

    for value in (0, 0.99):
        try:
            validate(ServingStackArgs, {**BASE, "models": [{**LLAMA_70B, "gpuMemoryUtilization": value}]})
        except ValidationError as error:
            assert error.errors()[0]["loc"] == ("models", 0, "gpuMemoryUtilization")
        else:
            raise AssertionError(f"{value} accepted")


def test_an_eval_whose_staging_job_name_would_not_be_a_kubernetes_name_is_refused():
    long_name = "m" * (63 - len("-eval-stage-") - 10 + 1)
    found = [line for line in lines(name=long_name, kvCacheDtype="fp8", eval={"tasks": [{**GSM8K, "minScore": 0.8}]})
             if ".eval:" in line]
    assert len(found) == 1 and "would exceed the 63 characters of a Kubernetes name" in found[0]
    assert not [line for line in lines(name=long_name[:-1], kvCacheDtype="fp8",
                                       eval={"tasks": [{**GSM8K, "minScore": 0.8}]}) if ".eval:" in line]
