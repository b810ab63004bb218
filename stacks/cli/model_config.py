"""`plan --model-config SOURCE`: a model's config.json and weight bytes, from a local path or the Hugging Face Hub.

SOURCE is a config.json file, a directory holding one (a downloaded snapshot), or `hub`: the files of `--model`
at `--revision` on the Hub. Beside config.json the weight bytes come from `model.safetensors.index.json`
(`metadata.total_size`), else from the `.safetensors` files' sizes. On the Hub the same two files are read through
`<endpoint>/<id>/resolve/<revision>/<file>` (huggingface_hub's URL layout, `HF_ENDPOINT` as huggingface_hub reads
it, default https://huggingface.co), a single-file checkpoint's size from the `X-Linked-Size` header the Hub sets on
the LFS redirect (or Content-Length when served directly); a gated model needs a token that can read it
(`--hf-token-file`, else `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` or the file `HF_TOKEN_PATH` names, as huggingface_hub
reads them), the same one the stack's `hfToken` holds.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from llm_serving.serving import (
    ModelArchitecture,
    ModelConfigError,
    architecture_from_config,
    parameters_from_index,
    weight_bytes_from_index,
)

HUB = "hub"
DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TIMEOUT_SECONDS = 30
# huggingface_hub's REPO_ID_REGEX (utils/_validators.py): an optional owner and a name of word characters, '-', '.'.
REPO_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b$")


def _json(text: bytes | str, name: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelConfigError(f"{name}: not JSON ({error})") from None
    if not isinstance(found, dict):
        raise ModelConfigError(f"{name}: expected a JSON object")
    return found


def from_path(model_id: str, source: Path) -> ModelArchitecture:
    """A config.json file, or a directory holding one, with the checkpoint's weight bytes beside it."""
    directory = source if source.is_dir() else source.parent
    config_file = source / CONFIG if source.is_dir() else source
    try:
        config = _json(config_file.read_bytes(), str(config_file))
    except OSError as error:
        raise ModelConfigError(f"{config_file}: {error.strerror or error}") from None
    index_file = directory / INDEX
    if index_file.is_file():
        index = _json(index_file.read_bytes(), str(index_file))
        return architecture_from_config(model_id, config, weight_bytes_from_index(index), parameters_from_index(index))
    shards = sorted(directory.glob("*.safetensors"))
    if not shards:
        raise ModelConfigError(f"{directory}: neither {INDEX} nor .safetensors files beside {CONFIG}: the planner "
                               "needs the checkpoint's weight bytes")
    return architecture_from_config(model_id, config, sum(p.stat().st_size for p in shards))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:  # the LFS redirect's headers are the answer
        return None


def _open(url: str, token: str | None, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """GET follows redirects (a renamed repository answers with one; small files may sit behind the CDN); HEAD does
    not, since the LFS redirect's own headers carry the size (huggingface_hub file_download.py does the same)."""
    # from_hub admits only http(s) endpoints, so no file: or custom scheme reaches urlopen.
    request = urllib.request.Request(url, method=method, headers={"User-Agent": "llm-serving-plan"})  # noqa: S310
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(*([_NoRedirect] if method == "HEAD" else []))
    try:
        with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status, dict(response.headers), response.read() if method == "GET" else b""
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers or {}), b""
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        raise ModelConfigError(f"{url}: {getattr(error, 'reason', None) or error!r}") from None


def from_hub(model_id: str, revision: str, token: str | None, endpoint: str | None = None) -> ModelArchitecture:
    """config.json and the weight bytes of `model_id` at `revision` from the Hub (or `endpoint`)."""
    if not REPO_ID.match(model_id) or ".." in model_id or "--" in model_id:
        raise ModelConfigError(f"--model {model_id!r}: not a Hub repository id (<owner>/<name>: letters, digits, "
                               "'-', '_', '.')")
    base = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise ModelConfigError(f"HF_ENDPOINT {base!r}: expected an http:// or https:// URL")
    quoted = urllib.parse.quote(revision, safe="")

    def url(name: str) -> str:
        return f"{base}/{model_id}/resolve/{quoted}/{name}"

    status, _, body = _open(url(CONFIG), token)
    if status in (401, 403):
        raise ModelConfigError(f"{url(CONFIG)}: HTTP {status}: a gated or private model needs a token that can read "
                               "it (HF_TOKEN, or --hf-token-file)")
    if status != 200:
        raise ModelConfigError(f"{url(CONFIG)}: HTTP {status} (is {model_id!r} at revision {revision!r} on the Hub?)")
    config = _json(body, url(CONFIG))
    status, _, body = _open(url(INDEX), token)
    if status == 200:
        index = _json(body, url(INDEX))
        return architecture_from_config(model_id, config, weight_bytes_from_index(index), parameters_from_index(index))
    status, headers, _ = _open(url(SINGLE), token, method="HEAD")
    lower = {k.lower(): v for k, v in headers.items()}
    # An LFS file answers with a redirect carrying X-Linked-Size; a file served directly, with its Content-Length.
    size = (lower.get("x-linked-size") or (lower.get("content-length") if status == 200 else None)
            if status in (200, 302, 307) else None)
    if size is None or not size.isdigit():
        raise ModelConfigError(f"{url(INDEX)} and {url(SINGLE)}: neither gives the checkpoint's weight bytes "
                               f"(HTTP {status}); plan from a local snapshot instead")
    return architecture_from_config(model_id, config, int(size))


def read_token(token_file: str | None) -> str | None:
    if token_file is not None:
        try:
            return Path(token_file).read_text().strip() or None
        except OSError as error:
            raise ModelConfigError(f"--hf-token-file {token_file}: {error.strerror or error}") from None
    # huggingface_hub's order (utils/_auth.py): HF_TOKEN, then the older HUGGING_FACE_HUB_TOKEN, then HF_TOKEN_PATH.
    found = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not found and os.environ.get("HF_TOKEN_PATH"):
        return read_token(os.environ["HF_TOKEN_PATH"])
    return found or None


def load(model_id: str, source: str, revision: str, token_file: str | None) -> ModelArchitecture:
    if source == HUB:
        return from_hub(model_id, revision, read_token(token_file))
    return from_path(model_id, Path(source))
