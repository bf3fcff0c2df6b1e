"""The power-loss file layer, for the tests that import it by this name: it lives in
:mod:`kesque.sim.powerloss`, where the simulator uses it too."""

from kesque.sim.powerloss import Node, PowerLossFS

__all__ = ["Node", "PowerLossFS"]
