"""One name per pod, used for its network namespace, its host-side veth, its mount namespace file and
its host nft table: ``<prefix><instance>-<number>``.

The instance id is per server run, so a later run can tell its own pods from a crashed run's
leftovers. Interface names cap the whole name at 15 characters.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

DEFAULT_PREFIX = "cn"
IFNAMSIZ = 15  # longest interface name the kernel accepts
INSTANCE_LEN = 6

_PREFIX = re.compile(r"[a-z][a-z0-9]{0,3}")
_INSTANCE = re.compile(rf"[0-9a-f]{{{INSTANCE_LEN}}}")


class NamingError(ValueError):
    """A prefix, instance id or pod name that does not fit the naming scheme."""


def new_instance() -> str:
    return secrets.token_hex(INSTANCE_LEN // 2)


def check_prefix(prefix: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise NamingError(
            f"pod name prefix {prefix!r} must be 1-4 lowercase letters or digits, starting with a letter"
        )
    return prefix


def check_instance(instance: str) -> str:
    if not _INSTANCE.fullmatch(instance):
        raise NamingError(f"instance id {instance!r} must be {INSTANCE_LEN} lowercase hex digits")
    return instance


@dataclass(frozen=True)
class PodName:
    prefix: str
    instance: str
    number: int

    def __str__(self) -> str:
        return f"{self.prefix}{self.instance}-{self.number}"

    @property
    def owner(self) -> str:
        """The server run that made this pod: ``<prefix><instance>``."""
        return f"{self.prefix}{self.instance}"

    @property
    def nft_table(self) -> str:
        return str(self).replace("-", "_")


def pod_name(prefix: str, instance: str, number: int) -> PodName:
    name = PodName(check_prefix(prefix), check_instance(instance), number)
    if number < 0 or len(str(name)) > IFNAMSIZ:
        raise NamingError(f"pod number {number} makes the name {name} longer than {IFNAMSIZ} characters")
    return name


def parse_pod_name(text: str, prefix: str) -> PodName | None:
    """The pod name in ``text`` (a netns, link, file or nft table name) when it carries ``prefix``."""
    match = re.fullmatch(rf"({re.escape(prefix)})([0-9a-f]{{{INSTANCE_LEN}}})[-_]([0-9]+)", text)
    if match is None:
        return None
    return PodName(match[1], match[2], int(match[3]))
