from relay_support import deploy, server, target

__all__ = ["deploy", "server", "target"]
