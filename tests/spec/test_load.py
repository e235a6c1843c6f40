"""Loading spec YAML and Compose files; every error names file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_core.spec import SpecError, load_spec_file, load_spec_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _error(text: str, **kwargs: object) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, name="app.yaml", **kwargs)  # type: ignore[arg-type]
    return info.value


def test_full_spec_loads(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(
        "name: web\n"
        "image: nginx:1.27\n"
        "command: nginx -g 'daemon off;'\n"
        "env: {PORT: 8080}\n"
        "workdir: /srv\n"
        "mounts:\n"
        "  - {source: ./site, target: /usr/share/nginx/html, read_only: true}\n"
        "  - {source: cache, target: /var/cache/nginx}\n"
        "egress:\n"
        "  mode: proxy\n"
        "  rules:\n"
        "    - {pattern: '*.corp.example', route: client}\n"
        "  script: |\n"
        "    function FindProxyForURL(url, host) { return 'DIRECT'; }\n"
        "detach: false\n"
    )
    loaded = load_spec_file(path)
    spec = loaded.spec
    assert spec.name == "web"
    assert spec.command == ["sh", "-c", "nginx -g 'daemon off;'"]
    assert spec.env == {"PORT": "8080"}
    # A relative local source is taken next to the spec file; a volume name stays a name.
    assert spec.mounts[0].source == str(tmp_path / "site")
    assert spec.mounts[0].read_only
    assert spec.mounts[1].source == "cache"
    assert spec.egress is not None and spec.egress.mode == "proxy"
    assert loaded.origin == str(path)
    assert loaded.script_origin is not None
    assert loaded.script_origin.where == f"{path}:13:11"
    assert loaded.script_origin.locate(1, 5) == f"{path}:14:9"  # script line 1 is the block's first line
    assert loaded.mount_origins == (f"{path}:7:5", f"{path}:8:5")


def test_wrong_route_names_the_yaml_line() -> None:
    error = _error(
        "egress:\n  rules:\n    - pattern: a.example\n      route: client\n    - pattern: b.example\n      route: clinet\n"
    )
    assert error.source == "app.yaml:6:14"
    assert error.message.startswith("egress.rules[1].route: unknown route 'clinet'")


def test_bad_pattern_names_the_rule_index_and_pattern() -> None:
    error = _error("egress:\n  rules:\n    - {pattern: 'a.example:99999', route: deny}\n")
    assert error.source == "app.yaml:3:17"
    assert "egress.rules[0].pattern" in error.message
    assert "'a.example:99999'" in error.message


def test_unknown_key_points_at_the_key_and_lists_the_allowed_ones() -> None:
    error = _error("image: x\negress:\n  mode: proxy\n  rule: []\n")
    assert error.source == "app.yaml:4:3"
    assert "unknown key 'rule'" in error.message
    assert "rules" in error.message and "listen_port" in error.message


def test_wrong_type_names_the_value() -> None:
    error = _error("egress:\n  listen_port: many\n")
    assert error.source == "app.yaml:2:16"
    assert "egress.listen_port" in error.message and "'many'" in error.message


def test_missing_required_key_points_at_its_mapping() -> None:
    error = _error("credentials:\n  sources:\n    - backend: env\n")
    assert error.source == "app.yaml:3:7"
    assert "credentials.sources[0].name: required key is missing" in error.message


def test_all_problems_are_reported() -> None:
    error = _error("egress:\n  mode: sideways\n  default: nowhere\n")
    assert [source for source, _ in error.problems] == ["app.yaml:2:9", "app.yaml:3:12"]
    assert str(error).count("\n") == 1


def test_gateway_url_error_names_its_line() -> None:
    error = _error("egress:\n  mode: proxy\n  gateway: https://gw.example\n")
    assert error.source == "app.yaml:3:12"
    assert "the server itself is the gateway" in error.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "must be a mapping"),
        ("just text\n", "must be a mapping"),
        ("a: [1, 2\n", "not valid YAML"),
        ("a: 1\na: 2\n", "duplicate key"),
    ],
)
def test_not_a_spec(text: str, message: str) -> None:
    assert message in _error(text).message


def test_empty_file_is_an_empty_spec() -> None:
    loaded = load_spec_text("", name="empty.yaml")
    assert loaded.spec.egress is None and loaded.spec.mounts == []


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_file(tmp_path / "missing.yaml")
    assert info.value.source == str(tmp_path / "missing.yaml")
    assert "No such file" in info.value.message
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: \xff\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec_file(binary)


def test_service_flag_needs_a_compose_file() -> None:
    error = _error("image: x\n", service="web")
    assert error.source == "--service web"


# ---- Compose ------------------------------------------------------------------------------------

COMPOSE = """\
x-cornus-egress:
  mode: proxy
  rules:
    - pattern: "*.corp.example"
      route: client
services:
  api:
    image: api:v1
    command: ./serve --port 8080
    environment:
      - LOG_LEVEL=info
      - FROM_CALLER
      - NOT_SET_ANYWHERE
  worker:
    image: worker:v1
    working_dir: /app
    volumes:
      - ./src:/app/src:ro
      - cache:/cache
      - /anonymous
      - {type: bind, source: ../shared, target: /shared}
    x-cornus-egress:
      mode: transparent
      default: deny
"""


def test_compose_service_inherits_the_project_block() -> None:
    loaded = load_spec_text(COMPOSE, name="compose.yaml", service="api", environ={"FROM_CALLER": "yes"})
    spec = loaded.spec
    assert loaded.service == "api" and spec.name == "api"
    assert spec.image == "api:v1"
    assert spec.command == ["./serve", "--port", "8080"]  # Compose splits words; no shell
    assert spec.env == {"LOG_LEVEL": "info", "FROM_CALLER": "yes"}
    assert spec.egress is not None
    assert spec.egress.mode == "proxy"
    assert [(r.pattern, r.route) for r in spec.egress.rules] == [("*.corp.example", "client")]


def test_compose_service_block_replaces_the_project_block_entirely() -> None:
    loaded = load_spec_text(COMPOSE, name="compose.yaml", base_dir="/proj", service="worker")
    egress = loaded.spec.egress
    assert egress is not None
    assert (egress.mode, egress.default, egress.rules) == ("transparent", "deny", [])
    assert loaded.spec.workdir == "/app"
    mounts = [(m.source, m.target, m.read_only) for m in loaded.spec.mounts]
    assert mounts == [
        ("/proj/src", "/app/src", True),
        ("cache", "/cache", False),
        ("/shared", "/shared", False),
    ]
    assert loaded.mount_origins[0] == "compose.yaml:18:9"


def test_compose_needs_a_service_choice_when_there_are_several() -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(COMPOSE, name="compose.yaml")
    assert info.value.source == "compose.yaml:6:1"
    assert "--service" in info.value.message and "api, worker" in info.value.message
    with pytest.raises(SpecError) as info:
        load_spec_text(COMPOSE, name="compose.yaml", service="db")
    assert info.value.source == "--service db"
    assert "api, worker" in info.value.message


def test_compose_single_service_is_chosen_automatically() -> None:
    loaded = load_spec_text("services:\n  only:\n    image: x\n", name="c.yaml")
    assert loaded.service == "only" and loaded.spec.image == "x" and loaded.spec.egress is None


def test_compose_without_cornus_keys_is_fine() -> None:
    text = "services:\n  web:\n    image: nginx\n    ports: ['8080:80']\n    depends_on: [db]\n  db:\n    image: pg\n"
    loaded = load_spec_text(text, name="c.yaml", service="web")
    assert loaded.spec.egress is None and loaded.spec.image == "nginx"


def test_compose_error_names_the_compose_path() -> None:
    text = "services:\n  web:\n    image: x\n    x-cornus-egress:\n      rules:\n        - {pattern: a, route: nope}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, name="c.yaml")
    assert info.value.source == "c.yaml:6:31"
    assert info.value.message.startswith("services.web.x-cornus-egress.rules[0].route: unknown route 'nope'")


def test_compose_validates_a_replaced_project_block_too() -> None:
    text = "x-cornus-egress: {mode: bogus}\nservices:\n  web:\n    image: x\n    x-cornus-egress: {mode: proxy}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, name="c.yaml")
    assert info.value.source == "c.yaml:1:25"
    assert info.value.message.startswith("x-cornus-egress.mode")


def test_compose_unknown_cornus_extension_is_an_error() -> None:
    text = "x-cornus-egres: {mode: proxy}\nservices:\n  web: {image: x}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, name="c.yaml")
    assert info.value.source == "c.yaml:1:1"
    assert "x-cornus-egress" in info.value.message
    # Other tools' extensions are none of our business.
    load_spec_text("x-other: {a: 1}\nservices:\n  web: {image: x}\n", name="c.yaml")


def test_compose_service_field_errors_name_compose_keys() -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text("services:\n  web:\n    image: x\n    working_dir: relative\n", name="c.yaml")
    assert info.value.source == "c.yaml:4:18"
    assert info.value.message.startswith("services.web.working_dir: workdir must be an absolute path")
    with pytest.raises(SpecError, match="tmpfs"):
        load_spec_text("services:\n  web:\n    volumes: [{type: tmpfs, target: /t}]\n", name="c.yaml")
    with pytest.raises(SpecError, match="unknown option"):
        load_spec_text("services:\n  web:\n    volumes: ['./a:/a:rox']\n", name="c.yaml")


def test_compose_with_empty_services_uses_the_project_block() -> None:
    loaded = load_spec_text("x-cornus-egress: {default: deny}\nservices: {}\n", name="c.yaml")
    assert loaded.spec.egress is not None and loaded.spec.egress.default == "deny"
    assert loaded.service is None


def test_examples_load() -> None:
    spec = load_spec_file(EXAMPLES / "policy.yaml").spec
    assert spec.egress is not None
    assert {rule.route for rule in spec.egress.rules} == {"client", "gateway", "cluster", "deny"}
    for service in ("api", "worker"):
        loaded = load_spec_file(EXAMPLES / "compose.yaml", service=service)
        assert loaded.spec.egress is not None


def test_example_compose_uses_only_standard_and_extension_keys() -> None:
    """The file stays valid Compose: everything Cornus reads is under an x- key."""
    import yaml

    data = yaml.safe_load((EXAMPLES / "compose.yaml").read_text())
    standard_top = {"name", "services", "networks", "volumes", "configs", "secrets", "include", "version"}
    assert {k for k in data if not k.startswith("x-")} <= standard_top
    standard_service = {"image", "command", "environment", "working_dir", "volumes", "ports", "depends_on"}
    for body in data["services"].values():
        assert {k for k in body if not k.startswith("x-")} <= standard_service
