"""Field rules of the spec models."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cornus_core.spec import (
    ROUTES,
    CredentialsSpec,
    Delivery,
    DeploySpec,
    EgressSpec,
    MountSpec,
    RuleSpec,
)


def test_routes_are_the_policy_routes() -> None:
    assert set(ROUTES) == {"client", "gateway", "cluster", "deny"}


def test_egress_defaults() -> None:
    egress = EgressSpec()
    assert (egress.mode, egress.default, egress.rules, egress.script) == ("env", "cluster", [], None)
    assert egress.listen_port == 15002
    # Empty values mean "the default", as in the original.
    assert EgressSpec.model_validate({"mode": "", "default": None, "script": "  \n"}) == EgressSpec()


def test_route_names_are_case_insensitive_and_canonical() -> None:
    assert RuleSpec(pattern="*.corp.example", route="CLIENT").route == "client"
    assert EgressSpec(default="Deny").default == "deny"


@pytest.mark.parametrize("route", ["clinet", "", "proxy", "DIRECT"])
def test_unknown_route_is_rejected(route: str) -> None:
    with pytest.raises(ValidationError, match="route"):
        RuleSpec(pattern="a.example", route=route)


@pytest.mark.parametrize(
    "pattern", ["", "a.example:0", "a.example:65536", "10.0.0.0/33", "[::1", "a[b.example"]
)
def test_bad_pattern_is_rejected_and_named(pattern: str) -> None:
    with pytest.raises(ValidationError) as info:
        RuleSpec(pattern=pattern, route="client")
    assert f"bad pattern {pattern!r}: " in str(info.value)


@pytest.mark.parametrize(
    "pattern", ["*.corp.example", "api.example:443", "10.0.0.0/8", "[2001:db8::/32]:443", ":443"]
)
def test_good_patterns(pattern: str) -> None:
    assert RuleSpec(pattern=pattern, route="deny").pattern == pattern


def test_gateway_url_is_rejected() -> None:
    with pytest.raises(ValidationError, match="the server itself is the gateway"):
        EgressSpec(gateway="https://egress.example")
    assert EgressSpec(gateway="").gateway is None


def test_proxies_are_the_four_variables_in_either_spelling() -> None:
    egress = EgressSpec.model_validate({"proxies": {"https_proxy": "http://p:3128", "NO_PROXY": "localhost"}})
    assert egress.proxies == {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "localhost"}
    with pytest.raises(ValidationError, match="FTP_PROXY"):
        EgressSpec.model_validate({"proxies": {"FTP_PROXY": "x"}})
    with pytest.raises(ValidationError, match="set twice"):
        EgressSpec.model_validate({"proxies": {"http_proxy": "a", "HTTP_PROXY": "b"}})


@pytest.mark.parametrize("port", [0, 65536, -1, "15002", True])
def test_listen_port_bounds(port: object) -> None:
    with pytest.raises(ValidationError):
        EgressSpec.model_validate({"listen_port": port})


def test_unknown_keys_are_errors_everywhere() -> None:
    for model, data in [
        (DeploySpec, {"nmae": "x"}),
        (EgressSpec, {"rule": []}),
        (RuleSpec, {"pattern": "a", "route": "client", "port": 1}),
        (MountSpec, {"source": "/a", "target": "/b", "ro": True}),
        (CredentialsSpec, {"source": []}),
        (Delivery, {"kind": "env", "names": {}}),
    ]:
        with pytest.raises(ValidationError, match="Extra inputs"):
            model.model_validate(data)


def test_command_string_runs_under_sh() -> None:
    assert DeploySpec(command="echo hi && sleep 1").command == ["sh", "-c", "echo hi && sleep 1"]  # type: ignore[arg-type]
    assert DeploySpec(command=["python", "-m", "x"]).command == ["python", "-m", "x"]
    with pytest.raises(ValidationError, match="command is empty"):
        DeploySpec(command=[])


def test_env_values_from_yaml_scalars_become_strings() -> None:
    spec = DeploySpec.model_validate({"env": {"PORT": 8080, "DEBUG": True, "RATIO": 0.5, "NAME": "x"}})
    assert spec.env == {"PORT": "8080", "DEBUG": "true", "RATIO": "0.5", "NAME": "x"}
    with pytest.raises(ValidationError, match="not a valid environment variable name"):
        DeploySpec.model_validate({"env": {"1BAD": "x"}})


def test_mount_source_kinds() -> None:
    assert MountSpec(source="/srv/data", target="/data").is_local
    assert MountSpec(source="./data", target="/data").is_local
    assert MountSpec(source="~/data", target="/data").is_local
    assert not MountSpec(source="cache", target="/cache").is_local
    with pytest.raises(ValidationError, match="absolute"):
        MountSpec(source="/a", target="relative")
    with pytest.raises(ValidationError, match="root"):
        MountSpec(source="/a", target="/")
    with pytest.raises(ValidationError, match="neither a path nor a volume name"):
        MountSpec(source="-x", target="/x")


def test_mount_targets_are_unique() -> None:
    with pytest.raises(ValidationError, match="share the target"):
        DeploySpec.model_validate(
            {"mounts": [{"source": "/a", "target": "/x"}, {"source": "/b", "target": "/x/"}]}
        )


def test_local_mounts_lists_only_caller_paths() -> None:
    spec = DeploySpec.model_validate(
        {"mounts": [{"source": "/a", "target": "/a"}, {"source": "vol", "target": "/v"}]}
    )
    assert [m.target for m in spec.local_mounts] == ["/a"]


def test_credentials() -> None:
    spec = DeploySpec.model_validate(
        {
            "credentials": {
                "sources": [
                    {
                        "name": "aws",
                        "backend": "exec",
                        "config": {"command": ["aws-mint"]},
                        "deliver": [
                            {"kind": "endpoint", "provider": "aws-imds"},
                            {
                                "kind": "file",
                                "format": "aws-credentials",
                                "path": "/home/app/.aws/credentials",
                            },
                            {"kind": "env", "prefix": "AWS_"},
                        ],
                    },
                    {"name": "npm-token", "backend": "env", "config": {"vars": {"token": "NPM_TOKEN"}}},
                ]
            }
        }
    )
    aws, npm = spec.credentials.sources
    assert aws.ttl == 300
    assert [d.kind for d in aws.deliver] == ["endpoint", "file", "env"]
    assert aws.deliver[0].effective_provider == "aws-imds"
    assert aws.deliver[1].effective_format == "aws-credentials"
    assert npm.deliver == []


@pytest.mark.parametrize(
    ("delivery", "message"),
    [
        ({"kind": "file"}, "needs 'path'"),
        ({"kind": "file", "path": "relative"}, "absolute"),
        ({"kind": "env", "format": "json"}, "'format' does not apply"),
        ({"kind": "endpoint", "path": "/x"}, "'path' does not apply"),
        ({"kind": "endpoint", "provider": "gcp"}, "generic"),
        ({"kind": "file", "path": "/x", "format": "yaml"}, "aws-credentials"),
        ({"kind": "env", "prefix": "1X"}, "prefix"),
        ({"kind": "socket"}, "endpoint"),
    ],
)
def test_bad_delivery(delivery: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Delivery.model_validate(delivery)


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ([{"name": "a", "backend": "vault"}], "static"),
        ([{"name": "a", "backend": "env", "ttl": 0}], "greater than or equal to 1"),
        ([{"name": "9a", "backend": "env"}], "must start with a letter"),
        ([{"name": "a-b", "backend": "env"}, {"name": "A_B", "backend": "env"}], "used twice"),
    ],
)
def test_bad_credential_sources(sources: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CredentialsSpec.model_validate({"sources": sources})


def test_models_are_frozen() -> None:
    egress = EgressSpec()
    with pytest.raises(ValidationError):
        egress.mode = "proxy"  # type: ignore[misc]


def test_specs_survive_a_json_round_trip() -> None:
    """The caller sends the spec to the server as JSON, and the server re-validates it."""
    spec = DeploySpec.model_validate(
        {
            "name": "web",
            "image": "nginx",
            "command": "nginx -g 'daemon off;'",
            "env": {"PORT": 8080},
            "workdir": "/srv",
            "mounts": [{"source": "/home/me/site", "target": "/site", "read_only": True}],
            "egress": {
                "mode": "proxy",
                "default": "gateway",
                "rules": [{"pattern": "*.corp.example", "route": "client"}],
                "script": "function FindProxyForURL(u, h) { return 'DIRECT'; }",
                "proxies": {"https_proxy": "http://proxy:3128"},
                "listen_port": 15003,
            },
            "credentials": {
                "sources": [{"name": "aws", "backend": "exec", "deliver": [{"kind": "endpoint"}]}]
            },
            "detach": False,
        }
    )
    again = DeploySpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert DeploySpec.model_validate(spec.model_dump(mode="json")) == spec
