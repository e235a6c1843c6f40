"""The loopback endpoint on 127.0.0.1, fetched by httpx, curl, and an unmodified botocore."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from credential_support import write_script
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cornus_core.credentials import (
    Credential,
    CredentialCache,
    CredentialEndpoint,
    CredentialError,
    CredentialEvent,
    SourceSet,
    credential_env_name,
    endpoint_env,
)

EXPIRY = datetime(2031, 1, 1, tzinfo=UTC)
AWS = Credential(
    {"AccessKeyId": "AKIAPOD", "SecretAccessKey": "pod-secret-key", "Token": "pod-token"}, EXPIRY
)
BOUND = 60.0


async def _serve(name: str) -> Credential:
    if name == "broken":
        raise CredentialError("credential 'broken' (exec mint): exited with status 1")
    if name == "aws":
        return AWS
    return Credential({"token": f"{name}-secret"}, EXPIRY)


@pytest.fixture
async def generic() -> AsyncIterator[CredentialEndpoint]:
    async with CredentialEndpoint("generic", ["github", "broken", "my-db.prod"], _serve) as endpoint:
        yield endpoint


@pytest.fixture
async def imds() -> AsyncIterator[CredentialEndpoint]:
    async with CredentialEndpoint("aws-imds", ["aws"], _serve, auth_token="local-ssrf-guard") as endpoint:
        yield endpoint


def _client(endpoint: CredentialEndpoint) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{endpoint.port}", trust_env=False, timeout=BOUND)


async def test_generic_serves_the_wire_shape(generic: CredentialEndpoint) -> None:
    async with _client(generic) as client:
        response = await client.get("/credentials/github")
        assert response.status_code == 200
        assert response.headers["cache-control"] == "no-store"
        assert response.json() == {"values": {"token": "github-secret"}, "expiration": "2031-01-01T00:00:00Z"}
        # keep-alive: the same connection answers again
        assert (await client.get("/credentials/my-db.prod?x=1")).json()["values"] == {
            "token": "my-db.prod-secret"
        }
        assert (await client.get("/credentials/")).json() == {"names": ["broken", "github", "my-db.prod"]}


async def test_generic_errors(generic: CredentialEndpoint) -> None:
    async with _client(generic) as client:
        missing = await client.get("/credentials/aws")
        assert missing.status_code == 404 and missing.json() == {
            "error": "credential 'aws' is not served here"
        }
        failed = await client.get("/credentials/broken")
        assert failed.status_code == 502 and "exited with status 1" in failed.json()["error"]
        assert (await client.get("/elsewhere")).status_code == 404
        wrong = await client.post("/credentials/github", content=b"x")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
        assert (await client.get("/latest/api/token")).status_code == 404  # no IMDS on a generic endpoint


async def test_malformed_http_gets_400_and_a_closed_connection(generic: CredentialEndpoint) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", generic.port)
    writer.write(b"GET /credentials/github HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    reply = await asyncio.wait_for(reader.read(), BOUND)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 400 ")


async def test_curl_reads_the_advertised_url(generic: CredentialEndpoint) -> None:
    url = generic.env()[credential_env_name("github")]
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--fail", "--noproxy", "*", url, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), BOUND)
    assert proc.returncode == 0 and json.loads(stdout)["values"] == {"token": "github-secret"}


def test_env_names() -> None:
    env = endpoint_env("generic", ["github", "my-db.prod"], 8123)
    assert env == {
        "CORNUS_CREDENTIALS_URL": "http://127.0.0.1:8123/credentials/",
        "CORNUS_CREDENTIAL_GITHUB_URL": "http://127.0.0.1:8123/credentials/github",
        "CORNUS_CREDENTIAL_MY_DB_PROD_URL": "http://127.0.0.1:8123/credentials/my-db.prod",
    }
    aws = endpoint_env("aws-imds", ["role"], 9000, auth_token="t")
    assert aws["AWS_CONTAINER_CREDENTIALS_FULL_URI"] == "http://127.0.0.1:9000/credentials/role"
    assert aws["AWS_EC2_METADATA_SERVICE_ENDPOINT"] == "http://127.0.0.1:9000/"
    assert aws["AWS_CONTAINER_AUTHORIZATION_TOKEN"] == "t"
    assert (
        endpoint_env("generic", ["a"], 1, host="::1")["CORNUS_CREDENTIAL_A_URL"]
        == "http://[::1]:1/credentials/a"
    )
    with pytest.raises(CredentialError, match=r"'db-1' and 'db\.1' both map to CORNUS_CREDENTIAL_DB_1_URL"):
        endpoint_env("generic", ["db-1", "db.1"], 1)
    with pytest.raises(CredentialError, match="exactly one credential"):
        endpoint_env("aws-imds", ["a", "b"], 1)
    with pytest.raises(CredentialError, match="provider 'gcp' is unknown"):
        CredentialEndpoint("gcp", ["a"], _serve)
    for host in ("0.0.0.0", "10.0.0.5", "::", "example.com"):
        with pytest.raises(CredentialError, match=f"host '{host}' is not a loopback address"):
            CredentialEndpoint("generic", ["a"], _serve, host=host)
    assert endpoint_env("generic", ["a"], 1, host="localhost")["CORNUS_CREDENTIAL_A_URL"].startswith(
        "http://localhost:1/"
    )


async def test_imds_v2_protocol(imds: CredentialEndpoint) -> None:
    async with _client(imds) as client:
        roles = "/latest/meta-data/iam/security-credentials/"
        assert (await client.get(roles)).status_code == 401
        assert (await client.put("/latest/api/token")).status_code == 400
        proxied = await client.put(
            "/latest/api/token",
            headers={"x-aws-ec2-metadata-token-ttl-seconds": "60", "x-forwarded-for": "1.2.3.4"},
        )
        assert proxied.status_code == 403
        token = (
            await client.put("/latest/api/token", headers={"x-aws-ec2-metadata-token-ttl-seconds": "60"})
        ).text
        auth = {"x-aws-ec2-metadata-token": token}
        assert (await client.get(roles, headers=auth)).text == "aws"
        document = (await client.get(roles + "aws", headers=auth)).json()
        assert document["AccessKeyId"] == "AKIAPOD" and document["Token"] == "pod-token"
        assert document["Expiration"] == "2031-01-01T00:00:00Z" and document["Code"] == "Success"
        assert (await client.get(roles + "other", headers=auth)).status_code == 404
        assert (await client.get("/credentials/aws")).status_code == 401  # the container URL wants its token
        container = await client.get("/credentials/aws", headers={"authorization": "local-ssrf-guard"})
        assert container.json()["SecretAccessKey"] == "pod-secret-key"


_BOTOCORE_PROBE = """
import botocore.session
credentials = botocore.session.get_session().get_credentials()
frozen = credentials.get_frozen_credentials()
print(credentials.method, frozen.access_key, frozen.secret_key, frozen.token)
"""


async def _botocore(env: dict[str, str], tmp_path: Path) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()}
    clean.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"), **env
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _BOTOCORE_PROBE,
        env=clean,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), BOUND)
    assert proc.returncode == 0, stderr.decode()
    return stdout.decode().split()


async def test_botocore_resolves_container_credentials_unmodified(
    imds: CredentialEndpoint, tmp_path: Path
) -> None:
    env = imds.env()
    container = {
        k: env[k] for k in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN")
    }
    assert await _botocore(container, tmp_path) == [
        "container-role",
        "AKIAPOD",
        "pod-secret-key",
        "pod-token",
    ]


async def test_botocore_resolves_imds_v2_credentials_unmodified(
    imds: CredentialEndpoint, tmp_path: Path
) -> None:
    metadata = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.env()["AWS_EC2_METADATA_SERVICE_ENDPOINT"]}
    assert await _botocore(metadata, tmp_path) == ["iam-role", "AKIAPOD", "pod-secret-key", "pod-token"]


async def test_aws_shape_needs_the_conventional_names(tmp_path: Path) -> None:
    async def wrong(name: str) -> Credential:
        return Credential({"token": "x"})

    async with CredentialEndpoint("aws-imds", ["r"], wrong) as endpoint, _client(endpoint) as client:
        response = await client.get("/credentials/r")
        assert (
            response.status_code == 502
            and "needs AccessKeyId and SecretAccessKey" in response.json()["error"]
        )


async def test_aws_shape_without_expiry_or_token_still_satisfies_the_sdk(tmp_path: Path) -> None:
    async def long_lived(name: str) -> Credential:
        return Credential({"AccessKeyId": "AKIALONG", "SecretAccessKey": "s"})

    async with CredentialEndpoint("aws-imds", ["r"], long_lived) as endpoint, _client(endpoint) as client:
        document = (await client.get("/credentials/r")).json()
    assert document["Token"] == ""
    expires = datetime.fromisoformat(document["Expiration"])
    assert datetime.now(UTC) < expires <= datetime.now(UTC) + timedelta(hours=1, minutes=1)


async def test_end_to_end_100_requests_one_command_run_no_secret_in_events(tmp_path: Path) -> None:
    """endpoint -> cache -> source set -> a real command, which must run once for 100 concurrent requests."""
    calls = tmp_path / "calls"
    secret = "e2e-secret-value-42"
    script = write_script(
        tmp_path,
        "mint",
        f'echo call >> {calls}\nsleep 0.3\nprintf \'{{"values": {{"token": "{secret}"}}, '
        f'"expiration": "2031-01-01T00:00:00Z"}}\'\n',
    )
    sources = SourceSet.from_config(
        [SimpleNamespace(name="api", backend="exec", config={"command": [script]})]
    )
    events: list[CredentialEvent] = []
    cache = CredentialCache(sources.fetch, {"api": 300}, on_event=events.append)
    async with CredentialEndpoint("generic", ["api"], cache.get) as endpoint, _client(endpoint) as client:
        responses = await asyncio.gather(*(client.get("/credentials/api") for _ in range(100)))
    assert {r.status_code for r in responses} == {200}
    assert {r.json()["values"]["token"] for r in responses} == {secret}
    assert calls.read_text().splitlines() == ["call"]
    assert len(events) == 100 and {e.cache for e in events} <= {"fetched", "hit"}
    assert secret not in json.dumps([e.to_dict() for e in events])


@settings(max_examples=200, deadline=None)
@example("PUT", "/latest/api/token", {"x-aws-ec2-metadata-token-ttl-seconds": "\u00b2"}, "aws-imds")
@given(
    method=st.sampled_from(["GET", "PUT", "POST", "DELETE"]),
    target=st.text(max_size=80).map(lambda t: "/" + t)
    | st.sampled_from(
        ["/credentials/", "/latest/api/token", "/latest/meta-data/iam/security-credentials/aws"]
    ),
    headers=st.dictionaries(
        st.sampled_from(
            ["x-aws-ec2-metadata-token-ttl-seconds", "x-aws-ec2-metadata-token", "authorization"]
        ),
        st.text(max_size=10),
    ),
    provider=st.sampled_from(["generic", "aws-imds"]),
)
def test_fuzz_any_request_gets_a_json_or_text_answer(
    method: str, target: str, headers: dict[str, str], provider: str
) -> None:
    endpoint = CredentialEndpoint(provider, ["aws"], _serve)
    response = asyncio.run(endpoint.handle(method, target, headers))
    assert response.status in {200, 400, 401, 403, 404, 405, 502}
    if response.content_type == "application/json":
        json.loads(response.body)
