"""trajgrade: deterministic grading of AI-agent tool-call trajectories."""

from trajgrade._core import __version__

__all__ = ["__version__"]
