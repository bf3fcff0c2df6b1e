"""The real broker under the simulator on SWEEP seeds each, the second half (xdist runs each file
on one worker): a quorum of three controllers, and transactions (the ``*_short`` scenarios; see
tests/test_sim_real_sweep.py, which says why ``make test`` runs the first DEFAULT_SEEDS of each
and ``make sweep`` all SWEEP). A failing seed's message ends with its replay command."""

from __future__ import annotations

import pytest

from sim_seeds import sweep
from test_sim_real_sweep import DEFAULT_SEEDS, SWEEP, SWEEP_TIMEOUT, other_seeds_or_skip


def test_a_controller_quorum_holds_on_every_seed():
    assert sweep("real_controller_quorum_short", DEFAULT_SEEDS, least=10) > 0


def test_transactions_are_exactly_once_on_every_seed():
    assert sweep("real_transactions_short", DEFAULT_SEEDS, least=1) > 0


@pytest.mark.sim_sweep
@pytest.mark.timeout(SWEEP_TIMEOUT)
def test_a_controller_quorum_holds_on_the_other_seeds():
    other_seeds_or_skip()
    assert sweep("real_controller_quorum_short", SWEEP, least=10, start=DEFAULT_SEEDS) > 0


@pytest.mark.sim_sweep
@pytest.mark.timeout(SWEEP_TIMEOUT)
def test_transactions_are_exactly_once_on_the_other_seeds():
    other_seeds_or_skip()
    assert sweep("real_transactions_short", SWEEP, least=1, start=DEFAULT_SEEDS) > 0
