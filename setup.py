"""Build hook for the optional compiled record scan (kesque/records/_cscan.c) and request time
histograms (kesque/metrics/_cfold.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and kesque uses the pure-Python versions (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kesque.records._cscan", ["kesque/records/_cscan.c"], optional=True),
        Extension("kesque.metrics._cfold", ["kesque/metrics/_cfold.c"], optional=True),
    ]
)
