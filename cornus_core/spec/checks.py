"""Checks that need more than one field: does the policy compile, may the spec run detached, can it run."""

from __future__ import annotations

import os

from cornus_core.policy import Policy, PolicyError, compile_policy

from .errors import PolicyCompileError, SpecError
from .load import LoadedSpec
from .models import DeploySpec, EgressSpec


def compile_spec_policy(loaded: LoadedSpec, *, now_ms: int | None = None) -> Policy:
    """The spec's egress policy, compiled; no egress block compiles to "everything to cluster".

    A compile error (in practice a PAC script that does not parse or lacks ``FindProxyForURL``)
    names where the script came from.
    """
    try:
        return compile_policy(loaded.spec.egress or EgressSpec(), now_ms=now_ms)
    except PolicyError as exc:
        origin = loaded.script_origin
        if exc.source != "script" or origin is None:
            raise PolicyCompileError(loaded.origin, f"the egress policy does not compile: {exc}") from None
        at = origin.locate(exc.line, exc.column)
        if at is not None:
            raise PolicyCompileError(at, f"{origin.label} does not compile: {exc.message}") from None
        raise PolicyCompileError(
            origin.where, f"{origin.label} does not compile: {_script_position(exc)}{exc.message}"
        ) from None


def _script_position(exc: PolicyError) -> str:
    if exc.line is None:
        return ""
    return f"script line {exc.line}" + (f", column {exc.column}" if exc.column is not None else "") + ": "


def detach_check(spec: DeploySpec) -> str | None:
    """Why this spec cannot run detached (no caller session behind it), or None when it can.

    Detached, nobody is there to take ``client`` traffic, mint credentials or serve local mounts.
    """
    reasons: list[str] = []
    if spec.egress is not None:
        try:
            could = compile_policy(spec.egress).could_route_to_client()
        except PolicyError as exc:
            raise PolicyCompileError("egress", f"the egress policy does not compile: {exc}") from None
        if could:
            reasons.append(
                "its egress policy could route to 'client' (route only to gateway, cluster or deny)"
            )
    if spec.credentials.sources:
        names = ", ".join(source.name for source in spec.credentials.sources)
        reasons.append(f"it uses caller-minted credentials ({names})")
    if spec.local_mounts:
        targets = ", ".join(mount.target for mount in spec.local_mounts)
        reasons.append(f"it mounts directories of this machine ({targets})")
    if not reasons:
        return None
    return "a detached deployment has no session behind it, but " + "; and ".join(reasons)


def check_deployable(loaded: LoadedSpec, *, detach: bool = False, now_ms: int | None = None) -> Policy:
    """Everything a live session needs from the spec, checked up front; returns the compiled policy."""
    spec = loaded.spec
    if spec.image is None and spec.command is None:
        raise SpecError(loaded.origin, "nothing to run: the spec has neither 'image' nor 'command'")
    for mount, origin in zip(spec.mounts, loaded.mount_origins, strict=False):
        if mount.is_local and not os.path.exists(mount.source):
            raise SpecError(origin, f"local mount source {mount.source!r} does not exist")
    policy = compile_spec_policy(loaded, now_ms=now_ms)
    if detach or spec.detach:
        reason = detach_check(spec)
        if reason is not None:
            raise SpecError("--detach" if detach else loaded.origin, reason)
    return policy
