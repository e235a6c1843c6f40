"""9P2000.L numbers: message types, qid types, flag and mask bits (Linux ``include/net/9p/9p.h``)."""

from __future__ import annotations

from enum import IntEnum, IntFlag

VERSION_9P2000_L = "9P2000.L"
VERSION_UNKNOWN = "unknown"

NOTAG = 0xFFFF
NOFID = 0xFFFFFFFF
NONUNAME = 0xFFFFFFFF

HEADER_SIZE = 7  # size[4] type[1] tag[2]
IOHDRSZ = 24  # what clients reserve for a Tread/Twrite header: msize - IOHDRSZ is the payload
RREAD_HEADER = 11  # size[4] type[1] tag[2] count[4]
MAXWELEM = 16  # most names one Twalk may carry

DEFAULT_MAX_MSIZE = 1 << 20
MIN_MSIZE = 4096


class MessageType(IntEnum):
    TLERROR = 6
    RLERROR = 7
    TSTATFS = 8
    RSTATFS = 9
    TLOPEN = 12
    RLOPEN = 13
    TLCREATE = 14
    RLCREATE = 15
    TSYMLINK = 16
    RSYMLINK = 17
    TMKNOD = 18
    RMKNOD = 19
    TRENAME = 20
    RRENAME = 21
    TREADLINK = 22
    RREADLINK = 23
    TGETATTR = 24
    RGETATTR = 25
    TSETATTR = 26
    RSETATTR = 27
    TXATTRWALK = 30
    RXATTRWALK = 31
    TXATTRCREATE = 32
    RXATTRCREATE = 33
    TREADDIR = 40
    RREADDIR = 41
    TFSYNC = 50
    RFSYNC = 51
    TLOCK = 52
    RLOCK = 53
    TGETLOCK = 54
    RGETLOCK = 55
    TLINK = 70
    RLINK = 71
    TMKDIR = 72
    RMKDIR = 73
    TRENAMEAT = 74
    RRENAMEAT = 75
    TUNLINKAT = 76
    RUNLINKAT = 77
    TVERSION = 100
    RVERSION = 101
    TAUTH = 102
    RAUTH = 103
    TATTACH = 104
    RATTACH = 105
    TFLUSH = 108
    RFLUSH = 109
    TWALK = 110
    RWALK = 111
    TREAD = 116
    RREAD = 117
    TWRITE = 118
    RWRITE = 119
    TCLUNK = 120
    RCLUNK = 121
    TREMOVE = 122
    RREMOVE = 123


class QidType(IntFlag):
    FILE = 0x00
    SYMLINK = 0x02
    TMP = 0x04
    AUTH = 0x08
    MOUNT = 0x10
    EXCL = 0x20
    APPEND = 0x40
    DIR = 0x80


class OpenFlag(IntFlag):
    """Tlopen/Tlcreate flags (P9_DOTL_*); the access mode is the low two bits."""

    RDONLY = 0o0
    WRONLY = 0o1
    RDWR = 0o2
    NOACCESS = 0o3
    CREATE = 0o100
    EXCL = 0o200
    NOCTTY = 0o400
    TRUNC = 0o1000
    APPEND = 0o2000
    NONBLOCK = 0o4000
    DSYNC = 0o10000
    FASYNC = 0o20000
    DIRECT = 0o40000
    LARGEFILE = 0o100000
    DIRECTORY = 0o200000
    NOFOLLOW = 0o400000
    NOATIME = 0o1000000
    CLOEXEC = 0o2000000
    SYNC = 0o4000000


ACCESS_MODE_MASK = 0o3


class GetattrMask(IntFlag):
    MODE = 0x1
    NLINK = 0x2
    UID = 0x4
    GID = 0x8
    RDEV = 0x10
    ATIME = 0x20
    MTIME = 0x40
    CTIME = 0x80
    INO = 0x100
    SIZE = 0x200
    BLOCKS = 0x400
    BTIME = 0x800
    GEN = 0x1000
    DATA_VERSION = 0x2000
    BASIC = 0x7FF
    ALL = 0x3FFF


class SetattrMask(IntFlag):
    MODE = 0x1
    UID = 0x2
    GID = 0x4
    SIZE = 0x8
    ATIME = 0x10
    MTIME = 0x20
    CTIME = 0x40
    ATIME_SET = 0x80
    MTIME_SET = 0x100


class LockType(IntEnum):
    RDLCK = 0
    WRLCK = 1
    UNLCK = 2


class LockStatus(IntEnum):
    SUCCESS = 0
    BLOCKED = 1
    ERROR = 2
    GRACE = 3


AT_REMOVEDIR = 0x200
V9FS_MAGIC = 0x01021997
