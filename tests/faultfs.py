"""The fault-injecting file layer, for the tests that import it by this name: it lives in
:mod:`kesque.sim.faultfs`, where the simulator uses it too."""

from kesque.sim.faultfs import POINTS, FaultFS

__all__ = ["POINTS", "FaultFS"]
