"""The benchmark harness: reproducible measurements written as JSON to benchmarks/out/.

Run all with ``make bench`` (``python -m benchmarks``) or one with
``python -m benchmarks NAME``. ``--quick`` runs a short smoke pass (used by the test
suite's ``perf`` tier; its figures are not reported).
"""
