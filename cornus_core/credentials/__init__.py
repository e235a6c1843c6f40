"""Credential brokering: sources on the caller, the cache, delivery formats and the pod-loopback endpoint.

The caller mints a credential at fetch time from a declared source (SourceSet); the caretaker caches
it (CredentialCache) and hands it to the workload as a file (FileRefresher) or over loopback HTTP
(CredentialEndpoint). Every failure is a CredentialError whose message names the source and the cause.
"""

from __future__ import annotations

from cornus_core.credentials.cache import (
    DEFAULT_TTL,
    EXPIRY_MARGIN,
    CredentialCache,
    CredentialEvent,
    fresh_until,
)
from cornus_core.credentials.credential import (
    Credential,
    CredentialError,
    Fetcher,
    UnknownCredentialError,
    error_json,
    format_rfc3339,
    parse_rfc3339,
)
from cornus_core.credentials.endpoint import (
    PROVIDERS,
    CredentialEndpoint,
    credential_env_name,
    endpoint_env,
)
from cornus_core.credentials.formats import (
    FORMATS,
    AwsKeys,
    FileRefresher,
    aws_keys,
    render,
    write_atomic,
)
from cornus_core.credentials.parsers import parse_dotenv, parse_exec_output, parse_json_document
from cornus_core.credentials.sources import (
    BACKENDS,
    EnvSource,
    ExecSource,
    FileSource,
    Source,
    SourceDecl,
    SourceSet,
    StaticSource,
    make_source,
    read_document,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_TTL",
    "EXPIRY_MARGIN",
    "FORMATS",
    "PROVIDERS",
    "AwsKeys",
    "Credential",
    "CredentialCache",
    "CredentialEndpoint",
    "CredentialError",
    "CredentialEvent",
    "EnvSource",
    "ExecSource",
    "Fetcher",
    "FileRefresher",
    "FileSource",
    "Source",
    "SourceDecl",
    "SourceSet",
    "StaticSource",
    "UnknownCredentialError",
    "aws_keys",
    "credential_env_name",
    "endpoint_env",
    "error_json",
    "format_rfc3339",
    "fresh_until",
    "make_source",
    "parse_dotenv",
    "parse_exec_output",
    "parse_json_document",
    "parse_rfc3339",
    "read_document",
    "render",
    "write_atomic",
]
