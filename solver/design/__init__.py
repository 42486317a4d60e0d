"""The command services above the planner: ``estimate``, ``compare``, ``rent-vs-buy`` (:mod:`.breakeven`), the
solver-free checker (:mod:`.check`) and ``export``. Each evaluates and prices through :mod:`clusterplan.evaluation`.
"""
