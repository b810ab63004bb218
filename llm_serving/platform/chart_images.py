"""Chart images by digest (pure): the Helm values that pin each image a chart runs, from a stack's digests.

versions.py lists, beside each chart pin, the images the chart runs at that version and the values key each
digest goes into (`ChartImage`); a stack's `chartImageDigests` maps an image's `repository:tag` to its digest.
A chart at another version than its pin runs images nobody listed, so it gets nothing here and runs its own
tags (prod and staging previews then refuse it: the policy pack's images-digest-pinned).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, assert_never

from .versions import ChartImage, ChartPin, DigestForm


def runs(pin: ChartPin, version: str) -> tuple[ChartImage, ...]:
    """The images `pin`'s chart runs at `version`, as versions.py lists them; none known at another version."""
    return pin.images if version == pin.version else ()


def pinned_value(image: ChartImage, digest: str) -> str:
    """What `image.key` holds to pull `image` by `digest` (`sha256:<hex>`), in the form its template takes."""
    match image.form:
        case DigestForm.TAG:
            return f"{image.tag}@{digest}"
        case DigestForm.SHA:
            return digest.removeprefix("sha256:")
        case DigestForm.DIGEST:
            return digest
        case DigestForm.IMAGE:
            return f"{image.reference}@{digest}"
        case _:
            assert_never(image.form)


def pinned_reference(image: ChartImage, digest: str) -> str:
    """The reference a pod of the chart pulls once `image` is pinned: `repository:tag@sha256:<hex>`."""
    return f"{image.reference}@{digest}"


def image_values(images: Iterable[ChartImage], digests: Mapping[str, str]) -> dict[str, Any]:
    """Helm values that pin each of `images` whose reference has a digest in `digests`; the others are left out,
    so their chart keeps its own tag."""
    values: dict[str, Any] = {}
    for image in images:
        digest = digests.get(image.reference)
        if digest is None:
            continue
        *parents, leaf = image.key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = pinned_value(image, digest)
    return values


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it mapping by mapping, as Helm merges values (a scalar of `extra` wins)."""
    out = dict(base)
    for key, value in extra.items():
        below = out.get(key)
        out[key] = merged(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping) else value
    return out
