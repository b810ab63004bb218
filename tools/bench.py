"""`make bench`: how long the offline render takes, per stack and per number of models; with
`--suite` (`make bench SUITE=1`), also the whole test suite's wall and CPU time as `make test` runs it.

Wall-clock figures belong here, not in the test suite: the machines that run tests are shared and
noisy. Each figure is the median of several in-process renders, after one warm-up render.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from stacks.config.files import PROJECT_DIR
from stacks.offline import render


def _median_seconds(path: Path, repeats: int) -> float:
    render.render_stack(path)  # warm-up: imports and first-use caches
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        render.render_stack(path)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def _cold_cli_seconds(stack: str, out: Path) -> float:
    """One `python -m stacks render` in a new process: what a person waits for, imports included."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "stacks", "render", stack, "--out", str(out), "--quiet"],
        cwd=PROJECT_DIR, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - started


def dev_with_models(count: int, directory: Path) -> Path:
    """The dev stack serving `count` copies of its model, each on its own path, with GPUs for them."""
    document = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    config = document["config"]
    template = config["llm-serving:models"][0]
    config["llm-serving:models"] = [
        {**template, "name": f"{template['name']}-{index}", "route": {"pathPrefix": f"/m{index}"}}
        for index in range(count)
    ]
    # One GPU per replica plus one surge replica per model, one GPU per dev node.
    config["llm-serving:gpuNodeGroup"]["scaling"]["maxNodes"] = 2 * count
    path = directory / f"Pulumi.bench-{count}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def suite_seconds() -> tuple[float, float]:
    """(wall, CPU) seconds of `make test`'s pytest command; CPU is user + sys of it and its workers."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}  # as the Makefile's test target runs it
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "auto", "--dist", "worksteal", "-q"],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench: the suite failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="renders per figure (default 5)")
    parser.add_argument("--suite", action="store_true", help="also time the whole test suite (`make test`)")
    args = parser.parse_args(argv)
    if args.suite:
        wall, cpu = suite_seconds()
        print(f"`make test` on {os.cpu_count()} cores: {wall:.0f} s wall, {cpu:.0f} s CPU (user + sys, every worker)")
    stacks = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
    with tempfile.TemporaryDirectory() as scratch:
        print("`python -m stacks render <stack>` in a new process (imports included)")
        for path in stacks:
            stack = path.stem.removeprefix("Pulumi.")
            print(f"  {stack:<22} {_cold_cli_seconds(stack, Path(scratch) / stack):6.2f} s")
        print(f"in-process render, median of {args.repeats} after a warm-up")
        for path in stacks:
            print(f"  {path.stem.removeprefix('Pulumi.'):<22} {_median_seconds(path, args.repeats):6.2f} s")
        for count in (1, 2, 4, 8):
            seconds = _median_seconds(dev_with_models(count, Path(scratch)), args.repeats)
            label = f"dev with {count} model(s)"
            print(f"  {label:<22} {seconds:6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
