"""The dockerhost backend: deployments as containers on a Docker engine of this machine."""

from .backend import DockerBackend
from .engine import Engine, EngineError, LogDemuxer, LogError

__all__ = ["DockerBackend", "Engine", "EngineError", "LogDemuxer", "LogError"]
