from relay_support import deploy, live, server, target

__all__ = ["deploy", "live", "server", "target"]
