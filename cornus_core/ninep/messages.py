"""Every 9P2000.L message as a small frozen dataclass.

Each class carries its type number (``TYPE``) and its wire layout after the tag (``WIRE``), one letter
per field in declaration order: ``B H I Q`` unsigned integers of 1/2/4/8 bytes, ``s`` a string
(u16 length + UTF-8), ``q`` a 13-byte qid, ``S`` a u16-counted list of strings, ``W`` a u16-counted
list of qids, ``d`` data (u32 count + bytes). The codec compiles these layouts once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from .constants import MessageType as T

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Qid:
    """A file's server-side identity: type (QidType bits), version, and a unique path number."""

    type: int
    version: int
    path: int


@dataclass(frozen=True, slots=True)
class Message:
    """Base of every message; ``tag`` pairs a reply with its request."""

    TYPE: ClassVar[int] = -1
    WIRE: ClassVar[str] = ""
    tag: int


MESSAGES: dict[int, type[Message]] = {}
_M = TypeVar("_M", bound=type[Message])


def _message(type_: int, wire: str) -> Callable[[_M], _M]:
    def register(cls: _M) -> _M:
        cls.TYPE = type_
        cls.WIRE = wire
        MESSAGES[type_] = cls
        return cls

    return register


@_message(T.RLERROR, "I")
@dataclass(frozen=True, slots=True)
class Rlerror(Message):
    ecode: int


@_message(T.TSTATFS, "I")
@dataclass(frozen=True, slots=True)
class Tstatfs(Message):
    fid: int


@_message(T.RSTATFS, "IIQQQQQQI")
@dataclass(frozen=True, slots=True)
class Rstatfs(Message):
    type: int
    bsize: int
    blocks: int
    bfree: int
    bavail: int
    files: int
    ffree: int
    fsid: int
    namelen: int


@_message(T.TLOPEN, "II")
@dataclass(frozen=True, slots=True)
class Tlopen(Message):
    fid: int
    flags: int


@_message(T.RLOPEN, "qI")
@dataclass(frozen=True, slots=True)
class Rlopen(Message):
    qid: Qid
    iounit: int


@_message(T.TLCREATE, "IsIII")
@dataclass(frozen=True, slots=True)
class Tlcreate(Message):
    fid: int
    name: str
    flags: int
    mode: int
    gid: int


@_message(T.RLCREATE, "qI")
@dataclass(frozen=True, slots=True)
class Rlcreate(Message):
    qid: Qid
    iounit: int


@_message(T.TSYMLINK, "IssI")
@dataclass(frozen=True, slots=True)
class Tsymlink(Message):
    fid: int
    name: str
    symtgt: str
    gid: int


@_message(T.RSYMLINK, "q")
@dataclass(frozen=True, slots=True)
class Rsymlink(Message):
    qid: Qid


@_message(T.TMKNOD, "IsIIII")
@dataclass(frozen=True, slots=True)
class Tmknod(Message):
    dfid: int
    name: str
    mode: int
    major: int
    minor: int
    gid: int


@_message(T.RMKNOD, "q")
@dataclass(frozen=True, slots=True)
class Rmknod(Message):
    qid: Qid


@_message(T.TRENAME, "IIs")
@dataclass(frozen=True, slots=True)
class Trename(Message):
    fid: int
    dfid: int
    name: str


@_message(T.RRENAME, "")
@dataclass(frozen=True, slots=True)
class Rrename(Message):
    pass


@_message(T.TREADLINK, "I")
@dataclass(frozen=True, slots=True)
class Treadlink(Message):
    fid: int


@_message(T.RREADLINK, "s")
@dataclass(frozen=True, slots=True)
class Rreadlink(Message):
    target: str


@_message(T.TGETATTR, "IQ")
@dataclass(frozen=True, slots=True)
class Tgetattr(Message):
    fid: int
    request_mask: int


@_message(T.RGETATTR, "QqIIIQQQQQQQQQQQQQQQ")
@dataclass(frozen=True, slots=True)
class Rgetattr(Message):
    valid: int
    qid: Qid
    mode: int
    uid: int
    gid: int
    nlink: int
    rdev: int
    size: int
    blksize: int
    blocks: int
    atime_sec: int
    atime_nsec: int
    mtime_sec: int
    mtime_nsec: int
    ctime_sec: int
    ctime_nsec: int
    btime_sec: int
    btime_nsec: int
    gen: int
    data_version: int


@_message(T.TSETATTR, "IIIIIQQQQQ")
@dataclass(frozen=True, slots=True)
class Tsetattr(Message):
    fid: int
    valid: int
    mode: int
    uid: int
    gid: int
    size: int
    atime_sec: int
    atime_nsec: int
    mtime_sec: int
    mtime_nsec: int


@_message(T.RSETATTR, "")
@dataclass(frozen=True, slots=True)
class Rsetattr(Message):
    pass


@_message(T.TXATTRWALK, "IIs")
@dataclass(frozen=True, slots=True)
class Txattrwalk(Message):
    fid: int
    newfid: int
    name: str


@_message(T.RXATTRWALK, "Q")
@dataclass(frozen=True, slots=True)
class Rxattrwalk(Message):
    size: int


@_message(T.TXATTRCREATE, "IsQI")
@dataclass(frozen=True, slots=True)
class Txattrcreate(Message):
    fid: int
    name: str
    attr_size: int
    flags: int


@_message(T.RXATTRCREATE, "")
@dataclass(frozen=True, slots=True)
class Rxattrcreate(Message):
    pass


@_message(T.TREADDIR, "IQI")
@dataclass(frozen=True, slots=True)
class Treaddir(Message):
    fid: int
    offset: int
    count: int


@_message(T.RREADDIR, "d")
@dataclass(frozen=True, slots=True)
class Rreaddir(Message):
    """``data`` holds packed directory entries; see :func:`codec.encode_dirents`."""

    data: Buffer


@_message(T.TFSYNC, "II")
@dataclass(frozen=True, slots=True)
class Tfsync(Message):
    fid: int
    datasync: int


@_message(T.RFSYNC, "")
@dataclass(frozen=True, slots=True)
class Rfsync(Message):
    pass


@_message(T.TLOCK, "IBIQQIs")
@dataclass(frozen=True, slots=True)
class Tlock(Message):
    fid: int
    type: int
    flags: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_message(T.RLOCK, "B")
@dataclass(frozen=True, slots=True)
class Rlock(Message):
    status: int


@_message(T.TGETLOCK, "IBQQIs")
@dataclass(frozen=True, slots=True)
class Tgetlock(Message):
    fid: int
    type: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_message(T.RGETLOCK, "BQQIs")
@dataclass(frozen=True, slots=True)
class Rgetlock(Message):
    type: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_message(T.TLINK, "IIs")
@dataclass(frozen=True, slots=True)
class Tlink(Message):
    dfid: int
    fid: int
    name: str


@_message(T.RLINK, "")
@dataclass(frozen=True, slots=True)
class Rlink(Message):
    pass


@_message(T.TMKDIR, "IsII")
@dataclass(frozen=True, slots=True)
class Tmkdir(Message):
    dfid: int
    name: str
    mode: int
    gid: int


@_message(T.RMKDIR, "q")
@dataclass(frozen=True, slots=True)
class Rmkdir(Message):
    qid: Qid


@_message(T.TRENAMEAT, "IsIs")
@dataclass(frozen=True, slots=True)
class Trenameat(Message):
    olddirfid: int
    oldname: str
    newdirfid: int
    newname: str


@_message(T.RRENAMEAT, "")
@dataclass(frozen=True, slots=True)
class Rrenameat(Message):
    pass


@_message(T.TUNLINKAT, "IsI")
@dataclass(frozen=True, slots=True)
class Tunlinkat(Message):
    dirfid: int
    name: str
    flags: int


@_message(T.RUNLINKAT, "")
@dataclass(frozen=True, slots=True)
class Runlinkat(Message):
    pass


@_message(T.TVERSION, "Is")
@dataclass(frozen=True, slots=True)
class Tversion(Message):
    msize: int
    version: str


@_message(T.RVERSION, "Is")
@dataclass(frozen=True, slots=True)
class Rversion(Message):
    msize: int
    version: str


@_message(T.TAUTH, "IssI")
@dataclass(frozen=True, slots=True)
class Tauth(Message):
    afid: int
    uname: str
    aname: str
    n_uname: int


@_message(T.RAUTH, "q")
@dataclass(frozen=True, slots=True)
class Rauth(Message):
    aqid: Qid


@_message(T.TATTACH, "IIssI")
@dataclass(frozen=True, slots=True)
class Tattach(Message):
    fid: int
    afid: int
    uname: str
    aname: str
    n_uname: int


@_message(T.RATTACH, "q")
@dataclass(frozen=True, slots=True)
class Rattach(Message):
    qid: Qid


@_message(T.TFLUSH, "H")
@dataclass(frozen=True, slots=True)
class Tflush(Message):
    oldtag: int


@_message(T.RFLUSH, "")
@dataclass(frozen=True, slots=True)
class Rflush(Message):
    pass


@_message(T.TWALK, "IIS")
@dataclass(frozen=True, slots=True)
class Twalk(Message):
    fid: int
    newfid: int
    wnames: tuple[str, ...]


@_message(T.RWALK, "W")
@dataclass(frozen=True, slots=True)
class Rwalk(Message):
    qids: tuple[Qid, ...]


@_message(T.TREAD, "IQI")
@dataclass(frozen=True, slots=True)
class Tread(Message):
    fid: int
    offset: int
    count: int


@_message(T.RREAD, "d")
@dataclass(frozen=True, slots=True)
class Rread(Message):
    data: Buffer


@_message(T.TWRITE, "IQd")
@dataclass(frozen=True, slots=True)
class Twrite(Message):
    fid: int
    offset: int
    data: Buffer


@_message(T.RWRITE, "I")
@dataclass(frozen=True, slots=True)
class Rwrite(Message):
    count: int


@_message(T.TCLUNK, "I")
@dataclass(frozen=True, slots=True)
class Tclunk(Message):
    fid: int


@_message(T.RCLUNK, "")
@dataclass(frozen=True, slots=True)
class Rclunk(Message):
    pass


@_message(T.TREMOVE, "I")
@dataclass(frozen=True, slots=True)
class Tremove(Message):
    fid: int


@_message(T.RREMOVE, "")
@dataclass(frozen=True, slots=True)
class Rremove(Message):
    pass


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of an Rreaddir payload; ``offset`` is the cookie that resumes after this entry."""

    qid: Qid
    offset: int
    type: int
    name: str
