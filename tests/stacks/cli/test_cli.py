"""The command line as a user runs it: exit codes, one-line messages, no traceback, speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from stacks.config.files import PROJECT_DIR
from stacks.offline import render
from tests.support.cli import Ran, run_stacks


def run(*args: str, cwd: Path = PROJECT_DIR) -> Ran:
    """`python -m stacks *args` in this process (tests/support/cli.py); test_unknown_command_exits_2
    runs the real `python -m stacks` in its own interpreter."""
    return run_stacks(*args, cwd=cwd)


def test_render_dev_writes_both_files_and_a_summary(tmp_path, session_renders):
    result = run("render", "dev", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "manifests.yaml").stat().st_size > 0
    assert (tmp_path / "resources.json").stat().st_size > 0
    assert "resources by type:" in result.stdout
    assert "  llmserving:stack:ServingStack::llm-serving\n" in result.stdout
    assert "    - llmserving:gpu:GpuNodeGroup::gpu-p5-4xlarge\n" in result.stdout
    # The cost block: the stack's GPU nodes at min and max replicas, and $/1M output tokens per model.
    assert (
        "\ncost (On-Demand, us-east-1, 2026-07-20):\n"
        "  GPU nodes (p5.4xlarge): 0 at min replicas $0.00/hour; 1 at max $6.88/hour\n"
        "  llama-8b: $6.88/replica-hour; $0.43 per 1M output tokens at 256 requests (56.9 ms per token <= 100 ms; "
        "1,024 in / 256 out)\n"
    ) in result.stdout
    # dev's model scales to zero: the idle saving, and the wake its first request then waits, term by term.
    (idle,) = [line for line in result.stdout.splitlines() if line.startswith("    at zero after 1,800 s idle")]
    assert ": saves $6.88 per idle hour; the first request then waits " in idle and "(node 300 s, " in idle


def test_render_summary_prices_prod_at_min_and_max_replicas():
    from stacks import environment
    from stacks.cli.plan import stack_cost_summary
    from stacks.config import files as stack_files

    _, config = environment.load_stack_file(stack_files.stack_file_path("prod"))
    assert stack_cost_summary(config).splitlines()[1:] == [
        "cost (On-Demand, us-east-1, 2026-07-20):",
        "  GPU nodes (p5.48xlarge): 2 at min replicas $110.08/hour; 2 at max $110.08/hour",
        "  llama-70b: $27.52/replica-hour; $2.70 per 1M output tokens at 256 requests (90.3 ms per token <= 100 ms; "
        "1,024 in / 256 out)",
    ]


def test_render_quiet_writes_both_files_and_prints_only_their_paths(tmp_path, session_renders):
    # Render speed is measured by `make bench`, not asserted here: CI machines are shared and noisy.
    result = run("render", "prod", "--out", str(tmp_path), "--quiet")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "manifests.yaml").stat().st_size > 0
    assert (tmp_path / "resources.json").stat().st_size > 0
    assert "resources by type:" not in result.stdout


def _broken_copy(tmp_path: Path, stack: str, mutate) -> Path:
    for source in PROJECT_DIR.glob("Pulumi.*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    path = tmp_path / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text())
    mutate(document["config"])
    path.write_text(yaml.safe_dump(document))
    return path


def test_misspelt_key_exits_2_with_one_line_and_no_traceback(tmp_path):
    path = _broken_copy(tmp_path, "prod", lambda c: c["llm-serving:cluster"].update({"nmae": "x"}))
    result = run("render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'llm-serving:cluster.nmae: unknown key; did you mean "name"? (got "x"; expected one of '
        "create, kubernetesVersion, loadBalancerController, mode, name, networkPolicyEnforcement)"
    ]
    assert not (tmp_path / "out").exists()


def test_wrong_type_exits_2_with_one_line(tmp_path):
    path = _broken_copy(
        tmp_path, "prod", lambda c: c["llm-serving:gpuNodeGroup"]["scaling"].update({"minNodes": "two"})
    )
    result = run("render", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'llm-serving:gpuNodeGroup.scaling.minNodes: wrong type (got "two"; expected an integer)'
    ]


def test_cyclic_extends_exits_2_with_one_line(tmp_path):
    path = _broken_copy(tmp_path, "prod", lambda c: c.update({"llm-serving:extends": "staging"}))
    result = run("render", str(path.with_name("Pulumi.staging.yaml")))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'llm-serving:extends: cyclic extends: staging -> prod -> staging (got "staging"; expected a chain '
        "that ends)"
    ]
    assert "Traceback" not in result.stderr


def test_unknown_command_exits_2():
    # The module entry point in its own interpreter: its exit status and what reaches stderr.
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR)}
    result = subprocess.run([sys.executable, "-m", "stacks", "deploy"], cwd=PROJECT_DIR, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("unknown command 'deploy'\nusage: .venv/bin/python -m stacks <command>")


def test_model_that_cannot_fit_exits_2_before_anything_is_created(tmp_path):
    def shrink(config):
        config["llm-serving:models"][0].update({"tensorParallelSize": 2, "maxModelLen": 131072})

    path = _broken_copy(tmp_path, "prod", shrink)
    result = run("render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "llm-serving:models[llama-70b]: cannot serve on p5.48xlarge: KV cache holds 7,472 tokens but one "
        "request at --max-model-len 131072 needs 131,072"
    )
    assert not (tmp_path / "out").exists()


def test_render_against_a_cluster_of_another_version_exits_2_naming_both(tmp_path):
    # --cluster-version is the offline stand-in for the cluster a real preview looks up.
    result = run("render", "prod", "--out", str(tmp_path), "--cluster-version", "1.35")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        'llm-serving:cluster.kubernetesVersion: cluster llm-prod runs Kubernetes 1.35 (got "1.34"; expected '
        "'1.35' (with gpuNodeGroup.amiReleaseVersion a 1.35 release, or unset); the GPU node group then moves to "
        "a new generation beside the old one)"
    )
    assert not (tmp_path / "manifests.yaml").exists()


def test_help_lists_every_command_and_exits_0():
    result = run("--help")
    assert result.returncode == 0
    for command in ("render [<stack>...]", "plan ", "clone <from> <to>", "diff [<stack>...]"):
        assert f"\n  {command}" in result.stdout
    unknown = run("rendr")
    assert unknown.returncode == 2 and unknown.stderr.startswith("unknown command 'rendr'\nusage:")


def test_a_misspelt_stack_name_lists_the_stacks_that_exist():
    result = run("render", "prdo")
    assert result.returncode == 2
    assert result.stderr == (
        'llm-serving:stack: no stack file Pulumi.prdo.yaml; did you mean "prod"? stacks here: dev, prod, staging '
        '(got "prdo"; expected one of the stacks, or a path to a stack file)\n')


def test_an_unusable_output_path_fails_before_rendering(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    result = run("render", "dev", "--out", str(a_file))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f'llm-serving:--out: is a file, not a directory (got "{a_file}"; expected a directory '
                             "path)\n")
    below_a_file = a_file / "out"
    result = run("render", "dev", "--out", str(below_a_file))
    assert result.returncode == 2 and result.stderr.startswith("llm-serving:--out: cannot create it (Not a directory)")


def test_the_c_emitter_writes_the_same_bytes_as_the_pure_python_one(rendered):
    manifests = rendered["prod"].manifests
    assert render.dump_manifests(manifests) == render.dump_manifests(manifests, render._PureManifestDumper)


def test_render_takes_every_stack_by_default_and_out_only_with_one(tmp_path):
    from stacks import cli

    assert cli.render_parser().parse_args([]).stacks == []  # then every Pulumi.<stack>.yaml
    result = run("render", "dev", "prod", "--out", str(tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f'llm-serving:--out: one output directory for 2 stacks (got "{tmp_path}"; expected one '
                             "stack with --out, or no --out (each stack writes build/<stack>/))\n")
    assert list(tmp_path.iterdir()) == []


def test_a_stack_in_another_region_renders_its_arns_and_zones_there_and_says_whose_prices_it_shows(stack_dir):
    text = (stack_dir / "Pulumi.dev.yaml").read_text()
    (stack_dir / "Pulumi.dev-eu.yaml").write_text(
        text.replace("aws:region: us-east-1", "aws:region: eu-west-1").replace("us-east-1a", "eu-west-1a")
        .replace("us-east-1b", "eu-west-1b").replace("name: llm-dev", "name: llm-dev-eu"))
    result = run("render", str(stack_dir / "Pulumi.dev-eu.yaml"), "--out", str(stack_dir / "out"), cwd=stack_dir)
    assert result.returncode == 0, result.stderr
    resources = (stack_dir / "out" / "resources.json").read_text()
    assert ":eu-west-1:" in resources and ":us-east-1:" not in resources
    assert ("\ncost (On-Demand, us-east-1, 2026-07-20; this stack is in eu-west-1, whose prices "
            "llm_serving/gpu/prices.json does not hold: these are us-east-1's):\n") in result.stdout


def test_zone_ids_follow_awss_region_codes():
    from stacks.offline.mocks import zone_id_prefix

    assert [zone_id_prefix(r) for r in ("us-east-1", "eu-west-1", "ap-southeast-2", "eu-central-1", "us-gov-west-1",
                                        "ca-west-1")] == ["use1", "euw1", "apse2", "euc1", "usgw1", "caw1"]
