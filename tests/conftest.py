"""pytest setup shared by every test directory: assert rewriting for the reference helpers."""

import pytest

# The reference model and the conformance comparison use plain `assert`; rewrite them so a
# failing case shows the differing values.
pytest.register_assert_rewrite("reference.conformance")
