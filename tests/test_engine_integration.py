"""Sampled decode-step integration: weights sum to the step count and are exact for linear costs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.sim.engine import decode_step_weights


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 3000), st.integers(2, 40), st.floats(0, 10), st.floats(-1, 1))
def test_sampled_weights_integrate_linear_costs_exactly(output_len, samples, a, b):
    steps, w = decode_step_weights(output_len, "sampled", samples)
    n = output_len - 1
    assert steps.min() == 1 and steps.max() == n
    assert np.isclose(w.sum(), n)
    assert np.all(w >= 0)
    f = lambda j: a + b * j  # noqa: E731
    exact = sum(f(j) for j in range(1, n + 1))
    assert np.isclose(np.sum(w * f(steps)), exact, rtol=1e-9, atol=1e-9)


def test_exact_mode_is_every_step():
    steps, w = decode_step_weights(128, "exact", 5)
    assert list(steps) == list(range(1, 128)) and np.all(w == 1)


def test_single_token_output_has_no_decode_steps():
    steps, w = decode_step_weights(1, "exact", 5)
    assert len(steps) == 0 and len(w) == 0
