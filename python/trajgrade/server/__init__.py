"""The gRPC grading server (GraderService over grpc.aio, batching in front of the core)."""

from trajgrade.server.app import GradingServer, serve
from trajgrade.server.settings import Settings

__all__ = ["GradingServer", "Settings", "serve"]
