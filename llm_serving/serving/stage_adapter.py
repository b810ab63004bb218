"""Checks a LoRA adapter's `adapter_config.json` against the model it will be served on, before its marker.

Runs inside the staging Job (mounted from its ConfigMap beside stage_verify.py, standard library only) and in
the tests. A preview cannot read the adapter's config (it never downloads from the Hub), so the Job is where
the check runs: after the adapter's files match the Hub's record and before its completion marker, so a
mismatched adapter fails the Job, the model's rollout waits on it, and vLLM never starts with it.

What is refused, and why:
- a base model other than the stack's `modelId`. PEFT writes `base_model_name_or_path` from the base model's
  `name_or_path` at save time (peft 0.21.2 peft_model.py:376-381): the Hub id, or the local path it was loaded
  from, often the Hub cache's `.../models--ORG--NAME/snapshots/REV`. Both forms are reduced to `ORG/NAME` and
  compared case-sensitively; vLLM's static `--lora-modules` never compares them (only its filesystem resolver
  does, by exact string: vllm 0.33.0 plugins/lora_resolvers/filesystem_resolver.py).
- what vLLM 0.33.0 itself refuses when it loads the adapter (vllm/lora/peft_helper.py `validate_legal` and
  `_validate_features`): a rank (`r`, or the largest `rank_pattern` value) above `--max-lora-rank`; DoRA
  (`use_dora`); `lora_bias`; `bias` other than "none"; `modules_to_save` other than classifier/score;
  PiSSA/OLoRA/CorDA/LoftQ-style `init_lora_weights`; aLoRA, `layer_replication`, BD-LoRA, QALoRA; and a
  `peft_type` other than LORA. Refused here they fail the Job with the reason, instead of a crash loop at start.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

# init_lora_weights strings vLLM 0.33.0 accepts (peft_helper.py `_init_is_supported`); True/False are fine too.
SUPPORTED_INIT = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
# The Hub cache's directory for a repository: models--ORG--NAME/snapshots/<commit> (huggingface_hub file layout).
_HUB_CACHE = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def base_model_id(value: str) -> str:
    """`base_model_name_or_path` as a Hub id: a Hub cache path becomes ORG/NAME, any other path its last two
    parts; a plain id stays as it is."""
    found = _HUB_CACHE.search(value)
    if found:
        return f"{found.group(1)}/{found.group(2)}"
    parts = [part for part in value.rstrip("/").split("/") if part]
    return "/".join(parts[-2:]) if len(parts) > 2 else value.rstrip("/")


def adapter_rank(config: dict[str, Any]) -> int:
    """The rank vLLM checks against --max-lora-rank: max(r, every rank_pattern value)."""
    return max([int(config.get("r", 8)), *(int(r) for r in (config.get("rank_pattern") or {}).values())])


def config_problems(config: dict[str, Any], model_id: str, max_lora_rank: int) -> list[str]:
    """Why this adapter cannot be served on `model_id` at `max_lora_rank`; empty when it can."""
    found: list[str] = []
    if config.get("peft_type", "LORA") != "LORA":
        found.append(f"peft_type {config.get('peft_type')!r} is not LORA")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        found.append("adapter_config.json names no base_model_name_or_path")
    elif base_model_id(base) != model_id:
        found.append(f"base model {base!r} is not {model_id}")
    # vLLM's PEFTHelper.from_dict requires r, lora_alpha and target_modules, and __post_init__ refuses a rank
    # that is not positive (vllm/lora/peft_helper.py).
    missing = [key for key in ("r", "lora_alpha", "target_modules") if key not in config]
    if missing:
        found.append(f"adapter_config.json lacks {', '.join(missing)}, which vLLM requires")
    ranks = [config.get("r", 8), *(config.get("rank_pattern") or {}).values()]
    if not all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in ranks):
        found.append(f"ranks {ranks} (r and rank_pattern) must be positive integers")
        return found
    rank = adapter_rank(config)
    if rank > max_lora_rank:
        found.append(f"rank {rank} (max of r and rank_pattern) is above maxLoraRank {max_lora_rank}")
    if config.get("use_dora"):
        found.append("DoRA (use_dora) is not supported by vLLM")
    if config.get("lora_bias"):
        found.append("lora_bias is not supported by vLLM")
    if config.get("bias", "none") != "none":
        found.append(f"bias {config.get('bias')!r} is not supported by vLLM (only 'none')")
    unsupported = [m for m in (config.get("modules_to_save") or []) if m not in ("classifier", "score")]
    if unsupported:
        found.append(f"modules_to_save {unsupported} are not supported by vLLM")
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in SUPPORTED_INIT:
        found.append(f"init_lora_weights {init!r} changes the base weights; vLLM refuses it")
    for key, what in (("alora_invocation_tokens", "aLoRA"), ("layer_replication", "layer_replication"),
                      ("use_bdlora", "BD-LoRA"), ("use_qalora", "QALoRA")):
        if config.get(key):
            found.append(f"{what} is not supported by vLLM")
    return found


def main(argv: list[str]) -> int:
    """`stage_adapter.py <adapter directory> <model id> <max lora rank>`: exit 0 when the adapter fits."""
    directory, model_id, max_rank = Path(argv[0]), argv[1], int(argv[2])
    try:
        config = json.loads((directory / "adapter_config.json").read_text())
    except (OSError, ValueError) as error:
        sys.stderr.write(f"refused {directory}: no readable adapter_config.json ({error})\n")
        return 1
    problems = config_problems(config, model_id, max_rank)
    for problem in problems:
        sys.stderr.write(f"refused {directory}: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
