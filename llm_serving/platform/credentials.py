"""Revisions of credentials for pod-template annotations (pure, no Pulumi import).

A pod template names a Secret, not its content, so a rotated key would leave running pods on the old
one. The template carries this digest instead: a change rolls the pods, and the value is never shown.
"""

from __future__ import annotations

import hashlib
import hmac

# HMAC-SHA256 keyed by the credential over a fixed context, truncated to 64 bits (enough to tell
# revisions apart). Like any digest it lets a reader of the pod template test guesses offline, so it
# is only as strong as the credential: the config refuses API keys under 16 characters, and HF tokens
# are long random strings. Being keyed, it matches no plain SHA-256 of the value published elsewhere.
# The program keeps it a Pulumi secret, so state, previews and renders show `[secret]`; only readers
# of the pod template in the cluster see the digest.
_CONTEXT = b"llm-serving/pod-template/credential-revision/v1"
DIGEST_HEX_CHARS = 16


def credential_revision(value: str) -> str:
    """The annotation value for one credential: changes whenever the credential does."""
    if not value:
        raise ValueError("a credential revision needs a non-empty credential")
    return hmac.new(value.encode(), _CONTEXT, hashlib.sha256).hexdigest()[:DIGEST_HEX_CHARS]


_UPSTREAM_CONTEXT = b"llm-serving/edge/vllm-upstream-key/v1"


def derived_upstream_key(client_key: str) -> str:
    """vLLM's own key when the gateway checks the clients' key: derived from it (so it rotates with
    it), but not it, and the client key cannot be recovered from it (HMAC-SHA256, 64 hex chars)."""
    if not client_key:
        raise ValueError("an upstream key needs a non-empty client key")
    return hmac.new(client_key.encode(), _UPSTREAM_CONTEXT, hashlib.sha256).hexdigest()
