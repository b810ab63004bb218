"""Regenerate the Jobs' pinned, hashed requirements: `python -m tools.stage_lock [--only stage|eval]`.

The staging Job runs the small Python image in llm_serving/platform/versions.py and installs
huggingface_hub with `pip --require-hashes` from llm_serving/serving/stage-requirements.txt, so what
runs is exactly what was reviewed. This script resolves the pinned version's dependencies for the
image's Python on x86_64 Linux, where the Job runs (its nodeSelector says kubernetes.io/arch: amd64),
and writes every wheel's sha256.

The eval Job (the accuracy gate, llm_serving/verification/eval_gate.py) runs the same image with
lm-evaluation-harness from llm_serving/verification/eval-requirements.txt, installed wheels only, without
dependency resolution (`pip install --no-index --find-links <staged wheels> --require-hashes
--only-binary=:all: --no-deps --target`): so the lock lists every package the run imports and nothing else.
lm_eval 0.4.13 declares a closure that a wheel-only install cannot take (rouge-score, sqlitedict and
word2number publish source archives only) and that the gate's run never imports; `EVAL_PACKAGES` is the subset
the run imports, found by running the offline test (tests/components/verification/test_eval_gate.py) with
lm_eval installed `--no-deps` and adding what it asked for, and that test's restricted run keeps it exact. What
lm_eval declares and the gate leaves out, with the import that never runs on the gate's path (lm_eval 0.4.13's
wheel, paths under lm_eval/):

- evaluate: api/registry.py:632 `import evaluate` inside `get_metric`, only for a metric lm_eval does not register
  itself; exact_match is registered (api/metrics.py:272 `@register_metric(metric="exact_match", ...)`).
- scikit-learn (and scipy, joblib, threadpoolctl it needs): api/metrics.py:63 and :75 import sklearn inside the
  f1 and mcc aggregations, utils.py:637 inside a weighted f1; the gate's metrics aggregate with `mean`.
- rouge-score (and nltk, absl-py): imported only by tasks' own utils.py (e.g. tasks/cnn_dailymail/utils.py), which
  load through a task YAML's `!function`; gsm8k-style tasks have none.
- sqlitedict: api/model.py:15 imports it under TYPE_CHECKING, :283 inside CachingLM, used only with `use_cache`.
- word2number: imported only by tasks' own utils.py (tasks/.../utils.py of two tasks), as rouge-score.
- pytablewriter (and DataProperty, mbstrdecoder, pathvalidate, tabledata, tcolorpy, typepy, chardet):
  utils.py:481 inside `make_table`, the CLI's results table; the gate prints its own.
- more-itertools: models/vllm_causallms.py:10 and models/vllm_vlms.py:6 only, the in-process vLLM models.
- tiktoken (lm_eval[api]): api_models.py:216 inside the `tiktoken` tokenizer backend; the gate runs without one.

The packages that the resolver adds for the subset's own dependencies and that the run does not import are
dropped the same way and named on stdout when the lock is written (`EVAL_UNUSED`, each with its reason).
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from llm_serving.platform import versions

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "llm_serving" / "serving" / "stage-requirements.txt"
EVAL_TARGET = ROOT / "llm_serving" / "verification" / "eval-requirements.txt"
# One architecture: hf-xet, which huggingface_hub requires, publishes a wheel per platform, and the
# Job is pinned to amd64 nodes. Add "manylinux2014_x86_64" (and drop the Job's arch selector) for
# Graviton-only clusters.
PLATFORMS = ("manylinux2014_x86_64",)
# The eval Job's image is Debian bookworm (python:3.12.8-slim-bookworm), glibc 2.36: every manylinux tag up to
# 2_36 runs there (PEP 600: manylinux_x_y needs glibc >= x.y), and pip takes a `--platform` literally, so each is
# named, with the legacy aliases of 2_17, 2_12 and 2_5 (PEP 599, 571, 513). numpy, pandas and pyarrow publish
# manylinux_2_27/2_28 wheels only for their newer releases: manylinux2014 alone would pin old ones.
EVAL_PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
                  "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
# What the gate's run imports (normalized names, PEP 503): lm_eval and its kept requirements, the [api] extra's
# client packages but tiktoken, and their dependencies that load on the way (see the docstring).
EVAL_PACKAGES = (
    "aiohappyeyeballs", "aiohttp", "aiosignal", "attrs", "certifi", "charset-normalizer", "colorama", "datasets",
    "dill", "filelock", "frozenlist", "fsspec", "h11", "httpcore2", "httpx2", "huggingface-hub", "idna", "jinja2",
    "lm-eval", "lxml", "markupsafe", "multidict", "multiprocess", "numpy", "packaging", "pandas", "portalocker",
    "propcache", "pyarrow", "python-dateutil", "pyyaml", "requests", "sacrebleu", "six", "tabulate", "tenacity",
    "tqdm", "truststore", "typing-extensions", "urllib3", "xxhash", "yarl",
)
# The dev lock, whose versions of EVAL_PACKAGES constrain the eval lock's: the Job runs the versions the offline
# test ran (python-dateutil stays below 3 there for botocore, and 2.x imports six, which 4.x does not).
DEV_LOCK = ROOT / "requirements-dev.lock"
# lm_eval's [api] extra (its METADATA): the client that local-completions needs, less tiktoken (docstring).
EVAL_API_EXTRA = ("requests", "aiohttp", "tenacity", "tqdm")
# Resolved for the subset's own dependencies, never imported by the gate's run (checked by the offline test's
# restricted run: a package it imports and the lock lacks fails it).
EVAL_UNUSED = {
    "anyio": "httpx2's websockets (httpx2/websockets/_api.py:25 `import anyio`), which huggingface_hub never opens",
    "click": "huggingface_hub's CLI (huggingface_hub/cli/_framework.py:47 `import click`), not its library",
    "hf-xet": "huggingface_hub's Xet transfers, imported inside the download (file_download.py:554 `from hf_xet "
              "import ...`); HF_HUB_OFFLINE downloads nothing",
    "regex": "sacrebleu's `intl` tokenizer (sacrebleu/tokenizers/tokenizer_intl.py:3 `import regex`), loaded only "
             "when a BLEU metric asks for it",
    "tzdata": "pandas requires it on Windows and emscripten only (its METADATA: `tzdata; sys_platform == \"win32\"`, "
              "pandas/__init__.py:6); Linux reads /usr/share/zoneinfo",
}
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _target_args(platforms: tuple[str, ...]) -> list[str]:
    python = versions.STAGE_PYTHON_VERSION.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", versions.STAGE_PYTHON_VERSION, "--implementation", "cp",
            "--abi", f"cp{python}"]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def _download(requirements: list[str], into: Path, platforms: tuple[str, ...], deps: bool = True,
              extra: tuple[str, ...] = ()) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", *requirements,
         *_target_args(platforms), *([] if deps else ["--no-deps"]), *extra, "-d", str(into)],
        check=True,
    )


def dev_pins(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line of a pip-compile lock."""
    return {_normal(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.MULTILINE)}


def _hashes(directory: Path, hashes: dict[tuple[str, str], set[str]]) -> None:
    for wheel in sorted(directory.glob("*.whl")):
        match = _WHEEL.match(wheel.name)
        assert match, wheel.name
        key = (match["name"].lower().replace("_", "-"), match["version"])
        hashes.setdefault(key, set()).add(hashlib.sha256(wheel.read_bytes()).hexdigest())


def render(header: str, hashes: dict[tuple[str, str], set[str]]) -> str:
    """The lock's text: the header, then one `name==version --hash=...` line per package, sorted."""
    lines = [header]
    for (name, version), digests in sorted(hashes.items()):
        lines.append(f"{name}=={version} " + " ".join(f"--hash=sha256:{d}" for d in sorted(digests)))
    return "\n".join(lines) + "\n"


def stage_lock() -> int:
    hashes: dict[tuple[str, str], set[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for platform in PLATFORMS:
            into = Path(scratch) / platform
            _download([f"huggingface_hub=={versions.HUGGINGFACE_HUB_VERSION}", f"boto3=={versions.BOTO3_VERSION}"],
                      into, (platform,))
            _hashes(into, hashes)
    header = (f"# Generated by `python -m tools.stage_lock` for Python {versions.STAGE_PYTHON_VERSION} on "
              f"{' and '.join(PLATFORMS)}; do not edit.")
    TARGET.write_text(render(header, hashes))
    sys.stdout.write(f"wrote {TARGET} ({len(hashes)} packages)\n")
    return 0


def _kept_requirements(wheel: Path) -> list[str]:
    """lm_eval's own Requires-Dist for the packages the gate keeps (its version bounds), and its [api] extra's."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    kept = []
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec, _, marker = requirement.partition(";")
        project = _normal(re.split(r"[<>=!~\[ (]", spec.strip(), maxsplit=1)[0])
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if project in EVAL_PACKAGES and (extra is None or (extra[1] == "api" and project in EVAL_API_EXTRA)):
            kept.append(spec.strip().replace(" ", ""))
    return sorted(set(kept))


def eval_lock() -> int:
    hashes: dict[tuple[str, str], set[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        harness, closure = Path(scratch) / "harness", Path(scratch) / "closure"
        _download([f"lm_eval=={versions.HARNESS_VERSION}"], harness, EVAL_PLATFORMS, deps=False)
        roots = _kept_requirements(next(harness.glob("*.whl")))
        constraints = Path(scratch) / "constraints.txt"
        pins = dev_pins(DEV_LOCK.read_text())
        constraints.write_text("".join(f"{name}=={pins[name]}\n" for name in EVAL_PACKAGES if name in pins))
        # One resolution of the kept requirements with their dependencies, for the Job's Python and glibc.
        _download(roots, closure, EVAL_PLATFORMS, extra=("-c", str(constraints)))
        _hashes(harness, hashes)
        _hashes(closure, hashes)
    resolved = {name for name, _ in hashes}
    missing = sorted(set(EVAL_PACKAGES) - resolved)
    if missing:
        sys.stderr.write(f"the resolution lacks {', '.join(missing)}: a requirement changed; see EVAL_PACKAGES\n")
        return 1
    unknown = sorted(resolved - set(EVAL_PACKAGES) - set(EVAL_UNUSED))
    if unknown:
        sys.stderr.write(f"resolved but neither kept nor explained: {', '.join(unknown)}; add each to EVAL_PACKAGES "
                         "(the run imports it) or EVAL_UNUSED (why it does not)\n")
        return 1
    for name in sorted(resolved - set(EVAL_PACKAGES)):
        sys.stdout.write(f"left out {name}: {EVAL_UNUSED[name]}\n")
    kept = {key: digests for key, digests in hashes.items() if key[0] in EVAL_PACKAGES}
    header = (f"# Generated by `python -m tools.stage_lock --only eval` for Python {versions.STAGE_PYTHON_VERSION} on "
              f"x86_64 glibc <= 2.36 (manylinux_2_5 to manylinux_2_36): lm-eval {versions.HARNESS_VERSION} and the "
              "packages its gate run imports (tools/stage_lock.py says why each other one is left out); do not edit.")
    EVAL_TARGET.write_text(render(header, kept))
    sys.stdout.write(f"wrote {EVAL_TARGET} ({len(kept)} packages)\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stage_lock", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("stage", "eval"), help="write one lock (default: both)")
    args = parser.parse_args(argv)
    if args.only in (None, "stage") and stage_lock():
        return 1
    if args.only in (None, "eval"):
        return eval_lock()
    return 0


if __name__ == "__main__":
    sys.exit(main())
