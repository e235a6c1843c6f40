from .mount_support import pod, server

__all__ = ["pod", "server"]
