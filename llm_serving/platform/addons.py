"""EKS managed add-ons: the version pinned for the cluster's Kubernetes minor and the conflict modes
every add-on of this program is created with (pure). Pins and the reasons live in versions.py.
"""

from __future__ import annotations

from typing import TypedDict

from . import versions


class AddonSettings(TypedDict):
    """Keyword arguments of `aws.eks.Addon`, named as its parameters so a type checker matches them."""

    addon_name: str
    addon_version: str
    resolve_conflicts_on_create: str
    resolve_conflicts_on_update: str


def addon_version(addon: str, kubernetes_minor: str) -> str:
    """The pinned build of `addon` for the cluster's minor; a minor without a pin stops the program
    (stacks' checks report it at preview) rather than falling back to EKS's moving default."""
    pins = versions.EKS_ADDON_VERSIONS.get(addon)
    if pins is None:
        raise ValueError(f"no version is pinned for the EKS add-on {addon}; add it to llm_serving/platform/versions.py")
    if kubernetes_minor not in pins:
        raise ValueError(
            f"no {addon} add-on version is pinned for Kubernetes {kubernetes_minor} (pinned: "
            f"{', '.join(sorted(pins))}); add the build EKS lists for it to llm_serving/platform/versions.py"
        )
    return pins[kubernetes_minor]


def addon_settings(addon: str, kubernetes_minor: str) -> AddonSettings:
    """The `aws.eks.Addon` arguments every add-on shares: name, pinned version, conflict modes."""
    return {
        "addon_name": addon,
        "addon_version": addon_version(addon, kubernetes_minor),
        "resolve_conflicts_on_create": versions.EKS_ADDON_RESOLVE_CONFLICTS_ON_CREATE,
        "resolve_conflicts_on_update": versions.EKS_ADDON_RESOLVE_CONFLICTS_ON_UPDATE,
    }
