"""The examples in the probes' and results' docstrings are run."""

from __future__ import annotations

import doctest

import pytest

from gpuplan.probes import collectives, membw, serve, serve_spec
from gpuplan.results import privacy


@pytest.mark.parametrize("module", [collectives, membw, privacy, serve, serve_spec])
def test_docstring_examples(module):
    failures, tried = doctest.testmod(module, verbose=False)
    assert tried > 0 and failures == 0
