"""The CP-SAT planner: candidate table -> model -> ranked designs -> explanation.

``variables`` (one container), ``constraints`` (one module per family), ``builder`` (the numbered
formulation), ``solve`` (status, determinism, top K), ``explain`` and ``infeasibility``.
"""
