"""A deterministic simulator: seeded scheduler, faulty network and disks, invariants after every
event. ``python -m kesque.sim --scenario NAME --seed N`` replays one run."""

from .scenarios import SCENARIOS, Run, run
from .scheduler import InvariantViolation, LivenessViolation, Scheduler, SimulationError

__all__ = ["SCENARIOS", "InvariantViolation", "LivenessViolation", "Run", "Scheduler", "SimulationError", "run"]
