from __future__ import annotations

import pytest

from server.auth import Authenticator, AuthError, Scope, new_secret


@pytest.fixture
def auth() -> Authenticator:
    return Authenticator("caller-secret", new_secret())


def test_caller_token_only_on_caller_endpoint(auth: Authenticator) -> None:
    assert auth.authorize("Bearer caller-secret", Scope.CALLER).scope is Scope.CALLER
    with pytest.raises(AuthError) as err:
        auth.authorize("Bearer caller-secret", Scope.CARETAKER)
    assert err.value.status == 403


def test_caretaker_token_scoped_to_its_deployment(auth: Authenticator) -> None:
    token = auth.mint_caretaker_token("dep-a")
    principal = auth.authorize(f"Bearer {token}", Scope.CARETAKER)
    assert principal.deployment == "dep-a"
    with pytest.raises(AuthError) as err:
        auth.authorize(f"Bearer {token}", Scope.CALLER)
    assert err.value.status == 403


def test_forged_or_retargeted_caretaker_token_rejected(auth: Authenticator) -> None:
    token = auth.mint_caretaker_token("dep-a")
    prefix, _dep, nonce, mac = token.split(".")
    with pytest.raises(AuthError) as err:
        auth.identify(f"{prefix}.dep-b.{nonce}.{mac}")
    assert err.value.status == 401
    other = Authenticator("caller-secret", new_secret())
    with pytest.raises(AuthError):
        other.identify(token)


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer ", "Bearer wrong", "Bearer ct1.x.y"])
def test_bad_headers_are_401(auth: Authenticator, header: str | None) -> None:
    with pytest.raises(AuthError) as err:
        auth.authorize(header, Scope.CALLER)
    assert err.value.status == 401
