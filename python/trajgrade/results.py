"""`LazyGradeResult`: a `GradeResult` kept as the core's bytes until something reads it.

`CompiledSuite.grade_batch` returns these, so a batch costs one small object per trace instead
of a protobuf decode per trace: decoding into Python objects used to cost more than grading.
The class lives in the binding (`trajgrade._core`), which builds one per graded trace around
the core's buffer, in the pass that takes the core's outcomes.
"""

from __future__ import annotations

from trajgrade._core import LazyGradeResult

__all__ = ["LazyGradeResult"]
