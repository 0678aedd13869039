import pytest

# The matrix's checks live in helpers.py: let pytest show what differed there.
pytest.register_assert_rewrite("tests.frameworks.helpers")
