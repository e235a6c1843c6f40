"""The deploy spec: pydantic models, loading from spec YAML or Compose, and command-line folding.

Where a spec comes from, in order of strength (strongest last):

1. a spec YAML file (``egress:``, ``mounts:``, ``credentials:`` ...) or a Compose file
   (``x-cornus-egress:`` at the project level, replaced as a whole by a service's own block);
2. command-line flags (see :mod:`cornus_core.spec.flags`): ``--egress-route`` rules are put *before*
   the file's rules so they win, ``--egress-pac`` replaces the script, ``--egress``/``--egress-default``
   replace mode and default, ``--local-mount`` adds mounts.

Every problem is a :class:`SpecError` whose ``source`` names where it is: ``file:line:column``, the
flag and its value, or the rule.
"""

from __future__ import annotations

from .checks import check_deployable, compile_spec_policy, detach_check
from .dest import DEFAULT_PORT, DestArg, parse_dest
from .errors import PolicyCompileError, SpecError, flag_source
from .flags import (
    EgressFlags,
    fold_egress_flags,
    fold_local_mounts,
    parse_default_flag,
    parse_local_mount,
    parse_mode_flag,
    parse_route_flag,
    read_pac_file,
)
from .load import LoadedSpec, ScriptOrigin, empty_spec, load_spec_file, load_spec_text
from .models import (
    DEFAULT_LISTEN_PORT,
    DEFAULT_ROUTE,
    ROUTES,
    CredentialSource,
    CredentialsSpec,
    Delivery,
    DeploySpec,
    EgressSpec,
    MountSpec,
    RuleSpec,
)

__all__ = [
    "DEFAULT_LISTEN_PORT",
    "DEFAULT_PORT",
    "DEFAULT_ROUTE",
    "ROUTES",
    "CredentialSource",
    "CredentialsSpec",
    "Delivery",
    "DeploySpec",
    "DestArg",
    "EgressFlags",
    "EgressSpec",
    "LoadedSpec",
    "MountSpec",
    "PolicyCompileError",
    "RuleSpec",
    "ScriptOrigin",
    "SpecError",
    "check_deployable",
    "compile_spec_policy",
    "detach_check",
    "empty_spec",
    "flag_source",
    "fold_egress_flags",
    "fold_local_mounts",
    "load_spec_file",
    "load_spec_text",
    "parse_default_flag",
    "parse_dest",
    "parse_local_mount",
    "parse_mode_flag",
    "parse_route_flag",
    "read_pac_file",
]
